"""gmlp.train: the CLI's trainer with file or in-memory data, callbacks, resumption."""
import json

import numpy as np
import pytest

import gmlp
from conftest import TEXT, TINY, TINY_TRAIN


def lines_of(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_session_run_wrote_a_cli_run_directory(lm_run):
    for f in ("model.safetensors", "train_state.safetensors", "metrics.jsonl", "config.json"):
        assert (lm_run / f).exists()
    lines = lines_of(lm_run)
    assert [x["step"] for x in lines if "loss" in x] == [5, 10, 15, 20, 25, 30]
    assert [x["step"] for x in lines if "val_loss" in x] == [15, 30]
    assert lines[-1]["val_loss"] < lines[0]["loss"]


def test_callbacks_see_every_line_and_can_stop_then_resume(corpus, tmp_path):
    seen = []

    def stop_at_10(line):
        seen.append(line)
        return line["step"] < 10

    cfg = {"model": dict(TINY, tokenizer={"kind": "char"}), "train": TINY_TRAIN}
    s = gmlp.train(cfg, data=corpus, out=tmp_path / "r", callbacks=[stop_at_10])
    assert s["interrupted"] and s["steps"] == 10
    assert [x["step"] for x in seen] == [5, 10] and {"loss", "lr", "grad_norm", "tokens_per_s"} <= set(seen[0])
    assert seen == lines_of(tmp_path / "r")
    # resumed, it finishes exactly like an uninterrupted run
    s2 = gmlp.train(out=tmp_path / "r", resume=True)
    assert s2["steps"] == 30 and not s2["interrupted"]
    whole = gmlp.train(cfg, data=corpus, out=tmp_path / "whole")
    assert s2["last_loss"] == whole["last_loss"]
    assert lines_of(tmp_path / "r")[-1]["val_loss"] == lines_of(tmp_path / "whole")[-1]["val_loss"]


def test_gradient_accumulation_is_the_run_in_pieces(corpus, tmp_path):
    cfg = {"model": dict(TINY, tokenizer={"kind": "char"}), "train": dict(TINY_TRAIN, steps=10)}
    whole = gmlp.train(cfg, data=corpus, out=tmp_path / "whole")
    cfg["train"]["grad_accum"] = 2
    pieces = gmlp.train(cfg, data=corpus, out=tmp_path / "pieces")
    assert json.loads((tmp_path / "pieces" / "config.json").read_text())["train"]["grad_accum"] == 2
    # the same run, summed in other pieces: the same losses to rounding, not the same bits
    assert pieces["last_loss"] == pytest.approx(whole["last_loss"], rel=1e-5)
    assert pieces["last_loss"] != whole["last_loss"]
    cfg["train"]["grad_accum"] = 3
    with pytest.raises(ValueError, match="must be a multiple of 'grad_accum' \\(3\\)"):
        gmlp.train(cfg, data=corpus, out=tmp_path / "bad")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="grad_accum"):
            gmlp.train(cfg, data=corpus, out=tmp_path / "bad", grad_accum=bad)
    # the keyword: a new run's setting, and a resumed run's new one
    del cfg["train"]["grad_accum"]
    half = gmlp.train(cfg, data=corpus, out=tmp_path / "moved", grad_accum=np.int64(2), callbacks=lambda l: l["step"] < 5)
    assert half["interrupted"]
    assert json.loads((tmp_path / "moved" / "config.json").read_text())["train"]["grad_accum"] == 2
    moved = gmlp.train(out=tmp_path / "moved", resume=True, grad_accum=4)
    assert moved["steps"] == 10
    assert json.loads((tmp_path / "moved" / "config.json").read_text())["train"]["grad_accum"] == 4
    assert moved["last_loss"] == pytest.approx(whole["last_loss"], rel=1e-5)


def test_a_callback_exception_stops_the_run_after_a_checkpoint(corpus, tmp_path):
    def boom(line):
        raise KeyError("from the callback")

    cfg = {"model": dict(TINY, tokenizer={"kind": "char"}), "train": TINY_TRAIN}
    with pytest.raises(KeyError, match="from the callback"):
        gmlp.train(cfg, data=corpus, out=tmp_path / "r", callbacks=boom)
    assert gmlp.Model.load(tmp_path / "r").config["d_model"] == 16  # checkpoint of step 5


