"""Generation: the CLI's sampler and seeds, streaming, stopping early."""
import subprocess

import numpy as np
import pytest

import gmlp


def test_generate_matches_the_cli(lm, lm_run, gmlp_exe):
    text = lm.generate("And God", max_tokens=40, temperature=0.9, top_k=10, top_p=0.95, seed=11)
    out = subprocess.run([gmlp_exe, "generate", "--model", str(lm_run), "--prompt", "And God", "--max-tokens", "40",
                          "--temperature", "0.9", "--top-k", "10", "--top-p", "0.95", "--seed", "11"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "And God" + text + "\n"
    assert len(lm.encode(text)) == 40


def test_seeds_and_greedy(lm):
    a = lm.generate("In the", max_tokens=30, seed=1)
    assert a == lm.generate("In the", max_tokens=30, seed=1)
    assert a != lm.generate("In the", max_tokens=30, seed=2)
    g = lm.generate_ids("In the", max_tokens=20, temperature=0)
    # greedy: each token is the argmax of the logits of the context so far
    ctx = list(lm.encode("In the"))
    for tok in g[:5]:
        assert tok == int(np.argmax(lm(np.array(ctx))[-1]))
        ctx.append(tok)


def test_generation_slides_past_the_window(lm):
    ids = lm.generate_ids("In the beginning", max_tokens=50, seed=3)  # window 16
    assert len(ids) == 50 and all(0 <= i < lm.config["vocab_size"] for i in ids)


def test_prompt_as_ids(lm):
    assert lm.generate(list(lm.encode("And God")), max_tokens=20, seed=4) == \
        lm.generate("And God", max_tokens=20, seed=4)


def test_stream_yields_the_same_text(lm):
    pieces = list(lm.stream("And God", max_tokens=40, seed=11))
    assert len(pieces) == 40
    assert "".join(pieces) == lm.generate("And God", max_tokens=40, seed=11)


def test_stream_stops_when_left(lm):
    it = lm.stream("And", max_tokens=10_000, seed=5)
    first = [next(it) for _ in range(3)]
    it.close()  # the engine's thread ends (join) rather than generating 10000 tokens
    assert "".join(first) == lm.generate("And", max_tokens=3, seed=5)


def test_stream_checks_its_arguments_at_once(lm):
    with pytest.raises(ValueError, match="top_p|top-p"):
        lm.stream("And", top_p=1.5)
    with pytest.raises(ValueError, match="window"):
        lm.stream("In the beginning God")  # 20 tokens, window 16


def test_byte_model_streams_whole_characters():
    m = gmlp.Model({"d_model": 8, "d_ffn": 16, "n_layers": 1, "seq_len": 8}, seed=3)
    text = "".join(m.stream("é", max_tokens=30, seed=9))  # random bytes: invalid UTF-8 becomes U+FFFD
    assert text == m.generate("é", max_tokens=30, seed=9)
