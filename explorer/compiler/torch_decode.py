"""Token-by-token decoding of a transformers causal LM on the static path, its key/value
cache carried between calls as numpy arrays (`Decoder`).

Two compiled programs, both from `ex.compile` with buckets:

- the prefill: ``(ids [b, s]) -> (logits, k_0, v_0, k_1, v_1, ...)``, one
  program per bucket of prompt lengths (the prompt padded at its end, cut back);
  `prefill_module`;
- the step: ``(ids [b, 1], mask, position, k_0, v_0, ...) -> (logits, new k_0, new v_0,
  ...)`` (`step_module`), one program per bucket of cache lengths: the cache of ``P``
  tokens is fed as the first ``P_b + 1`` slots of the decoder's cache buffers (slot
  ``P_b`` free for the new token), and the slots ``P..P_b`` are masked out by an additive
  mask (``[b, 1, 1, P_b + 1]``, the float32 minimum on the empty slots: their softmax
  weight is exactly 0), so the step equals the model's own on the unpadded cache. The
  cache inputs are donated (`ex.compile`'s ``donate``): the step writes the new token's
  key and value into the free slot in place instead of concatenating the cache (GPT-2
  small after 128 tokens: 9.4 MB copied per step before); the decoder then moves them to
  slot ``P``.

A GPT-2 of 20 cached tokens over buckets ``(32, 64, 128)`` runs its steps on the program of
bucket 32 until the cache holds 32 tokens, then compiles bucket 64 once.

>>> import torch, explorer as ex
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> from explorer.compiler.torch_decode import Decoder
>>> torch.manual_seed(0) and None
>>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)).eval()
>>> dec = Decoder(model, buckets=(8, 16))
>>> ids = dec.generate(torch.tensor([[1, 2, 3]]), new_tokens=6)
>>> want = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=6, do_sample=False)
>>> ids.tolist() == want.tolist(), dec.length
(True, 8)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import TorchCompileError
from .passes import Level
from .passes.driver import Backend
from .torch_buckets import BucketedProgram, bucket_of
from .torch_io import as_array
from .torch_program import compile as compile_torch

__all__ = ["Decoder", "prefill_module", "step_module", "step_mask", "MASKED"]

#: Added to the attention scores of the empty cache slots: float32's minimum, so that
#: ``exp(score + MASKED - max)`` is exactly 0.
MASKED = float(np.finfo(np.float32).min)


@functools.cache
def _torch_modules() -> tuple[type, type]:
    """The two wrapper classes (torch.nn.Module subclasses: defined once torch is in)."""
    import torch
    from transformers import DynamicCache

    class Prefill(torch.nn.Module):
        """``model(ids, use_cache=True)`` returning ``(logits, k_0, v_0, ...)``."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids):
            out = self.model(ids, use_cache=True)
            kv = []
            for layer in out.past_key_values.layers:
                kv += [layer.keys, layer.values]
            return (out.logits, *kv)

    class DecodeStep(torch.nn.Module):
        """One token through ``model`` with a cache given as tensors of ``P + 1`` slots,
        the last one free: ``(ids, mask, position, k_0, v_0, ...) -> (logits, new k_0,
        new v_0, ...)``."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids, mask, position, *kv):
            cache = DynamicCache()
            for i in range(len(kv) // 2):  # the free slot is left out (a slice: no copy)
                cache.update(kv[2 * i][:, :, :-1], kv[2 * i + 1][:, :, :-1], i)
            out = self.model(ids, past_key_values=cache, attention_mask=mask,
                             position_ids=position, use_cache=True)  # fmt: skip
            new = []
            for layer in out.past_key_values.layers:
                new += [layer.keys[:, :, -1:], layer.values[:, :, -1:]]
            return (out.logits, *new)

    return Prefill, DecodeStep


def prefill_module(model: Any) -> Any:
    """The prefill module of ``model``: ``(ids) -> (logits, k_0, v_0, k_1, v_1, ...)``."""
    return _torch_modules()[0](model).eval()


def step_module(model: Any) -> Any:
    """The one-token step module of ``model``: ``(ids [b, 1], mask [b, 1, 1, P + 1],
    position [b, 1], k_0, v_0, ...) -> (logits [b, 1, vocab], k_0, v_0, ...)`` (keys and
    values ``[b, heads, P + 1, dim]`` in, of which the last slot is free (not read: it
    receives the new token when the inputs are donated), the new token's
    ``[b, heads, 1, dim]`` out)."""
    return _torch_modules()[1](model).eval()


def step_mask(batch: int, cached: int, slots: int) -> np.ndarray:
    """The additive mask of a step over ``slots`` cache slots of which the first ``cached``
    hold tokens: ``[batch, 1, 1, slots + 1]``, 0 where attended (the cached tokens and the
    new one, last), `MASKED` on the empty slots."""
    mask = np.zeros((batch, 1, 1, slots + 1), np.float32)
    mask[..., cached:slots] = MASKED
    return mask


class Decoder:
    """Greedy decoding of a transformers causal LM (float32) on the static path, its
    key/value cache held here between calls.

    Args:
        model: a transformers causal LM (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...).
        buckets: the cache lengths (and prompt lengths) to compile for, ascending; the
            cache holds at most the last one.
        batch: the batch size of every call.
        level, backend: as `ex.compile`'s.

    Attributes:
        length: the tokens in the cache. prefill, steps: the `BucketedProgram` of the
        prompt (None until the first prompt) and the step program of each cache bucket.
    """

    def __init__(self, model: Any, buckets: Sequence[int] = (32, 64, 128, 256, 512),
                 batch: int = 1, level: Level = "O2", backend: Backend = "numpy") -> None:  # fmt: skip
        import torch

        if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise TorchCompileError(
                f"Decoder expects a transformers causal LM, got {type(model).__name__}"
            )
        if type(batch) is not int or batch < 1:
            raise TorchCompileError(f"batch={batch!r}: expected an int >= 1")
        self.model = model.eval()
        self.buckets = tuple(buckets)
        if (
            not self.buckets
            or any(type(b) is not int or b < 1 for b in self.buckets)
            or list(self.buckets) != sorted(set(self.buckets))
        ):
            raise TorchCompileError(
                f"buckets={buckets!r}: expected ascending distinct lengths (ints >= 1)"
            )
        self.batch = batch
        self._opts = {"level": level, "backend": backend, "use_cache": None}
        self.prefill: BucketedProgram | None = None
        self.steps: dict[int, Any] = {}
        self.length = 0
        self._cache: list[np.ndarray] = []

    def reset(self) -> None:
        """Empty the cache (the compiled programs stay)."""
        self.length = 0

    def prompt(self, ids: Any) -> np.ndarray:
        """Run the prompt ``ids [batch, s]`` (the cache emptied first); the logits
        ``[batch, s, vocab]``."""
        import torch

        ids = self._ids(ids)
        s = ids.shape[1]
        if s < 1 or bucket_of(s, self.buckets) is None:
            raise TorchCompileError(
                f"a prompt of {s} tokens: expected 1 to {self.buckets[-1]} (the last bucket)"
            )
        if self.prefill is None:
            example = torch.from_numpy(ids)
            self.prefill = _compile(
                prefill_module(self.model), (example,), self.buckets, self._opts
            )
        logits, *kv = self.prefill(ids)
        if not self._cache:
            slots = self.buckets[-1] + 1  # the last bucket's free slot included
            self._cache = [np.zeros((a.shape[0], a.shape[1], slots, a.shape[3]), np.float32)
                           for a in kv]  # fmt: skip
        for buf, a in zip(self._cache, kv, strict=True):
            buf[:, :, :s] = a
        self.length = s
        return logits

    def step(self, ids: Any) -> np.ndarray:
        """One token per row, ``ids [batch, 1]``, after the cached ones; its logits
        ``[batch, 1, vocab]`` (its key and value are added to the cache)."""
        import torch

        ids = self._ids(ids)
        if ids.shape[1] != 1:
            raise TorchCompileError(f"step takes one token per row ([batch, 1]), got {ids.shape}")
        p = self.length
        if p == 0:
            raise TorchCompileError("the cache is empty: call prompt(ids) first")
        slots = bucket_of(p, self.buckets)
        if slots is None or p >= self.buckets[-1]:
            raise TorchCompileError(
                f"the cache is full ({p} tokens, the last bucket {self.buckets[-1]}); "
                "build the Decoder with a larger last bucket"
            )
        mask = step_mask(self.batch, p, slots)
        position = np.full((self.batch, 1), p, np.int64)
        kv = [buf[:, :, : slots + 1] for buf in self._cache]  # views: slot `slots` free
        prog = self.steps.get(slots)
        if prog is None:
            example = [
                torch.from_numpy(np.ascontiguousarray(a)) for a in (ids, mask, position, *kv)
            ]
            donate = tuple(range(3, 3 + len(kv)))
            prog = _compile(step_module(self.model), tuple(example), None,
                            {**self._opts, "donate": donate})  # fmt: skip
            self.steps[slots] = prog
        logits, *new = prog(ids, mask, position, *kv)
        for buf, a in zip(self._cache, new, strict=True):
            buf[:, :, p] = a[:, :, 0]
        self.length = p + 1
        return logits

    def generate(self, ids: Any, new_tokens: int) -> np.ndarray:
        """Greedy decoding: the prompt ``ids [batch, s]`` followed by ``new_tokens`` tokens
        (each the argmax of the last logits), ``[batch, s + new_tokens]`` int64."""
        if type(new_tokens) is not int or new_tokens < 0:
            raise TorchCompileError(f"new_tokens={new_tokens!r}: expected an int >= 0")
        ids = self._ids(ids)
        out = [ids]
        if new_tokens:
            logits = self.prompt(ids)
            for k in range(new_tokens):
                nxt = np.argmax(logits[:, -1], axis=-1).astype(np.int64)[:, None]
                out.append(nxt)
                if k < new_tokens - 1:
                    logits = self.step(nxt)
        return np.concatenate(out, axis=1)

    def __repr__(self) -> str:
        return (f"Decoder({type(self.model).__name__}: {self.length} tokens cached, buckets "
                f"{self.buckets}, steps compiled for {sorted(self.steps)})")  # fmt: skip

    def _ids(self, ids: Any) -> np.ndarray:
        a = as_array(ids)
        if a.ndim != 2 or a.shape[0] != self.batch or not np.issubdtype(a.dtype, np.integer):
            raise TorchCompileError(
                f"token ids of shape {a.shape} and dtype {a.dtype}: expected integers of shape "
                f"[{self.batch}, tokens] (batch={self.batch})"
            )
        return a.astype(np.int64, copy=False)


def _compile(module: Any, example: tuple, buckets: Sequence[int] | None, opts: dict) -> Any:
    with warnings.catch_warnings():  # torch.export copies the step's *kv spec with a
        # deprecated isinstance (torch 2.13): a FutureWarning per compile, not the user's
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        return compile_torch(module, example, buckets=buckets, **opts)