def test_in_memory_tokens_and_text_match_the_file(corpus, tmp_path):
    cfg = {"model": dict(TINY), "train": dict(TINY_TRAIN, steps=10)}  # byte tokenizer
    from_file = gmlp.train(cfg, data=corpus, out=tmp_path / "f")
    ids = np.frombuffer(TEXT.encode(), dtype=np.uint8).astype(np.int64)
    from_ids = gmlp.train(cfg, data=ids, out=tmp_path / "t")
    from_text = gmlp.train(cfg, data={"text": TEXT}, out=tmp_path / "x")
    assert from_file["last_loss"] == from_ids["last_loss"] == from_text["last_loss"]
    assert from_file["val"] == from_ids["val"] == from_text["val"]
    with pytest.raises(gmlp.Error, match="token id 300 at index 2 is outside the vocabulary of 256"):
        gmlp.train(cfg, data=np.array([1, 2, 300] * 100), out=tmp_path / "bad")
    with pytest.raises(ValueError, match="resume"):
        gmlp.train(out=tmp_path / "t", resume=True, data=str(corpus))
    # a run on data in memory resumes with data in memory
    with pytest.raises(gmlp.Error, match="in memory"):
        gmlp.train(out=tmp_path / "t", resume=True, data=None)
    assert gmlp.train(out=tmp_path / "t", resume=True, data=ids, steps=12)["steps"] == 12


def test_classify_from_labelled_texts(tmp_path):
    words = {0: "alpha beta gamma", 1: "one two three", 2: "red green blue"}
    r = np.random.default_rng(0)
    labels = r.integers(0, 3, 60)
    texts = [words[int(y)] + " " + words[int(y)].split()[int(r.integers(0, 3))] for y in labels]
    cfg = {"model": {"task": "classify", "d_model": 16, "d_ffn": 32, "n_layers": 1, "seq_len": 24},
           "train": {"batch_size": 8, "steps": 60, "log_every": 20, "eval_every": 60, "eval_batches": 0,
                     "lr": 1e-2, "warmup": 5, "val_fraction": 0.2}}
    s = gmlp.train(cfg, data=(texts, labels), test=(texts[:12], labels[:12]), out=tmp_path / "c")
    # validation is a fifth of each class held out of the training texts (the test set is
    # scored once at the end, into report.json)
    held = sum(int(c * 0.2 + 0.5) for c in np.bincount(labels))
    assert s["val"]["val_examples"] == held and s["val"]["val_acc"] > 0.9
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["test"]["examples"] == 12
    m = gmlp.Model.load(tmp_path / "c")
    assert m.class_names == ["0", "1", "2"]
    p = m.classify(["one two three two", "red green blue red"])
    assert p.shape == (2, 3) and np.allclose(p.sum(axis=1), 1, atol=1e-5)
    assert m.predict(["one two three two", "red green blue red"]) == ["1", "2"]
    assert m.classify("alpha beta gamma beta").shape == (3,)
    # named labels: classes in order of first appearance, as a labelled file gives them
    named = [["law", "prophets", "gospels"][int(y)] for y in labels]
    gmlp.train(cfg, data={"texts": texts, "labels": named}, out=tmp_path / "n", steps=5)
    assert gmlp.Model.load(tmp_path / "n").class_names == list(dict.fromkeys(named))
    with pytest.raises(ValueError, match=r"test texts\[0\]: label \"poetry\""):
        gmlp.train(cfg, data=(texts, named), test=(texts[:1], ["poetry"]), out=tmp_path / "e")
    with pytest.raises(ValueError, match="texts: 60 texts but 59 labels"):
        gmlp.train(cfg, data=(texts, named[:-1]), out=tmp_path / "e")


def word_texts(n, seed):
    """n texts of three classes, each class its own words."""
    words = {0: "alpha beta gamma", 1: "one two three", 2: "red green blue"}
    r = np.random.default_rng(seed)
    labels = r.integers(0, 3, n)
    return [words[int(y)] + " " + words[int(y)].split()[int(r.integers(0, 3))] for y in labels], labels


CLASSIFY = {"model": {"task": "classify", "d_model": 16, "d_ffn": 32, "n_layers": 1, "seq_len": 24},
            "train": {"batch_size": 8, "steps": 16, "log_every": 4, "eval_every": 4, "eval_batches": 0,
                      "lr": 1e-2, "warmup": 2, "min_lr": 0.0}}


