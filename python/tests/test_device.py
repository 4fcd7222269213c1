"""Models and training on a GPU from Python (device="cuda"), against the CPU. Without a
GPU these skip, but for the errors; CTest runs this file a second time on the CUDA
emulator (tests/cuda_emu: the CUDA backend's kernels on the CPU), where they run."""
import numpy as np
import pytest
from conftest import TINY, TINY_TRAIN

import gmlp

cuda = pytest.mark.skipif(not gmlp.cuda_available(), reason="no CUDA device (nor the CUDA emulator)")


def test_a_cuda_that_is_there_but_fails_is_not_taken_for_no_gpu():
    # On a machine with the NVIDIA driver (or the emulator), every GPU test below must run:
    # a CUDA that fails there is a failure, not a reason to skip them all.
    from gmlp import _core
    assert not _core._cuda_broken(), gmlp.cuda_unusable_reason()
    assert (gmlp.cuda_unusable_reason() == "") == gmlp.cuda_available()


def test_a_device_that_is_not_one_is_a_value_error(lm_run):
    for make in (lambda: gmlp.Model(TINY, device="gpu"), lambda: gmlp.Model.load(lm_run, device="GPU"),
                 lambda: gmlp.train({}, data="x", out="y", device="tpu"),
                 lambda: gmlp.set_precision("bf16", device="gpu")):
        with pytest.raises(ValueError, match="device: '.*' is not one of cpu, cuda, auto"):
            make()


@pytest.mark.skipif(gmlp.cuda_available(), reason="a CUDA device is visible")
def test_without_a_gpu_cuda_is_an_error_naming_why_and_auto_is_the_cpu():
    with pytest.raises(gmlp.Error, match=r"^device='cuda': "):
        gmlp.Model(TINY, device="cuda")
    assert gmlp.Model(TINY, device="auto").device == "cpu"


@cuda
def test_a_model_on_the_gpu_computes_what_it_computes_on_the_cpu(lm_run):
    cpu = gmlp.Model.load(lm_run)
    gpu = gmlp.Model.load(lm_run, device="cuda")
    assert (cpu.device, gpu.device) == ("cpu", "cuda")
    assert "device='cuda'" in repr(gpu)
    ids = np.stack([cpu.encode("In the beginning"), cpu.encode("And the earth was")[:16]])
    np.testing.assert_allclose(gpu(ids), cpu(ids), rtol=1e-4, atol=1e-5)
    # Greedy decoding follows the same logits; the cached decoder runs on the device.
    assert gpu.generate("And God", max_tokens=20, top_k=1, seed=3) == cpu.generate("And God", max_tokens=20,
                                                                                   top_k=1, seed=3)
    # The same weights, read back from the device, and a copy on either device.
    for name, w in gpu.state_dict().items():
        assert not w.flags.writeable
        np.testing.assert_array_equal(w, cpu.state_dict()[name])
    back = gpu.to("cpu")
    assert back.device == "cpu"
    np.testing.assert_array_equal(back._m._buffer(), cpu._m._buffer())
    np.testing.assert_allclose(cpu.to("cuda")(ids), cpu(ids), rtol=1e-4, atol=1e-5)


@cuda
def test_load_state_dict_reaches_the_device(lm_run):
    gpu = gmlp.Model.load(lm_run, device="cuda")
    ids = gpu.encode("In the beginning")
    before = gpu(ids)
    state = {k: v.copy() for k, v in gpu.state_dict().items()}
    state["head.bias"] = state["head.bias"] + 1.0  # every logit up by one
    gpu.load_state_dict(state)
    np.testing.assert_allclose(gpu(ids), before + 1.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gpu.state_dict()["head.bias"], state["head.bias"])
    with pytest.raises(ValueError, match="share=True"):
        gmlp.torch.to_module(gpu, share=True)
    with pytest.raises(ValueError, match="no host buffer"):
        gpu._m._buffer()


@cuda
def test_training_on_the_gpu_ends_where_the_cpu_run_ends_and_resumes_on_the_cpu(corpus, tmp_path):
    cfg = {"model": dict(TINY, tokenizer={"kind": "char"}), "train": dict(TINY_TRAIN, steps=10, eval_every=5)}
    lines = {}
    for device in ("cpu", "cuda"):
        lines[device] = []
        summary = gmlp.train(cfg, data=corpus, out=tmp_path / device, device=device, callbacks=lines[device].append)
        assert summary["steps"] == 10 and not summary["interrupted"]
    losses = {d: [l["loss"] for l in lines[d] if "loss" in l] for d in lines}
    assert len(losses["cpu"]) == 2
    np.testing.assert_allclose(losses["cuda"], losses["cpu"], rtol=1e-4)
    cpu_model = gmlp.Model.load(tmp_path / "cpu")
    gpu_model = gmlp.Model.load(tmp_path / "cuda")
    for name, w in cpu_model.state_dict().items():
        np.testing.assert_allclose(gpu_model.state_dict()[name], w, rtol=1e-3, atol=1e-5, err_msg=name)
    # A run trained on the GPU resumes on the CPU.
    summary = gmlp.train(out=tmp_path / "cuda", resume=True, steps=12, device="cpu")
    assert summary["steps"] == 12


@cuda
def test_bf16_on_the_gpu_is_set_for_the_gpu_alone(lm_run):
    gpu = gmlp.Model.load(lm_run, device="cuda")
    ids = gpu.encode("In the beginning")
    fp32 = gpu(ids)
    try:
        gmlp.set_precision("bf16", device="cuda")
        assert (gmlp.get_precision(device="cuda"), gmlp.get_precision()) == ("bf16", "fp32")
        bf16 = gpu(ids)
    finally:
        gmlp.set_precision("fp32", device="cuda")
    assert not np.array_equal(bf16, fp32)
    np.testing.assert_allclose(bf16, fp32, rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(gpu(ids), fp32)
