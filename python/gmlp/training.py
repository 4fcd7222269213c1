"""gmlp.train: the trainer of `gmlp train` (the same loop, checkpoints and resumption),
with data from files or from memory and Python callbacks at every metrics line."""
from __future__ import annotations

import json
import numbers
import os
from typing import Callable, Iterable

import numpy as np

from . import _core


def _is_path(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def _labels(labels, config_model: dict) -> tuple[list[str], list[str]]:
    """(labels as class names, the fixed class list or [] for first-appearance order).
    Integer labels are class indices: named by the config's class_names, else "0".."k-1"."""
    labels = list(np.asarray(labels).tolist()) if isinstance(labels, np.ndarray) else list(labels)
    if labels and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in labels):
        names = list(config_model.get("class_names") or [])
        k = max(max(labels) + 1, int(config_model.get("n_classes") or 0), len(names))
        if min(labels) < 0:
            raise ValueError(f"labels: class index {min(labels)} is negative")
        names = names or [str(i) for i in range(k)]
        if len(names) < k:
            raise ValueError(f"labels: class index {k - 1} but only {len(names)} class_names")
        return [names[v] for v in labels], names
    if not all(isinstance(v, str) for v in labels):
        raise ValueError("labels: expected class indices (ints) or class names (strs)")
    return labels, list(config_model.get("class_names") or [])


def _images(images) -> np.ndarray:
    a = np.asarray(images)  # uint8 stays so: the engine holds it as bytes
    if a.ndim == 3:
        a = a[:, None]  # [N, H, W]: one channel
    return a


def _split(data, what: str):
    """A pair (inputs, labels) from a tuple or a dict {"texts"|"images", "labels"}."""
    if isinstance(data, dict):
        keys = set(data) - {"labels"}
        if len(keys) != 1 or "labels" not in data:
            raise ValueError(f"{what}: expected {{'texts' or 'images': ..., 'labels': ...}}, got keys {sorted(data)}")
        return data[keys.pop()], data["labels"]
    if isinstance(data, tuple) and len(data) == 2:
        return data
    raise ValueError(f"{what}: expected a path, token ids, {{'text': str}}, (texts, labels) or (images, labels)")


def _memory(data, test, val, config: dict) -> "_core.TrainData":
    m = config.get("model") or {}
    d = _core.TrainData()
    no_val = ValueError("val: validation texts are for a classifier's (texts, labels); other tasks hold out "
                        "train.val_fraction of their data (vision: its test images)")
    if isinstance(data, dict) and set(data) == {"text"}:
        if val is not None:
            raise no_val
        if test is not None:
            raise ValueError("test: a language model holds out the tail of its corpus (train.val_fraction)")
        d.set_text(data["text"])
        return d
    if isinstance(data, dict) and set(data) == {"tokens"}:
        data = data["tokens"]
    if isinstance(data, (np.ndarray, list)) and not isinstance(data, tuple):
        if val is not None:
            raise no_val
        if test is not None:
            raise ValueError("test: a language model holds out the tail of its corpus (train.val_fraction)")
        d.set_tokens(np.asarray(data).reshape(-1) if isinstance(data, np.ndarray) else data)
        return d
    x, y = _split(data, "data")
    tx, ty = _split(test, "test") if test is not None else (None, None)
    if isinstance(x, np.ndarray) and x.dtype.kind in "fiu":
        if val is not None:
            raise no_val
        d.set_images(_images(x), np.asarray(y), None if tx is None else _images(tx),
                     None if ty is None else np.asarray(ty), int(m.get("n_classes") or 0))
        return d
    vx, vy = _split(val, "val") if val is not None else (None, None)
    labels, names = _labels(y, m)
    test_labels = _labels(ty, m)[0] if ty is not None else []
    val_labels = _labels(vy, m)[0] if vy is not None else []
    d.set_texts(list(x), labels, names, list(tx) if tx is not None else [], test_labels,
                list(vx) if vx is not None else [], val_labels)
    return d


def _grid(grid) -> list[tuple[str, list[str]]]:
    """{key: [values]} into the search's axes, values written as on the command line."""
    if grid is None:
        return []
    if not isinstance(grid, dict) or not grid:
        raise ValueError("grid: expected {setting: [values, ...]}, e.g. {'lr': [1e-4, 3e-4], 'epochs': [3, 5]}")
    axes = []
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or not list(values):
            raise ValueError(f"grid: '{key}' needs a list of values")
        axes.append((str(key), [v if isinstance(v, str) else json.dumps(v) for v in values]))
    return axes


def _pieces(grad_accum) -> int:
    if grad_accum is None:
        return 0
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, numbers.Integral) or grad_accum < 1:
        raise ValueError(f"grad_accum: {grad_accum!r}; give a whole number of pieces, 1 or more")
    return int(grad_accum)