def test_validation_texts_replace_the_split_and_choose_the_checkpoint(tmp_path):
    texts, labels = word_texts(48, 0)
    vt, vl = word_texts(12, 1)
    s = gmlp.train(CLASSIFY, data=(texts, labels), val=(vt, vl), test=(vt[:6], vl[:6]), out=tmp_path / "c")
    assert s["val"]["val_examples"] == 12  # all of val; nothing held out of the 48
    rep = s["report"]
    assert rep["train_examples"] == 48 and rep["test"]["examples"] == 6
    assert s["model"] == str(tmp_path / "c" / "best.safetensors") and rep["selected"]["step"] > 0
    with pytest.raises(ValueError, match="val: with data from a file, the val data is a file too"):
        gmlp.train(CLASSIFY, data=str(tmp_path / "x.tsv"), val=(vt, vl), out=tmp_path / "e")
    with pytest.raises(ValueError, match=r"validation texts\[0\]: label \"poetry\""):
        gmlp.train(CLASSIFY, data=(texts, [str(v) for v in labels]), val=(vt[:1], ["poetry"]), out=tmp_path / "e")
    with pytest.raises(ValueError, match="val: validation texts are for a classifier"):
        gmlp.train({"model": TINY}, data={"text": TEXT}, val=(vt, vl), out=tmp_path / "e")
    assert not (tmp_path / "e").exists()


def test_the_weights_average_is_evaluated_scored_and_saved(tmp_path):
    """train.model_ema: the average's evaluations beside the weights' (ema_* in val), its
    test score in the report, its model file; a run without it has none."""
    texts, labels = word_texts(48, 0)
    vt, vl = word_texts(12, 1)
    config = {"model": CLASSIFY["model"], "train": {**CLASSIFY["train"], "model_ema": 0.8}}
    s = gmlp.train(config, data=(texts, labels), val=(vt, vl), test=(vt[:6], vl[:6]), out=tmp_path / "a")
    assert s["val"]["ema_val_examples"] == 12 and 0 <= s["val"]["ema_val_acc"] <= 1
    assert s["report"]["ema"]["test"]["examples"] == 6
    assert s["ema_model"] == str(tmp_path / "a" / "model_ema.safetensors")
    averaged = gmlp.Model.load(s["ema_model"])
    assert averaged.config == gmlp.Model.load(str(tmp_path / "a" / "model.safetensors")).config
    plain = gmlp.train(CLASSIFY, data=(texts, labels), val=(vt, vl), test=(vt[:6], vl[:6]), out=tmp_path / "p")
    assert plain["ema_model"] is None and "ema" not in plain["report"]
    assert "ema_val_acc" not in plain["val"]


