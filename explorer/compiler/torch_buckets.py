"""Sequence lengths that vary per call: a PyTorch module compiled once per bucket of
lengths (``ex.compile(model, (ids,), buckets=(16, 32, 64))``).

A call of length ``L`` runs the program of the smallest bucket ``b >= L``: its sequence
inputs (the tensor inputs whose ``seq_dim`` has the example's length) are padded with zeros
to ``b``, its sequence outputs cut back to ``L`` (an output's sequence dim is the one that
grows with the input's, ``seq_dim`` where several do: a key/value cache
``[batch, heads, seq, dim]`` is cut on dim 2). A bucket is compiled on its first call (a
``compile`` or ``recompile`` event with the reason in the active trace, and a
`BucketCompile` in ``compiles``), so a program serving lengths 1..512 over buckets of
powers of two compiles at most 10 times.

Padding at the end is exact when no output at the first ``L`` positions reads a padded
one: a causal model (GPT-2, Llama: position ``i`` attends to positions ``<= i``), or an
encoder whose ``attention_mask`` is an input (padded with 0: masked). `BucketedProgram`
checks it once with torch on the example (the example and the example padded, compared
at the first ``L`` positions) and refuses a module whose outputs change.

>>> import torch, explorer as ex
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
>>> torch.manual_seed(0) and None
>>> model = GPT2LMHeadModel(cfg).eval()
>>> prog = ex.compile(model, (torch.zeros(1, 5, dtype=torch.long),), buckets=(8, 16))
>>> prog(torch.ones(1, 11, dtype=torch.long)).logits.shape
torch.Size([1, 11, 64])
>>> [(c.bucket, c.length) for c in prog.compiles]
[(8, 5), (16, 11)]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import trace as _trace
from .errors import TorchCompileError
from .torch_io import as_array
from .torch_verify import Verification, verify_runs

#: A `TorchProgram` (torch_program builds this module's programs, so it is not imported).
TorchProgram = Any

__all__ = ["BucketedProgram", "BucketCompile", "bucket_of"]


@dataclass(frozen=True)
class BucketCompile:
    """One compilation of a bucket: the bucket, the call length that asked for it, why, and
    how long tracing and compiling took (ms)."""

    bucket: int
    length: int
    reason: str
    ms: float


def bucket_of(length: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket ``>= length`` (``buckets`` ascending), or None."""
    for b in buckets:
        if b >= length:
            return b
    return None


