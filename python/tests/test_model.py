"""gmlp.Model: construction, checkpoints, logits, config, and parameters as views."""
import gc
import json
import re

import numpy as np
import pytest
import torch

import gmlp
from conftest import TINY


def test_model_from_config_is_initialised_like_the_trainer():
    m = gmlp.Model(dict(TINY), seed=5)
    assert m.config["d_model"] == 16 and m.config["task"] == "causal_lm"
    assert m.num_params == sum(v.size for v in m.parameters())
    sd = m.state_dict()
    assert np.all(sd["blocks.0.sgu.spatial.bias"] == 1.0)  # docs/model.md: b = 1
    assert np.abs(sd["blocks.0.sgu.spatial.weight"]).max() <= 0.01
    assert not np.array_equal(sd["embed.weight"], gmlp.Model(dict(TINY), seed=6).state_dict()["embed.weight"])
    np.testing.assert_array_equal(sd["embed.weight"], gmlp.Model(dict(TINY), seed=5).state_dict()["embed.weight"])


def test_config_is_a_plain_dict(lm):
    c = lm.config
    json.dumps(c)
    assert c["tokenizer"]["kind"] == "char" and c["vocab_size"] == len(c["tokenizer"]["chars"])
    c["d_model"] = 999  # a copy
    assert lm.config["d_model"] == 16


def test_logits_shapes_and_batch_rows(lm):
    ids = lm.encode("In the beginning")
    assert ids.dtype == np.int32 and len(ids) == 16
    one = lm(ids)
    assert one.shape == (16, lm.config["vocab_size"]) and one.dtype == np.float32
    two = lm.logits(np.stack([ids, ids[::-1]]))
    assert two.shape == (2, 16, lm.config["vocab_size"])
    np.testing.assert_allclose(two[0], one, rtol=1e-5, atol=1e-5)
    # causal: the first 5 positions do not depend on what follows
    np.testing.assert_allclose(lm(ids[:5]), one[:5], rtol=1e-5, atol=1e-5)
    assert not np.allclose(two[1], one)


def test_save_and_load_round_trip(lm, tmp_path):
    path = tmp_path / "copy.safetensors"
    lm.save(path)
    back = gmlp.Model.load(path)
    ids = lm.encode("the earth")
    np.testing.assert_array_equal(back(ids), lm(ids))
    assert back.config == lm.config


def test_load_takes_a_run_directory_or_a_file(lm_run):
    a = gmlp.Model.load(lm_run)
    b = gmlp.Model.load(str(lm_run / "model.safetensors"))
    ids = a.encode("And God")
    np.testing.assert_array_equal(a(ids), b(ids))


def test_state_dict_views_share_the_parameter_buffer(lm):
    sd = lm.state_dict()
    buf = lm._m._buffer()
    names = list(sd)
    assert names[0] == "embed.weight" and names[-1] == "head.bias"
    assert "blocks.1.sgu.spatial.weight" in sd and sd["blocks.1.sgu.spatial.weight"].shape == (16, 16)
    for v in sd.values():
        assert v.dtype == np.float32 and np.shares_memory(v, buf) and not v.flags.owndata
    # consecutive in the one buffer, in checkpoint order
    assert sum(v.size for v in sd.values()) == buf.size


def test_writing_through_a_view_changes_the_model(lm):
    ids = lm.encode("In the beginning")
    before = lm(ids)
    head_b = lm.state_dict()["head.bias"]
    head_b[3] += 5.0
    after = lm(ids)
    np.testing.assert_allclose(after[:, 3] - before[:, 3], 5.0, rtol=1e-5)
    np.testing.assert_array_equal(np.delete(after, 3, axis=1), np.delete(before, 3, axis=1))


def test_torch_from_numpy_is_zero_copy(lm):
    ids = lm.encode("void")
    before = lm(ids)
    t = torch.from_numpy(lm.state_dict()["norm.bias"])
    assert t.data_ptr() == lm.state_dict()["norm.bias"].ctypes.data
    with torch.no_grad():
        t.add_(0.25)
    assert not np.allclose(lm(ids), before)


def test_a_view_keeps_the_model_alive(lm_run):
    m = gmlp.Model.load(lm_run)
    w = m.state_dict()["head.weight"]
    want = w.copy()
    del m
    gc.collect()
    junk = [np.ones(len(want.ravel()), np.float32) for _ in range(50)]  # reuse of freed memory would show
    np.testing.assert_array_equal(w, want)
    del junk