def test_a_grid_chooses_by_validation_and_a_refit_is_the_model_tested(tmp_path):
    texts, labels = word_texts(48, 2)
    vt, vl = word_texts(12, 3)
    seen = []
    s = gmlp.train(CLASSIFY, data=(texts, labels), val=(vt, vl), test=(vt[:6], vl[:6]), out=tmp_path / "g",
                   grid={"lr": [1e-9, 1e-2], "epochs": [1, 2]}, refit=True, callbacks=seen.append)
    table = s["search"]
    assert [t["name"] for t in table["settings"]] == ["lr=1e-09_epochs=1", "lr=0.01_epochs=1",
                                                     "lr=1e-09_epochs=2", "lr=0.01_epochs=2"]
    assert table == json.loads((tmp_path / "g" / "grid.json").read_text())
    assert "lr=0.01" in table["chosen"] and table["refit"] and table["by"] == "val_acc"
    for t in table["settings"]:  # no trial met the test set; each trained its epochs
        rep = json.loads((tmp_path / "g" / t["name"] / "report.json").read_text())
        assert rep["test"] is None and rep["train_examples"] == 48
    assert s["model"] == str(tmp_path / "g" / "refit" / "model.safetensors") == table["model"]
    assert s["report"]["train_examples"] == 60 and s["report"]["test"] == table["test"]
    assert s["report"]["test"]["examples"] == 6
    runs = [tmp_path / "g" / t["name"] for t in table["settings"]] + [tmp_path / "g" / "refit"]
    assert seen == [x for r in runs for x in lines_of(r)]  # the callbacks saw every trial and the refit
    # a refit without a grid: the chosen run's summary comes with it
    r = gmlp.train(CLASSIFY, data=(texts, labels), val=(vt, vl), test=(vt[:6], vl[:6]), out=tmp_path / "r",
                   refit=True)
    assert r["chosen"]["report"]["test"] is None and r["report"]["test"]["examples"] == 6
    best = r["chosen"]["report"]["selected"]["step"]
    assert r["steps"] == int(np.ceil(np.float32(best * 8 / 48) * 60 / 8))
    # stopped by a callback: the search says where it stopped; a callback's exception propagates
    with pytest.raises(gmlp.Error, match="interrupted during lr=1e-09; its run is in"):
        gmlp.train(CLASSIFY, data=(texts, labels), out=tmp_path / "s", grid={"lr": [1e-9, 1e-2]},
                   callbacks=lambda line: False)

    def boom(line):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        gmlp.train(CLASSIFY, data=(texts, labels), out=tmp_path / "s", grid={"lr": [1e-9]}, callbacks=boom)
    with pytest.raises(ValueError, match="refit: choosing needs validation"):
        gmlp.train(dict(CLASSIFY, train=dict(CLASSIFY["train"], val_fraction=0)), data=(texts, labels),
                   out=tmp_path / "e", refit=True)
    with pytest.raises(ValueError, match="refit: for text classification"):
        gmlp.train({"model": TINY}, data={"text": TEXT}, out=tmp_path / "e", refit=True)
    with pytest.raises(ValueError, match="grid: 'lr' needs a list of values"):
        gmlp.train(CLASSIFY, data=(texts, labels), out=tmp_path / "e", grid={"lr": 1e-3})
    with pytest.raises(gmlp.Error, match="the section must be 'model' or 'train'"):
        gmlp.train(CLASSIFY, data=(texts, labels), out=tmp_path / "e", grid={"optim.lr": [1e-3]})
    assert not (tmp_path / "e").exists()


