"""gmlp.torch: gmlp models as torch.nn.Modules and back.

to_module(model) gives the PyTorch model of gmlp.reference (every task and variant)
with the model's weights under the tensor names of docs/checkpoint.md; from_module
and load_state_dict go the other way. Both compute the same logits to float precision
(python/tests/test_torch.py checks every variant both ways)."""
from __future__ import annotations

import torch

from .reference import GMLP


def to_module(model, share: bool = False) -> GMLP:
    """A gmlp.reference.GMLP (an nn.Module) with the model's config and weights.
    share=False copies the weights; share=True makes every parameter a float32 view of
    the engine's parameter buffer (torch.from_numpy, no copy): training the module in
    PyTorch then changes the gmlp model in place, and the other way round."""
    if share and model.device != "cpu":
        raise ValueError("share=True: a GPU model's weights are device memory; share needs a CPU model "
                         "(model.to('cpu'))")
    module = GMLP(model.config)
    views = model.state_dict()
    if share:
        for name, p in module.named_parameters():
            p.data = torch.from_numpy(views[name])
    else:
        module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in views.items()}, strict=True)
    return module


def from_module(module: GMLP):
    """A gmlp.Model with the module's config (module.cfg) and weights (as float32)."""
    from .model import Model  # needs the compiled engine

    model = Model(module.cfg)
    load_state_dict(model, module.state_dict())
    return model


def load_state_dict(model, state: dict) -> None:
    """Copies a PyTorch state dict (the names of docs/checkpoint.md) into a gmlp.Model;
    names, shapes and finiteness are checked first (gmlp.Model.load_state_dict)."""
    model.load_state_dict({k: v.detach().to("cpu", torch.float32) for k, v in state.items()})
