"""Errors: engine failures raise gmlp.Error, bad arguments ValueError, missing files
FileNotFoundError, each with the engine's message; nothing crashes the interpreter."""
import numpy as np
import pytest

import gmlp
from conftest import TINY


def test_error_is_a_runtime_error():
    assert issubclass(gmlp.Error, RuntimeError)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        gmlp.Model.load(tmp_path / "nope.safetensors")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        gmlp.Model.load(tmp_path)  # a directory without a checkpoint
    with pytest.raises(FileNotFoundError, match="corpus.txt"):
        gmlp.train({}, data=tmp_path / "corpus.txt", out=tmp_path / "r")


def test_corrupt_checkpoint_is_an_engine_error(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(gmlp.Error, match="bad.safetensors"):
        gmlp.Model.load(p)


def test_bad_configs_name_the_key():
    with pytest.raises(ValueError, match="d_modle"):
        gmlp.Model({"d_modle": 8})
    with pytest.raises(ValueError, match="d_ffn"):
        gmlp.Model({"d_ffn": 7})
    with pytest.raises(ValueError, match="config"):
        gmlp.Model([1, 2])
    with pytest.raises(ValueError, match="not expressible as JSON"):
        gmlp.Model({"d_model": object()})
    with pytest.raises(ValueError, match="not expressible as JSON"):
        gmlp.Model({"spatial_init": float("nan")})


def test_bad_inputs(lm):
    V = lm.config["vocab_size"]
    with pytest.raises(ValueError, match="expected integers"):
        lm(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="expected integers"):
        lm(["a", "b"])
    with pytest.raises(ValueError, match=f"token id {V} outside the vocabulary"):
        lm(np.array([1, V]))
    with pytest.raises(ValueError, match="token id -1"):
        lm(np.array([-1, 2]))
    with pytest.raises(ValueError, match="does not fit"):
        lm(np.array([2**40]))
    with pytest.raises(ValueError, match="shape"):
        lm(np.zeros((1, 2, 3), np.int32))
    with pytest.raises(ValueError, match="shape"):
        lm(np.zeros((0, 4), np.int32))
    with pytest.raises(ValueError, match="16|seq_len|window"):
        lm(np.zeros(17, np.int32))  # longer than the window
    with pytest.raises(ValueError, match="lengths"):
        lm(np.zeros((2, 4), np.int32), lengths=[4, 4])  # a causal model has no padding
    with pytest.raises(ValueError, match="outside|not in|U\\+"):
        lm.encode("€")  # not in the char vocabulary
    with pytest.raises(TypeError):
        lm.encode(5)


def test_bad_generation_arguments(lm):
    with pytest.raises(ValueError, match="temperature"):
        lm.generate("And", temperature=-1)
    with pytest.raises(ValueError, match="empty"):
        lm.generate("")
    with pytest.raises(ValueError, match="max tokens"):
        lm.generate("And", max_tokens=-2)
    with pytest.raises(ValueError, match="classif"):
        lm.classify(["text"])
    clf = gmlp.Model({"task": "classify", "n_classes": 2, "d_model": 8, "d_ffn": 16, "n_layers": 1, "seq_len": 8,
                      "tokenizer": {"kind": "byte", "specials": ["[PAD]", "[MASK]"]}, "vocab_size": 258})
    with pytest.raises(ValueError, match="causal"):
        clf.generate("x")
    with pytest.raises(ValueError, match="classify model takes"):
        clf.classify(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="texts\\[1\\]: .*no tokens"):
        clf.classify(["fine", ""])


def test_bad_images():
    v = gmlp.Model({"task": "vision", "n_classes": 3, "d_model": 8, "d_ffn": 16, "n_layers": 1,
                    "image_channels": 1, "image_height": 8, "image_width": 8, "patch_height": 4, "patch_width": 4})
    assert v(np.zeros((2, 1, 8, 8), np.float32)).shape == (2, 3)
    with pytest.raises(ValueError, match="expected shape \\[B, 1, 8, 8\\]"):
        v(np.zeros((2, 1, 8, 9), np.float32))
    with pytest.raises(ValueError, match="expected numbers"):
        v(np.array([["a"]]))
    with pytest.raises(ValueError, match="vision model has no tokenizer"):
        v.encode("x")


def test_bad_training_arguments(tmp_path, corpus):
    with pytest.raises(ValueError, match="unknown key 'trian'"):
        gmlp.train({"trian": {}}, data=corpus, out=tmp_path / "r")
    with pytest.raises(ValueError, match="steps"):
        gmlp.train({"train": {"steps": -1}}, data=corpus, out=tmp_path / "r")
    with pytest.raises(ValueError, match="needs data"):
        gmlp.train({}, out=tmp_path / "r")
    with pytest.raises(ValueError, match="saved config"):
        gmlp.train({}, out=tmp_path / "r", resume=True)
    with pytest.raises(gmlp.Error, match="train_state"):
        gmlp.train(out=tmp_path / "nothing", resume=True)
    with pytest.raises(ValueError, match="expected"):
        gmlp.train({"model": dict(TINY)}, data=("a", "b", "c"), out=tmp_path / "r")