def test_finetune_config_is_the_commands(gmlp_exe, corpus, tmp_path):
    import subprocess
    mlm = tmp_path / "mlm"
    gmlp.train({"model": dict(TINY, task="mlm"), "train": dict(TINY_TRAIN, steps=4)}, data=corpus, out=mlm)
    texts, labels = word_texts(40, 4)
    data = tmp_path / "train.tsv"
    data.write_text("".join(f"{y}\t{t}\n" for t, y in zip(texts, labels)))
    cfg = gmlp.finetune_config(mlm)
    assert cfg["model"]["task"] == "classify" and cfg["model"]["d_model"] == 16 and cfg["model"]["dropout"] == 0.1
    assert cfg["train"]["val_fraction"] == pytest.approx(0.1) and cfg["train"]["patience"] == 5
    py = gmlp.train(cfg, data=data, out=tmp_path / "py", init_from=mlm, steps=6)
    cli = subprocess.run([gmlp_exe, "finetune", "--init-from", str(mlm), "--data", str(data), "--steps", "6",
                          "--out", str(tmp_path / "cli"), "--no-progress"], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    config = [json.loads((tmp_path / r / "config.json").read_text()) for r in ("py", "cli")]
    assert config[0] == config[1]
    def losses(run):  # the same run: every logged loss equal
        return [(x["step"], x.get("loss"), x.get("val_loss")) for x in lines_of(tmp_path / run)]

    assert losses("py") == losses("cli") and len(losses("py")) >= 2
    assert gmlp.finetune_config()["model"]["task"] == "classify"
    with pytest.raises(FileNotFoundError):
        gmlp.finetune_config(tmp_path / "none")


def test_vision_from_arrays(tmp_path):
    """Bright top half = class 0, bright bottom half = class 1 (uint8 images)."""
    r = np.random.default_rng(1)
    y = r.integers(0, 2, 80)
    x = (r.random((80, 8, 8)) * 60).astype(np.uint8)
    for i, c in enumerate(y):
        x[i, :4] += 150 * (c == 0)
        x[i, 4:] += 150 * (c == 1)
    cfg = {"model": {"task": "vision", "d_model": 16, "d_ffn": 32, "n_layers": 1},
           "train": {"batch_size": 8, "steps": 40, "log_every": 10, "eval_every": 40, "eval_batches": 0,
                     "lr": 1e-2, "warmup": 5}}
    s = gmlp.train(cfg, data=(x, y), test=(x[:20], y[:20]), out=tmp_path / "v")
    assert s["val"]["val_acc"] >= 0.9
    # uint8 is held as bytes, which the model normalises as it reads them: the run over
    # the floats they stand for (byte * float32(1/255)) is the same run, to the bit
    f = x.astype(np.float32) * np.float32(1 / 255)
    sf = gmlp.train(cfg, data=(f, y), test=(f[:20], y[:20]), out=tmp_path / "f")
    losses = [[line["loss"] for line in lines_of(tmp_path / d) if "loss" in line] for d in ("v", "f")]
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    assert sf["val"] == s["val"]
    m = gmlp.Model.load(tmp_path / "v")
    c = m.config
    assert (c["image_channels"], c["image_height"], c["image_width"], c["patch_height"]) == (1, 8, 8, 4)
    assert c["n_classes"] == 2 and len(c["normalization"]["mean"]) == 1
    p = m.classify(x[:20])
    assert p.shape == (20, 2) and (p.argmax(1) == y[:20]).mean() >= 0.9
    np.testing.assert_allclose(m.classify(x[3]), p[3], rtol=1e-5)  # one image
    np.testing.assert_allclose(m.classify(x[:20].astype(np.float32) / 255), p, rtol=1e-5)
    # many images go 64 a forward; each row is its image's alone, whichever batch it fell in
    big = np.concatenate([x, x])
    pb = m.classify(big)
    assert pb.shape == (160, 2)
    for i in (0, 63, 64, 127, 128, 159):
        np.testing.assert_allclose(pb[i], m.classify(big[i]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(m.classify(big.astype(np.float32) / 255)[100:], pb[100:], rtol=1e-5)
    # logits take uint8 pixels too, normalised by the model as classify's are; floats are
    # taken as the network takes them, normalised by the caller
    lb = m.logits(x[:20, None])
    assert lb.shape == (20, 2) and m.logits(x[3, None]).shape == (2,)
    e = np.exp(lb - lb.max(1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(1, keepdims=True), p, rtol=1e-5)
    mean, std = c["normalization"]["mean"][0], c["normalization"]["std"][0]
    np.testing.assert_allclose(m.logits((f[:20, None] - mean) / std), lb, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="test: label 9 at index 1"):
        gmlp.train(cfg, data=(x, np.where(y == 1, 7, 0)), test=(x[:2], np.array([0, 9])), out=tmp_path / "e")


def test_init_from_copies_the_checkpoint(lm_run, corpus, tmp_path):
    cfg = {"model": gmlp.Model.load(lm_run).config,
           "train": dict(TINY_TRAIN, steps=1, schedule="constant", lr=1e-12, min_lr=0.0, weight_decay=0.0)}
    gmlp.train(cfg, data=corpus, out=tmp_path / "ft", init_from=lm_run)
    src, dst = gmlp.Model.load(lm_run).state_dict(), gmlp.Model.load(tmp_path / "ft").state_dict()
    for name in src:
        if name.startswith("head."):  # the head is always new
            assert not np.allclose(dst[name], src[name])
        else:
            np.testing.assert_allclose(dst[name], src[name], atol=1e-8)
    with pytest.raises(FileNotFoundError):
        gmlp.train(cfg, data=corpus, out=tmp_path / "ft2", init_from=tmp_path / "none")


def test_ctrl_c_stops_training_after_a_checkpoint(corpus, tmp_path):
    import os
    import signal
    import threading
    cfg = {"model": dict(TINY), "train": dict(TINY_TRAIN, steps=100000, log_every=2)}
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))

    def start_the_timer(line):  # once training runs: the signal lands inside the engine
        if not timer.is_alive() and not timer.finished.is_set():
            timer.start()

    with pytest.raises(KeyboardInterrupt):
        gmlp.train(cfg, data=corpus, out=tmp_path / "r", callbacks=start_the_timer)
    timer.join()
    step = lines_of(tmp_path / "r")[-1]["step"]
    assert 2 < step < 100000
    # the checkpoint is the stopped step's: resumed, the run goes on to the next
    # training line (log_every 2) and stops there
    s = gmlp.train(out=tmp_path / "r", resume=True, callbacks=lambda line: "loss" not in line)
    assert s["interrupted"] and s["steps"] == step + 2 - step % 2