def test_load_state_dict_checks_then_copies(lm_run):
    a = gmlp.Model.load(lm_run)
    b = gmlp.Model(a.config, seed=99)
    ids = a.encode("the deep")
    assert not np.allclose(a(ids), b(ids))
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    np.testing.assert_array_equal(a(ids), b(ids))
    sd = {k: v.copy() for k, v in a.state_dict().items()}
    sd["norm.weight"] = sd["norm.weight"][:3]
    with pytest.raises(ValueError, match="norm.weight"):
        b.load_state_dict(sd)
    del sd["norm.weight"]
    with pytest.raises(ValueError, match="missing tensors \\['norm.weight'\\]"):
        b.load_state_dict(sd)


def test_threads_are_settable(lm):
    old = gmlp.get_threads()
    ids = lm.encode("In the beginning")
    want = lm(ids)
    try:
        gmlp.set_threads(1)
        assert gmlp.get_threads() == 1
        np.testing.assert_allclose(lm(ids), want, rtol=1e-5, atol=1e-6)
    finally:
        gmlp.set_threads(old)
    with pytest.raises(ValueError):
        gmlp.set_threads(0)


def _import_in_a_fresh_interpreter(env_changes):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GMLP_OMP_WAIT")}
    env.update(env_changes)
    code = "import os, gmlp; print(repr(gmlp.omp_wait)); print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_importing_chooses_how_openmp_threads_wait_unless_the_user_has():
    """Before the engine loads, as the gmlp program does: the choice and why."""
    choice, _ = _import_in_a_fresh_interpreter({"OMP_NUM_THREADS": "2"})
    assert re.fullmatch(r"'(spin|passive): 2 threads, \d+ other running, \d+ cores'", choice), choice
    choice, _ = _import_in_a_fresh_interpreter({"OMP_NUM_THREADS": "1"})
    assert choice.startswith("'passive: 1 threads"), choice
    choice, env = _import_in_a_fresh_interpreter({"OMP_WAIT_POLICY": "ACTIVE"})
    assert choice == "''" and env == "ACTIVE None"


def test_the_cpu_gemm_library_is_reported_and_a_misspelt_choice_fails_the_import():
    """gmlp.cpu_gemm() names the library multiplying fp32 matrices; GMLP_CPU_GEMM chooses it."""
    import os
    import subprocess
    import sys
    assert re.fullmatch(r"(OpenBLAS, \S+ kernels|oneDNN, AVX-512 \(OpenBLAS runs \S+ kernels on this AVX-512 CPU\))",
                        gmlp.cpu_gemm()), gmlp.cpu_gemm()
    code = "import gmlp; print(gmlp.cpu_gemm())"
    run = lambda value: subprocess.run([sys.executable, "-c", code], env={**os.environ, "GMLP_CPU_GEMM": value},
                                       capture_output=True, text=True)
    r = run("openblas")
    assert r.returncode == 0 and r.stdout.strip().endswith("kernels (GMLP_CPU_GEMM=openblas)"), r.stdout + r.stderr
    r = run("mkl")
    assert r.returncode != 0 and "GMLP_CPU_GEMM='mkl' is not one of openblas, onednn" in r.stderr, r.stderr


def test_the_gil_is_released_during_inference(lm_run):
    """Another Python thread runs while the engine computes a long forward."""
    import threading
    import time
    m = gmlp.Model.load(lm_run)
    ids = np.zeros((8192, 16), np.int32)
    m(ids)  # the arena, sized once
    span = {}

    def work():  # one call: if it held the GIL, no main-thread step could fall inside it
        span["t0"] = time.perf_counter()
        m(ids)
        span["t1"] = time.perf_counter()

    t = threading.Thread(target=work)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    t0, t1 = span["t0"], span["t1"]
    quarter = (t1 - t0) / 4
    inside = [x for x in ticks if t0 + quarter < x < t1 - quarter]
    assert len(inside) > 100, f"{len(inside)} main-thread steps during the engine's {t1 - t0:.3f} s"


def _cpu_has_bf16():
    flags = open("/proc/cpuinfo").read()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def test_bf16_precision_rounds_the_products_and_fp32_restores_them(lm, monkeypatch):
    ids = lm.encode("In the beginning")
    fp32 = lm(ids)
    with pytest.raises(ValueError, match="'fp16' is not one of fp32, bf16"):
        gmlp.set_precision("fp16")
    monkeypatch.delenv("GMLP_CPU_BF16", raising=False)
    if not _cpu_has_bf16():
        with pytest.raises(gmlp.Error, match="no bf16 matrix instructions"):
            gmlp.set_precision("bf16")
        assert gmlp.get_precision() == "fp32"
        monkeypatch.setenv("GMLP_CPU_BF16", "emulate")
    try:
        gmlp.set_precision("bf16")
        assert gmlp.get_precision() == "bf16"
        bf16 = lm(ids)
    finally:
        gmlp.set_precision("fp32")
    assert not np.array_equal(bf16, fp32)
    np.testing.assert_allclose(bf16, fp32, rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(lm(ids), fp32)