class BucketedProgram:
    """A PyTorch callable compiled per bucket of sequence lengths; called like the module.

    Attributes:
        buckets: the bucket lengths, ascending. seq_dim: the sequence dim of the inputs and
            outputs.
        programs: the `TorchProgram` of each bucket compiled so far.
        compiles: every compilation (`BucketCompile`), in order.
        seq_inputs: the names of the inputs padded (their ``seq_dim`` is the sequence).
        last_trace: the `Trace` of the last ``run_eager`` (its compile events included).
    """

    def __init__(self, module: Any, args: tuple, kwargs: dict, buckets: Sequence[int],
                 seq_dim: int, compile_one: Callable[[tuple, dict], TorchProgram]) -> None:  # fmt: skip
        import torch
        from torch.utils._pytree import tree_flatten

        self.module = module
        self.buckets = _checked_buckets(buckets)
        if type(seq_dim) is not int or seq_dim < 0:
            raise TorchCompileError(f"seq_dim={seq_dim!r}: expected a dim index (an int >= 0)")
        self.seq_dim = seq_dim
        self._compile_one = compile_one
        self._args, self._kwargs = args, kwargs
        leaves = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        self.length = self._example_length(leaves)
        self._is_seq = [x.dim() > seq_dim and x.shape[seq_dim] == self.length for x in leaves]
        first = bucket_of(self.length, self.buckets)
        if first is None:
            raise TorchCompileError(
                f"the example's sequence length {self.length} is over the largest bucket "
                f"{self.buckets[-1]}; add a bucket of at least {self.length}"
            )
        self.programs: dict[int, TorchProgram] = {}
        self.compiles: list[BucketCompile] = []
        self.last_trace: _trace.Trace | None = None
        prog = self._compile(first, self.length, "the example's length")
        self._first = prog
        self.name = prog.name
        self.tolerance = prog.tolerance
        self._defaults = prog._defaults
        self.seq_inputs = tuple(n for n, s in zip(prog._sig.names, self._is_seq, strict=True) if s)
        self._seq_outputs = self._check_padding(leaves, prog)

    # --- calls ------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        prog, arrays, length, as_torch = self._prepared(args, kwargs)
        return prog._structure(self._cut(prog, prog._static_outs(arrays), length), as_torch)

    def run_eager(self, *args: Any, **kwargs: Any) -> Any:
        """The eager run (the IR interpreter, op by op) of the call's bucket, padded like
        the static run; its `Trace` (a compile event first when the call compiled its
        bucket) in ``last_trace``."""
        if _trace.active() is not None:
            prog, arrays, length, as_torch = self._prepared(args, kwargs)
            self.last_trace = None
        else:
            with _trace.record(f"{self.name} eager") as t:
                prog, arrays, length, as_torch = self._prepared(args, kwargs)
                outs = prog._eager_outs(arrays)
            self.last_trace = t.trace
            return prog._structure(self._cut(prog, outs, length), as_torch)
        return prog._structure(self._cut(prog, prog._eager_outs(arrays), length), as_torch)

    def verify(self, *args: Any, **kwargs: Any) -> Verification:
        """Torch on the call as given against our static and eager runs of it (padded to
        its bucket, cut back), at `tolerance`."""
        return verify_runs(self.module, self._defaults, self.tolerance, self.__call__,
                           self.run_eager, args, kwargs)  # fmt: skip

    def program_for(self, length: int) -> TorchProgram:
        """The `TorchProgram` that runs calls of ``length`` (its bucket compiled if new)."""
        b = bucket_of(length, self.buckets)
        if b is None:
            raise TorchCompileError(
                f"{self.name}: sequence length {length} is over the largest bucket "
                f"{self.buckets[-1]}; compile with a bucket of at least {length}"
            )
        prog = self.programs.get(b)
        if prog is None:
            have = ", ".join(str(k) for k in sorted(self.programs)) or "none"
            prog = self._compile(b, length, f"length {length}: bucket {b} not compiled yet "
                                 f"(compiled: {have})")  # fmt: skip
        return prog

    def __repr__(self) -> str:
        done = ", ".join(str(b) for b in sorted(self.programs))
        return (f"BucketedProgram({self.name!r}: buckets {self.buckets}, compiled {done}; "
                f"pads {', '.join(self.seq_inputs)} on dim {self.seq_dim})")  # fmt: skip

    # --- buckets ----------------------------------------------------------------------------
    def _compile(self, bucket: int, length: int, reason: str) -> TorchProgram:
        import torch
        from torch.utils._pytree import tree_map

        tensors = iter(self._is_seq)

        def padded(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and next(tensors):
                return _torch_pad(x, self.seq_dim, bucket)
            return x

        t0 = time.perf_counter()
        args, kwargs = tree_map(padded, (self._args, self._kwargs))
        prog = self._compile_one(args, kwargs)
        ms = (time.perf_counter() - t0) * 1e3
        self.programs[bucket] = prog
        self.compiles.append(BucketCompile(bucket, length, reason, ms))
        rec = _trace.active()
        if rec is not None:
            kind = "compile" if len(self.compiles) == 1 else "recompile"
            rec.note(kind, f"{prog.name}[{bucket}]", reason, dur_us=ms * 1e3)
        return prog

    def _prepared(self, args: tuple, kwargs: dict
                  ) -> tuple[TorchProgram, list[np.ndarray], int, bool]:  # fmt: skip
        """(the bucket's program, its checked padded inputs, the call's length, torch out)."""
        tensors = self._first._tensors(args, kwargs)
        if len(tensors) != len(self._is_seq):
            raise TorchCompileError(
                f"{self.name} was compiled for {len(self._is_seq)} tensors, got {len(tensors)}"
            )
        arrays, as_torch = [], False
        for x in tensors:
            if type(x) is not np.ndarray:
                as_torch = as_torch or type(x).__module__.startswith("torch")
                x = as_array(x)
            arrays.append(x)
        lengths = {a.shape[self.seq_dim] for a, s in zip(arrays, self._is_seq, strict=True)
                   if s and a.ndim > self.seq_dim}  # fmt: skip
        if len(lengths) != 1:
            raise TorchCompileError(
                f"{self.name}: the sequence inputs ({', '.join(self.seq_inputs)}) have lengths "
                f"{sorted(lengths)} on dim {self.seq_dim}; give them one length"
            )
        (length,) = lengths
        prog = self.program_for(length)
        b = prog._types[self._is_seq.index(True)][0][self.seq_dim]
        padded = [_np_pad(a, self.seq_dim, b) if s else a
                  for a, s in zip(arrays, self._is_seq, strict=True)]  # fmt: skip
        checked, _ = prog._checked(padded)
        return prog, checked, length, as_torch

    def _cut(self, prog: TorchProgram, outs: list[np.ndarray], length: int) -> list[np.ndarray]:
        outs = list(outs)
        for k, d in self._seq_outputs.items():
            i = prog._out_index[k]
            outs[i] = outs[i][(slice(None),) * d + (slice(0, length),)]
        return outs

    def _example_length(self, leaves: list[Any]) -> int:
        for x in leaves:
            if x.dim() > self.seq_dim:
                return int(x.shape[self.seq_dim])
        raise TorchCompileError(
            f"buckets: no tensor input has a dim {self.seq_dim} (the sequence dim); pass "
            "seq_dim= the dim that holds the sequence length"
        )

    def _check_padding(self, leaves: list[Any], prog: TorchProgram) -> dict[int, int]:
        """Run torch on the example and on it padded by half its length (at least 1); the
        outputs with a dim that grows with the input are the sequence outputs ({tensor leaf
        index: that dim}, ``seq_dim`` where several grow); raise when the first ``length``
        positions differ."""
        import torch
        from torch.utils._pytree import tree_flatten, tree_map

        pad = self.length + max(1, self.length // 2)
        tensors = iter(self._is_seq)

        def padded(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and next(tensors):
                return _torch_pad(x, self.seq_dim, pad)
            return x

        args, kwargs = tree_map(padded, (self._args, self._kwargs))
        with torch.no_grad():
            want = self.module(*self._args, **{**self._defaults, **self._kwargs})
            got = self.module(*args, **{**self._defaults, **kwargs})
        want_t = [w for w in tree_flatten(want)[0] if isinstance(w, torch.Tensor)]
        got_t = [g for g in tree_flatten(got)[0] if isinstance(g, torch.Tensor)]
        rtol, atol = self.tolerance
        seq: dict[int, int] = {}
        worst = 0.0
        for k, (w, g) in enumerate(zip(want_t, got_t, strict=True)):
            grown = [i for i in range(w.dim()) if w.shape[i] == self.length and g.shape[i] == pad]
            if len(grown) == 1 or self.seq_dim in grown:  # a key/value cache: [b, h, seq, d]
                d = self.seq_dim if self.seq_dim in grown else grown[0]
                seq[k] = d
                g = g.narrow(d, 0, self.length)
            if g.shape != w.shape:
                raise TorchCompileError(
                    f"{self.name}: output {k} has shape {tuple(w.shape)} at length "
                    f"{self.length} and {tuple(g.shape)} at {pad}; buckets need outputs whose "
                    f"dim {self.seq_dim} follows the sequence or does not change: "
                    "compile each length without buckets"
                )
            wn, gn = w.detach().double().numpy(), g.detach().double().numpy()
            worst = max(worst, float(np.abs(wn - gn).max(initial=0.0)))
            if not np.allclose(gn, wn, rtol=rtol, atol=atol):
                raise TorchCompileError(
                    f"{self.name}: padding the sequence from {self.length} to {pad} changes "
                    f"output {k} at the first {self.length} positions (by up to {worst:.3g}): "
                    "its positions read later ones (not causal, and no attention_mask input); "
                    "pass attention_mask=... as an input or compile each length without buckets"
                )
        return seq


def _checked_buckets(buckets: Any) -> tuple[int, ...]:
    try:
        out = tuple(buckets)
    except TypeError:
        out = None
    if not out or any(type(b) is not int or b < 1 for b in out) or list(out) != sorted(set(out)):
        raise TorchCompileError(
            f"buckets={buckets!r}: expected ascending distinct lengths (ints >= 1), e.g. "
            "(32, 64, 128)"
        )
    return out


def _torch_pad(x: Any, dim: int, length: int) -> Any:
    """``x`` padded with zeros (or cut: a bucket below the example's length) to ``length``."""
    import torch

    if x.shape[dim] >= length:
        return x.narrow(dim, 0, length)
    shape = list(x.shape)
    shape[dim] = length - shape[dim]
    return torch.cat([x, torch.zeros(shape, dtype=x.dtype)], dim)


def _np_pad(a: np.ndarray, dim: int, length: int) -> np.ndarray:
    if a.shape[dim] == length:
        return a
    shape = list(a.shape)
    shape[dim] = length
    out = np.zeros(shape, a.dtype)
    out[(slice(None),) * dim + (slice(0, a.shape[dim]),)] = a
    return out
