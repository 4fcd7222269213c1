"""gmlp.torch: every variant of the reference handed over in both directions, and the
reference's single home (gmlp.reference, imported by tests/reference/)."""
import numpy as np
import pytest
import torch

import gmlp
import gmlp.torch
from dump_fixtures import CASES, VARIANT_CASES, build_model, variant_inputs

TOL = dict(rtol=1e-4, atol=2e-5)


def case_inputs(name):
    """(float32 reference module, its inputs) of a fixture case."""
    if name in VARIANT_CASES:
        module, inp = variant_inputs(name)
    else:
        seed, cfg = CASES[name][0], CASES[name][1]
        module = build_model(seed, cfg)
        gen = torch.Generator().manual_seed(seed)
        inp = {"tokens": torch.randint(cfg["vocab_size"], (2, cfg["seq_len"]), generator=gen)}
    return module, inp


def torch_logits(module, inp):
    with torch.no_grad():
        return module.double()(tokens=inp.get("tokens"), images=inp["images"].double() if "images" in inp else None,
                               lengths=inp.get("lengths")).numpy()


def engine_logits(model, module, inp):
    tokens = inp.get("tokens")
    if module.task == "causal_lm" and tokens.shape[1] > module.seq_len and not module.toeplitz:
        tokens = tokens[:, :module.seq_len]
    if "images" in inp:
        return model.logits(inp["images"].numpy())
    return model.logits(tokens.numpy(), None if "lengths" not in inp else inp["lengths"].numpy())


def causal_inputs(module, inp):
    if module.task == "causal_lm" and "tokens" in inp:  # fixtures carry T + 1 tokens (targets)
        inp = dict(inp, tokens=inp["tokens"][:, :-1])
    return inp


def real_rows(module, inp, a):
    """Padded positions of per-token outputs are not compared (their keys are masked,
    the rows themselves are not part of the contract)."""
    if "lengths" not in inp or a.ndim != 3:
        return a
    return np.concatenate([a[b, :int(n)] for b, n in enumerate(inp["lengths"])])


@pytest.mark.parametrize("name", list(CASES) + list(VARIANT_CASES))
def test_from_module_then_to_module(name):
    module, inp = case_inputs(name)
    inp = causal_inputs(module, inp)
    model = gmlp.torch.from_module(module)  # PyTorch -> gmlp
    want = torch_logits(module, inp)
    got = engine_logits(model, module, inp)
    np.testing.assert_allclose(real_rows(module, inp, got), real_rows(module, inp, want), **TOL)
    back = gmlp.torch.to_module(model)  # gmlp -> PyTorch
    assert list(back.state_dict()) == list(model.state_dict())
    np.testing.assert_allclose(real_rows(module, inp, torch_logits(back, inp)),
                               real_rows(module, inp, got), **TOL)


def test_to_module_of_a_trained_model(lm):
    module = gmlp.torch.to_module(lm)
    ids = lm.encode("In the beginning")
    with torch.no_grad():
        want = module(tokens=torch.from_numpy(ids.astype(np.int64))[None])[0].numpy()
    np.testing.assert_allclose(lm(ids), want, **TOL)
    for name, p in module.state_dict().items():  # a copy by default
        assert not np.shares_memory(p.numpy(), lm.state_dict()[name])


def test_shared_module_is_the_engine_buffer(lm_run):
    m = gmlp.Model.load(lm_run)
    module = gmlp.torch.to_module(m, share=True)
    ids = m.encode("the earth")
    before = m(ids)
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    t = torch.from_numpy(ids.astype(np.int64))[None]
    loss = module.loss(module(tokens=t[:, :-1]), t[:, 1:])
    loss.backward()
    opt.step()  # a PyTorch update lands in the gmlp model
    after = m(ids)
    assert not np.allclose(after, before)
    with torch.no_grad():
        np.testing.assert_allclose(module(tokens=t)[0].numpy(), after, **TOL)


def test_state_dict_loading_checks_names(lm):
    module = gmlp.torch.to_module(lm)
    sd = module.state_dict()
    sd["extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match="unexpected tensors \\['extra.weight'\\]"):
        gmlp.torch.load_state_dict(lm, sd)


def test_one_reference_implementation():
    import dump_fixtures
    import gmlp.reference
    assert dump_fixtures.GMLP is gmlp.reference.GMLP is gmlp.torch.GMLP
