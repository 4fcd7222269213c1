"""gmlp.Model: a gMLP model of any task on the C++ engine, with NumPy in and out."""
from __future__ import annotations

import codecs
import os
import queue
import threading
from typing import Iterator, Sequence

import numpy as np

from . import _core


class Model:
    """A model and its tokenizer. Build one from a config (the `model` section of a
    config file, docs/variants.md; randomly initialised as the trainer does) or load a
    checkpoint with Model.load. Calls release the GIL while the engine computes; one
    call runs at a time per model.

    device: "cpu" (the default), "cuda" (a GPU; gmlp.cuda_available() says whether there
    is one) or "auto" (the GPU when there is one). Inputs and outputs are NumPy arrays on
    every device; to(device) gives the same model on another."""

    def __init__(self, config: dict, seed: int = 1337, device: str = "cpu"):
        self._m = _core.Model(config, seed, device)

    @classmethod
    def load(cls, path: str | os.PathLike, device: str = "cpu") -> "Model":
        """A checkpoint file (model.safetensors) or a run directory holding one."""
        return cls._wrap(_core.Model.load(os.fspath(path), device))

    @classmethod
    def _wrap(cls, core) -> "Model":
        obj = cls.__new__(cls)
        obj._m = core
        return obj

    @property
    def device(self) -> str:
        """"cpu" or "cuda": where the weights live and the model computes."""
        return self._m.device

    def to(self, device: str) -> "Model":
        """The same model (config and weights, copied) on `device`; this one is unchanged."""
        return Model._wrap(self._m.to(device))

    def save(self, path: str | os.PathLike) -> None:
        """Writes a checkpoint (atomically) with the tensor names of docs/checkpoint.md."""
        self._m.save(os.fspath(path))

    @property
    def config(self) -> dict:
        """The model config as a dict (a copy: changing it changes nothing)."""
        return self._m.config

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def num_params(self) -> int:
        return self._m.num_params

    @property
    def class_names(self) -> list[str]:
        """Classifiers: the name of each class (its index when the data named none)."""
        c = self.config
        return list(c.get("class_names") or [str(i) for i in range(c.get("n_classes", 0))])

    def __repr__(self) -> str:
        c = self.config
        on = "" if self.device == "cpu" else f", device={self.device!r}"
        return (f"gmlp.Model(task={c['task']!r}, d_model={c['d_model']}, n_layers={c['n_layers']}, "
                f"seq_len={c['seq_len']}, params={self.num_params}{on})")

    # ---------------------------------------------------------------- inference

    def logits(self, x, lengths=None) -> np.ndarray:
        """Logits of token ids [B, T] or [T] (lengths [B]: real tokens per row, for the
        bidirectional tasks' padding) or of images [B, C, H, W] or [C, H, W] as the
        network takes them (normalised). Returns [B, T, vocab] for language models,
        [B, n_classes] for classifiers, without B when the input had no batch axis."""
        return self._m.logits(x, lengths)

    __call__ = logits

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int32) of text under the model's tokenizer."""
        return self._m.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids (bytes that are not UTF-8 become U+FFFD)."""
        return self._m._decode_bytes(np.asarray(ids, dtype=np.int64).reshape(-1)).decode("utf-8", "replace")

    # --------------------------------------------------------------- generation

    def generate_ids(self, prompt, max_tokens: int = 200, temperature: float = 0.8, top_k: int = 0,
                     top_p: float = 1.0, seed: int = 1) -> list[int]:
        """The new token ids after prompt (text or ids); see generate."""
        return self._m._generate(prompt, max_tokens, temperature, top_k, top_p, seed)

    def generate(self, prompt, max_tokens: int = 200, temperature: float = 0.8, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 1) -> str:
        """Samples max_tokens tokens after prompt (causal LM; the prompt must fit the
        window, then the context slides). temperature 0 is greedy; top_k 0 and top_p 1
        keep every token. The same seed gives the same text as `gmlp generate --seed`.
        Returns the new text (without the prompt)."""
        return self.decode(self.generate_ids(prompt, max_tokens, temperature, top_k, top_p, seed))

    def stream(self, prompt, max_tokens: int = 200, temperature: float = 0.8, top_k: int = 0,
               top_p: float = 1.0, seed: int = 1) -> Iterator[str]:
        """generate() as an iterator of text pieces, each as soon as it is sampled (the
        engine runs in a thread; leaving the loop early stops it)."""
        # Arguments are checked now, not at the first next(): one forward of the prompt.
        self._m._generate(prompt, 0, temperature, top_k, top_p, seed)
        return self._stream(prompt, max_tokens, temperature, top_k, top_p, seed)

    def _stream(self, prompt, max_tokens, temperature, top_k, top_p, seed):
        q: queue.Queue = queue.Queue()
        stop = threading.Event()
        done = object()

        def on_token(i):
            q.put(i)
            return not stop.is_set()

        def run():
            try:
                self._m._generate(prompt, max_tokens, temperature, top_k, top_p, seed, on_token)
            except BaseException as e:  # handed to the consumer
                q.put(e)
            finally:
                q.put(done)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        utf8 = codecs.getincrementaldecoder("utf-8")("replace")  # a byte token may end mid-character
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                piece = utf8.decode(self._m._decode_bytes([item]))
                if piece:
                    yield piece
            tail = utf8.decode(b"", final=True)
            if tail:
                yield tail
        finally:
            stop.set()
            worker.join()

    # ----------------------------------------------------------- classification

    def classify(self, x) -> np.ndarray:
        """Class probabilities. A classify model takes a text ([n_classes]) or a list of
        texts ([N, n_classes]); a vision model images [N, C, H, W] or [N, H, W] (one
        channel) or one image, pixels in [0, 1] (floats) or 0..255 (uint8); the model's
        stored normalisation is applied."""
        if isinstance(x, str):
            return self._m._classify_texts([x])[0]
        if self.task == "classify":
            if isinstance(x, np.ndarray) or not all(isinstance(t, str) for t in x):
                raise ValueError("texts: a classify model takes a text or a list of texts")
            return self._m._classify_texts(list(x))
        if self.task != "vision":
            raise ValueError(f"classify needs a classifier (task classify or vision); this one is {self.task!r}")
        a = np.asarray(x)
        # uint8 goes to the engine as bytes, which the model normalises as it reads them
        c = self.config
        shape = (c["image_channels"], c["image_height"], c["image_width"])
        if a.shape == shape or (a.ndim == 2 and (1,) + a.shape == shape):
            return self._m._classify_images(a.reshape((1,) + shape))[0]  # one image
        if a.ndim == 3 and shape[0] == 1:
            a = a[:, None]  # [N, H, W] grey images
        return self._m._classify_images(a)

    def predict(self, x) -> list[str] | str:
        """The most likely class name of each input of classify()."""
        p = self.classify(x)
        names = self.class_names
        return names[int(p.argmax())] if p.ndim == 1 else [names[int(i)] for i in p.argmax(axis=1)]

    # --------------------------------------------------------------- parameters

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter by its checkpoint name (docs/checkpoint.md), in checkpoint
        order, as a float32 NumPy view of the model's one parameter buffer: no copy, so
        writing into a view changes the model, and torch.from_numpy(view) shares it.
        A view keeps the model's memory alive. On a GPU the arrays are read-only copies
        of the device's weights (load_state_dict writes them)."""
        return self._m.state_dict()

    def named_parameters(self) -> list[tuple[str, np.ndarray]]:
        return list(self.state_dict().items())

    def parameters(self) -> list[np.ndarray]:
        return list(self.state_dict().values())

    def load_state_dict(self, state: dict) -> None:
        """Copies every tensor of state (NumPy arrays or torch tensors, the names of
        docs/checkpoint.md) into the model: the names must be exactly the model's, the
        shapes equal and the values finite. Nothing is changed when a check fails."""
        own = self.state_dict()
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or extra:
            raise ValueError(f"state dict: missing tensors {missing}, unexpected tensors {extra}")
        arrays = {}
        for name, dst in own.items():
            v = state[name]
            if hasattr(v, "detach"):  # a torch tensor
                v = v.detach().cpu().numpy()
            v = np.asarray(v)
            if v.shape != dst.shape:
                raise ValueError(f"state dict: tensor '{name}' has shape {tuple(v.shape)}, expected {dst.shape}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"state dict: tensor '{name}' holds non-finite values")
            arrays[name] = v
        for name in own:
            self._m._assign(name, arrays[name].astype(np.float32, copy=False).reshape(-1))
