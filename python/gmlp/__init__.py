"""gmlp: gMLP ("Pay Attention to MLPs") from Python, over the gmlp.cpp engine.

    import gmlp
    model = gmlp.Model.load("runs/default")          # a checkpoint file or a run directory
    print(model.generate("And God said", max_tokens=100, seed=7))
    logits = model(model.encode("In the beginning")) # NumPy [T, vocab]
    gmlp.train({"train": {"steps": 200}}, data="data/kjv.txt", out="runs/py")
    gpu = model.to("cuda")                           # where gmlp.cuda_available()
    module = gmlp.torch.to_module(model)             # a torch.nn.Module, the same weights

Engine errors raise gmlp.Error (a RuntimeError), bad arguments ValueError, missing
files FileNotFoundError. docs/python.md has the whole interface.

gmlp.reference (the model in PyTorch) and gmlp.torch import without the compiled
engine (gmlp._core); everything else needs it.
"""
import os as _os

# libgomp reads its wait policy once, when it loads, so it is chosen before the engine
# is imported, as the gmlp program chooses it (include/gmlp/threads.h): spinning threads
# when they fit on cores no other process runs on, passive waiting otherwise. Without
# the small _policy module, passive waiting, which never collapses.
try:
    from . import _policy
    omp_wait = _policy.choose()
except ImportError:
    if "GOMP_SPINCOUNT" not in _os.environ:
        _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    omp_wait = ""

try:
    from . import _core
except ImportError as _e:  # not built or not installed: only the pure-Python parts work
    _core = None
    _core_error = _e
else:
    _core_error = None

__all__ = ["Model", "Error", "train", "finetune_config", "set_threads", "get_threads", "set_precision",
           "get_precision", "cpu_gemm", "cuda_available", "cuda_unusable_reason"]

if _core is not None:
    from ._core import (Error, cpu_gemm, cuda_available, cuda_unusable_reason, get_precision, get_threads,
                        set_precision, set_threads)
    from .model import Model
    from .training import finetune_config, train


def __getattr__(name):
    # gmlp.torch and gmlp.reference on first use: importing torch takes a while.
    if name in ("torch", "reference"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name in __all__:
        raise ImportError(
            f"gmlp.{name} needs the compiled engine gmlp._core, which did not load "
            f"({_core_error}); build it with scripts/build.sh (docs/python.md)")
    raise AttributeError(f"module 'gmlp' has no attribute {name!r}")