def train(config: dict | str | os.PathLike | None = None, data=None, out: str | os.PathLike = "runs/python", *,
          test=None, val=None, callbacks: Callable | Iterable[Callable] = (), resume: bool = False,
          steps: int | None = None, init_from: str | os.PathLike | None = None, progress: bool = False,
          grid: dict | None = None, refit: bool = False, device: str = "cpu",
          grad_accum: int | None = None) -> dict:
    """Trains with the CLI's trainer into the run directory `out` (model.safetensors,
    train_state.safetensors, metrics.jsonl, config.json, report.json), and returns a
    summary: {"steps", "interrupted", "last_loss", "val" (the last evaluation),
    "elapsed_s", "units_per_s", "model" (the selected checkpoint's path: best.safetensors
    when validation chose one, else the last), "report" (report.json: the selection and
    the test set's scores; None if interrupted), "ema_model" (with train.model_ema, the
    weights' average as a model file, model_ema.safetensors; its evaluations are the
    ema_* keys of "val", its test score report["ema"]; else None)}.

    config: {"model": {...}, "train": {...}} (absent keys keep their defaults; {} is the
        default model) or a config file's path. None with resume=True.
    data: a path (corpus, labelled file, IDX folder), or in memory: token ids (a 1-D
        integer array of the config's tokenizer), {"text": str}, (texts, labels) for
        classify, (images [N, C, H, W] or [N, H, W], labels) for vision. Labels are class
        indices or names.
    test: the held-out set of classify/vision runs, the same forms (a path or a pair).
        It is scored once, at the end, with the selected model.
    val: a classifier's validation texts (a labelled file with a file `data`, or a pair
        with texts in memory), instead of holding out train.val_fraction of `data`; the
        checkpoint with the best validation score is selected (`gmlp finetune --val`).
    grid: a small search, {setting: [values]} (lr, epochs, dropout, head_dropout,
        long_text, ... or "section.key"): every combination trains in out/NAME, the best
        validation score chooses, only the chosen one meets the test set; out/grid.json
        holds the table, and the summary (of the chosen run, or of its refit) gains
        "search" with it (`gmlp finetune --grid`).
    refit: classification, after choosing by validation (one run or a grid): train the
        chosen settings again on the training and validation texts together, for as many
        passes as the chosen checkpoint had seen, in out/refit; only that model meets the
        test set. The summary is the refit's, with "chosen" (the chosen run's summary)
        unless there was a grid (`gmlp finetune --refit`).
    callbacks: f(line: dict) for every line of the metrics log (training lines every
        log_every steps, evaluation lines every eval_every); returning False stops the run
        as Ctrl-C does (a checkpoint, then the summary with interrupted True). An
        exception raised by a callback (or Ctrl-C) also stops it, after the checkpoint,
        and propagates.
    resume: continue the run in `out` (data in memory must be given again); steps then
        extends it. init_from: a checkpoint whose matching tensors start the model
        (fine-tuning). progress: a live progress bar when stderr is a terminal; the
        trainer prints its plain progress lines to stderr otherwise, as `gmlp train` does.
    device: "cpu", "cuda" (a GPU: gmlp.cuda_available()) or "auto" (the GPU when there is
        one), as `gmlp train --device`; checkpoints are the same on every device, so a
        run may resume on another. Its precision is gmlp.set_precision(..., device=...).
    grad_accum: take each step's batch in this many pieces (train.grad_accum; `gmlp train
        --grad-accum`): the activation memory of a batch that many times smaller, the
        same run. With resume, the run continues in that many pieces."""
    if _is_path(config):
        with open(config) as f:
            config = json.load(f)
    if callable(callbacks):
        callbacks = [callbacks]
    callbacks = list(callbacks)

    def on_log(line: dict) -> bool:
        for cb in callbacks:
            if cb(line) is False:
                return False
        return True

    data_path = test_path = val_path = ""
    memory = None
    if data is not None and _is_path(data):
        data_path = os.fspath(data)
        for name, held in (("test", test), ("val", val)):
            if held is not None and not _is_path(held):
                raise ValueError(f"{name}: with data from a file, the {name} data is a file too")
        test_path = os.fspath(test) if test is not None else ""
        val_path = os.fspath(val) if val is not None else ""
    elif data is not None:
        memory = _memory(data, test, val, config or {})
    elif test is not None or val is not None:
        raise ValueError(f"{'test' if test is not None else 'val'}: given without data")
    if resume and data_path:
        raise ValueError("data: a resumed run reads the file it was trained on; give no path")
    return _core.train(config, os.fspath(out), data_path, test_path, val_path, memory, resume, int(steps or 0),
                       os.fspath(init_from) if init_from is not None else "", on_log, progress, _grid(grid),
                       bool(refit), device, _pieces(grad_accum))


def finetune_config(init_from: str | os.PathLike | None = None) -> dict:
    """The config `gmlp finetune` starts from, {"model": ..., "train": ...}: the masked
    LM's architecture and tokenizer from `init_from` (a checkpoint or run directory;
    None: the default model) made a classifier whose classes come from the data, with
    BERT's fine-tuning dropout (0.1), long texts read in chunks, and the fine-tuning
    schedule (a tenth of the training texts held out for validation, early stopping).
    Change what you like, then give it to train(..., init_from=init_from)."""
    return _core.finetune_config(os.fspath(init_from) if init_from is not None else "")

