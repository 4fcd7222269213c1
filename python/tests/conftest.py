"""Fixtures of the gmlp Python tests: the repository, the gmlp program, and one tiny
causal LM trained once per session by gmlp.train (a few seconds)."""
import os
import pathlib
import shutil
import sys

import numpy as np
import pytest

REPO = pathlib.Path(os.environ.get("GMLP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
# The reference's fixtures (tests/reference/dump_fixtures.py) define every variant case.
sys.path.insert(0, str(REPO / "tests" / "reference"))

import gmlp  # noqa: E402  (PYTHONPATH: the build's python/ folder, set by CTest)

TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, "
        "and void; and darkness was upon the face of the deep. ") * 40

TINY = {"d_model": 16, "d_ffn": 32, "n_layers": 2, "seq_len": 16}
TINY_TRAIN = {"batch_size": 4, "steps": 30, "log_every": 5, "eval_every": 15, "eval_batches": 2,
              "ckpt_every": 10, "warmup": 5, "lr": 3e-3}


@pytest.fixture(scope="session")
def gmlp_exe():
    exe = os.environ.get("GMLP_EXE") or str(REPO / "build" / "gmlp")
    if not os.path.exists(exe):
        pytest.fail(f"the gmlp program {exe} is not built")
    return exe


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "corpus.txt"
    p.write_text(TEXT)
    return p


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory, corpus):
    """A run directory with a tiny trained causal LM (char tokenizer from the corpus)."""
    out = tmp_path_factory.mktemp("runs") / "lm"
    cfg = {"model": dict(TINY, tokenizer={"kind": "char"}), "train": TINY_TRAIN}
    summary = gmlp.train(cfg, data=corpus, out=out)
    assert summary["steps"] == 30 and not summary["interrupted"]
    return out


@pytest.fixture
def lm(lm_run):
    return gmlp.Model.load(lm_run)


def rng():
    return np.random.default_rng(7)
