"""Our eager and @jit against hand-written numpy, PyTorch and JAX, side by side in one run:
prints a table and the speed targets (YES/NO), writes bench/results/jit.json.

Columns: our eager (fair: it runs the kernels @jit runs), our @jit with the numpy
backend, our @jit with the numba backend (generated kernels), hand-written numpy,
torch eager, torch.compile, jax.jit (CPU). Workloads: (a) small GPT inference, batch 1
(2 layers, hidden 128, seq 64); (b) bias + GELU + mask + residual over 4M elements; (c) a
4-layer MLP training step (loss and the gradients of all parameters; no optimizer update);
(d) a GPT forward whose depth depends on the data (a block applied while the mean |x| is
under a limit: a tensor ``while``); PyTorch modules through ``ex.compile`` (our eager: the
IR interpreter, every op timed; our static path: numpy and numba kernels): (e) a
torch.nn MLP at batch 1 (4 Linear layers, hidden 128) and (f) transformers' GPT-2, tiny
(2 layers, hidden 64, batch 1, 32 tokens), (g) GPT-2 small (124M, random weights)
prefilling 512 tokens at batch 1, (h) GPT-2 small decoding one token at batch 1 after a
128-token prefix, the key/value cache carried (ours: the step `Decoder` runs, the cache as
inputs; torch eager: the model on its own DynamicCache), (i) the same for a 1.1B Llama
(TinyLlama's shape, random float32 weights, 4.4 GB). Rows (e) and (f) also time
ex.compile's first call in fresh processes on its disk cache, cold then warm
(``fresh_process`` of the static numpy column). ``--only e_torch_mlp,f_gpt2_tiny``
keeps the other rows of jit.json; issue 27's targets on rows (e)-(h) are printed and kept
as ``torch_targets``.

Timing: interleaved rounds (every column once per round, so machine noise hits all alike;
each round starts at another column, and each column after 50 ms idle so that the spinning
thread pools of the column before, XLA's and torch's, have parked), median per column. First call: a fresh function's first call (capture, passes and kernel
compilation for @jit; tracing and compiling for torch.compile and jax.jit). The numba
backend compiles its kernels on a background thread and runs the regions' numpy kernels
until they are ready: its first call is that; the bench then waits for the kernels
(``kernels_ready_ms``, from the first call's start) before timing, and starts a second
process on the now warm kernel cache with ``EXPLORER_NUMBA_COMPILE=sync`` to time the first
call that waits for the kernels (``warm_process``). Compile: our
capture + passes (``CacheEntry.compile_ms``); numba kernel compilation separately (cold:
the bench points numba's and torch inductor's disk caches at fresh directories unless
``--warm-cache``); for
torch.compile and jax.jit, first call minus a steady call. Peak memory: tracemalloc for
ours and numpy (numpy reports its buffers to it) over a steady call, plus the arena a @jit
program holds between calls; jax.jit: XLA's compiled memory analysis (temporaries + outputs);
torch: its CPU allocations are not traced by tracemalloc and are reported as n/a.
Peak RSS of a call (``peak_rss_bytes``): one method for every column, torch's included:
the kernel's peak resident size (VmHWM, reset through /proc/self/clear_refs before the
call) minus the resident size before it, with glibc's mmap and trim thresholds pinned at
64 KiB and the heap trimmed before the call, so that freed buffers leave the RSS
(`pin_malloc`); the static path adds its memory plan's
buffers (allocated once, before the call). Weights are shared and not counted.

Threads: numpy's BLAS and torch single-threaded (OPENBLAS_NUM_THREADS=1, torch
``set_num_threads(1)``; ``--torch-threads N`` to change: small ops on a shared 2-core
machine only gain jitter from a thread pool); numba's parallel kernels (regions from 1M
elements: (b) and the bias + GELU regions of (g)) and XLA use both cores. Run: ``.venv/bin/python bench/jit.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import explorer as ex  # noqa: E402
from explorer.compiler import F, value_and_grad  # noqa: E402
from explorer.compiler.codegen import (  # noqa: E402
    compile_seconds,
    numba_available,
    wait_compiled,
)
from explorer.compiler.torch_decode import step_mask, step_module  # noqa: E402
from explorer.ir.activations import GELU_C, GELU_K, gelu_grad  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "jit.json"
COLUMNS = ("eager", "jit_numpy", "jit_numba", "numpy", "torch", "torch_compile", "jax_jit")
HEAD = {"eager": "our eager", "jit_numpy": "@jit numpy", "jit_numba": "@jit numba",
        "numpy": "hand numpy", "torch": "torch eager", "torch_compile": "torch.compile",
        "jax_jit": "jax.jit"}  # fmt: skip
GPT = {"vocab_size": 1024, "hidden": 128, "num_layers": 2, "num_heads": 4, "max_seq_len": 64}
SEQ = 64
TORCH_THREADS = [1]  # --torch-threads
LOOP_LIMIT = 0.5  # (d): block 0 runs while mean |x| < this (13 times for this model)


class Column:
    """One implementation of a workload: ``make()`` returns the function to time (its
    first call is the first-call measurement); ``peak()`` measures peak memory; ``info()``
    returns compile facts after the first call."""

    def __init__(self, make: Callable[[], Callable[[], object]],
                 peak: Callable[[Callable], int | None] | None = None,
                 info: Callable[[], dict] | None = None) -> None:  # fmt: skip
        self.make, self.peak, self.info = make, peak, info


def _np(out) -> list[np.ndarray]:
    """Outputs as a flat list of numpy arrays (our Tensors, torch, jax, dicts, tuples)."""
    if isinstance(out, dict):
        return [a for v in out.values() for a in _np(v)]  # gradients in parameter order
    if isinstance(out, tuple | list):
        return [a for o in out for a in _np(o)]
    if hasattr(out, "detach"):
        return [out.detach().numpy()]
    if hasattr(out, "numpy"):
        return [np.asarray(out.numpy())]
    return [np.asarray(out)]


def _tracemalloc_peak(fn: Callable) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del out
    return peak


def _proc_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _libc():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def pin_malloc() -> bool:
    """Pin glibc's mmap and trim thresholds at `MMAP_THRESHOLD` bytes (by default both grow
    with the blocks freed, up to 32 and 64 MiB, after which freed buffers stay resident and
    a call's peak no longer shows in the RSS): every larger buffer, numpy's and torch's
    alike, is mapped when allocated and unmapped when freed, and a freed heap top is given
    back. False where there is no glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    # -3: M_MMAP_THRESHOLD, -1: M_TRIM_THRESHOLD
    return bool(libc.mallopt(-3, MMAP_THRESHOLD) and libc.mallopt(-1, MMAP_THRESHOLD))


MMAP_THRESHOLD = 64 * 1024


def _rss_peak(fn: Callable) -> int | None:
    """One method for every column (ours, numpy's and torch's): the process's peak resident
    memory during one call above its resident memory before it (Linux: the peak reset by
    writing 5 to /proc/self/clear_refs, read as VmHWM). None off Linux."""
    libc = _libc()
    try:
        gc.collect()
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)  # free heap memory left resident by earlier calls goes back
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _proc_kib("VmRSS")
        out = fn()
        peak = _proc_kib("VmHWM")
    except (OSError, KeyError):
        return None
    del out
    return (peak - before) * 1024


def _jit_column(jf, call: Callable[[object], object]) -> Column:
    """A steady call (the program built before it) plus the arena the program holds between
    calls (``plan_buffer_bytes``, added by `run_workload`): the method of rows (e)-(i)."""

    def info():
        entry = next(iter(jf.cache.values()))
        held = sum(p.persistent_bytes for e in jf.cache.values() for ps in e.programs.values()
                   for p in ps)  # fmt: skip
        return {"compile_ms": entry.compile_ms, "kernels": len(entry.graph.ops),
                "generated": sum(n.op == "generated" for n in entry.graph.ops),
                "plan_buffer_bytes": held}  # fmt: skip

    return Column(lambda: lambda: call(jf), _tracemalloc_peak, info)


def _ours(fn: Callable, args: tuple, eager_call: Callable | None = None) -> dict[str, Column]:
    eager_call = eager_call or (lambda: fn(*args))
    cols = {"eager": Column(lambda: eager_call, _tracemalloc_peak)}
    cols["jit_numpy"] = _jit_column(ex.jit(fn), lambda jf: jf(*args))
    if numba_available():
        cols["jit_numba"] = _jit_column(ex.jit(fn, backend="numba"), lambda jf: jf(*args))
    return cols


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(TORCH_THREADS[0])
    return torch


def _jax():
    try:
        import jax
    except ImportError:
        return None
    return jax


def _jax_column(jitted, args: tuple) -> Column:
    def peak(fn):
        mem = jitted.lower(*args).compile().memory_analysis()
        return None if mem is None else int(mem.temp_size_in_bytes + mem.output_size_in_bytes)

    def make():
        def run():
            out = jitted(*args)
            for leaf in _jax().tree_util.tree_leaves(out):
                leaf.block_until_ready()
            return out

        return run

    return Column(make, peak)


# --- (a) and (d): the GPT ---------------------------------------------------------------


def _gpt_weights(model) -> dict:
    def a(p):
        return np.ascontiguousarray(p.numpy())

    layers = []
    for blk in model.layers:
        at, mlp = blk.attn, blk.mlp
        layers.append({
            "n1g": a(blk.norm1.g), "n1b": a(blk.norm1.b), "n2g": a(blk.norm2.g),
            "n2b": a(blk.norm2.b), "qw": a(at.q.w), "qb": a(at.q.b), "kw": a(at.k.w),
            "kb": a(at.k.b), "vw": a(at.v.w), "vb": a(at.v.b), "ow": a(at.o.w), "ob": a(at.o.b),
            "f1w": a(mlp.fc1.w), "f1b": a(mlp.fc1.b), "f2w": a(mlp.fc2.w), "f2b": a(mlp.fc2.b),
        })  # fmt: skip
    return {"wte": a(model.wte), "wpe": a(model.wpe), "layers": layers,
            "nfg": a(model.final_norm.g), "nfb": a(model.final_norm.b), "heads": GPT["num_heads"]}  # fmt: skip


def _np_layernorm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    c = x - mu
    var = np.einsum("...d,...d->...", c, c)[..., None] / np.float32(x.shape[-1])
    c /= np.sqrt(var + np.float32(1e-5))
    c *= g
    c += b
    return c


def _np_gelu(x):
    t = x * x
    t *= x
    t *= np.float32(GELU_K)
    t += x
    t *= np.float32(GELU_C)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= x
    t *= np.float32(0.5)
    return t


def _np_block(w: dict, lw: dict, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    b, s, h = x.shape
    n = w["heads"]
    d = h // n
    y = _np_layernorm(x, lw["n1g"], lw["n1b"])
    q = (y @ lw["qw"] + lw["qb"]).reshape(b, s, n, d).transpose(0, 2, 1, 3)
    k = (y @ lw["kw"] + lw["kb"]).reshape(b, s, n, d).transpose(0, 2, 3, 1)
    v = (y @ lw["vw"] + lw["vb"]).reshape(b, s, n, d).transpose(0, 2, 1, 3)
    sc = q @ k
    sc *= np.float32(1.0 / math.sqrt(d))
    np.copyto(sc, np.float32(-np.inf), where=~keep)
    sc -= sc.max(-1, keepdims=True)
    np.exp(sc, out=sc)
    sc /= sc.sum(-1, keepdims=True)
    ctx = (sc @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    x = x + (ctx @ lw["ow"] + lw["ob"])
    y = _np_layernorm(x, lw["n2g"], lw["n2b"])
    f = _np_gelu(y @ lw["f1w"] + lw["f1b"])
    return x + (f @ lw["f2w"] + lw["f2b"])


def _np_gpt(w: dict, tokens: np.ndarray, loop: bool = False) -> np.ndarray:
    s = tokens.shape[1]
    keep = np.tril(np.ones((s, s), bool))
    x = w["wte"][tokens] + w["wpe"][:s]
    if loop:
        while np.abs(x).mean() < LOOP_LIMIT:
            x = _np_block(w, w["layers"][0], x, keep)
    else:
        for lw in w["layers"]:
            x = _np_block(w, lw, x, keep)
    return _np_layernorm(x, w["nfg"], w["nfb"]) @ w["wte"].T


def _torch_gpt(torch, w: dict, loop: bool):
    tw = {k: torch.from_numpy(v) for k, v in w.items() if isinstance(v, np.ndarray)}
    tl = [{k: torch.from_numpy(v) for k, v in lw.items()} for lw in w["layers"]]
    nn_f, n = torch.nn.functional, w["heads"]

    def block(lw, x, keep):
        b, s, h = x.shape
        d = h // n
        y = nn_f.layer_norm(x, (h,), lw["n1g"], lw["n1b"], 1e-5)
        q = (y @ lw["qw"] + lw["qb"]).reshape(b, s, n, d)
        k = (y @ lw["kw"] + lw["kb"]).reshape(b, s, n, d)
        v = (y @ lw["vw"] + lw["vb"]).reshape(b, s, n, d)
        sc = torch.einsum("bsnd,btnd->bnst", q, k) * (1.0 / math.sqrt(d))
        sc = torch.softmax(sc.masked_fill(~keep, float("-inf")), -1)
        ctx = torch.einsum("bnst,btnd->bsnd", sc, v).reshape(b, s, h)
        x = x + (ctx @ lw["ow"] + lw["ob"])
        y = nn_f.layer_norm(x, (h,), lw["n2g"], lw["n2b"], 1e-5)
        f = nn_f.gelu(y @ lw["f1w"] + lw["f1b"], approximate="tanh")
        return x + (f @ lw["f2w"] + lw["f2b"])

    def forward(tokens):
        s = tokens.shape[1]
        keep = torch.tril(torch.ones((s, s), dtype=torch.bool))
        x = tw["wte"][tokens] + tw["wpe"][:s]
        if loop:
            while x.abs().mean() < LOOP_LIMIT:  # data-dependent: a graph break under compile
                x = block(tl[0], x, keep)
        else:
            for lw in tl:
                x = block(lw, x, keep)
        h = x.shape[-1]
        return nn_f.layer_norm(x, (h,), tw["nfg"], tw["nfb"], 1e-5) @ tw["wte"].T

    return forward


def _jax_gpt(jax, w: dict, loop: bool):
    jnp = jax.numpy
    jl = [{k: jnp.asarray(v) for k, v in lw.items()} for lw in w["layers"]]
    wte, wpe, nfg, nfb = (jnp.asarray(w[k]) for k in ("wte", "wpe", "nfg", "nfb"))
    n = w["heads"]

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

    def block(lw, x):
        b, s, h = x.shape
        d = h // n
        keep = jnp.tril(jnp.ones((s, s), bool))
        y = ln(x, lw["n1g"], lw["n1b"])
        q = (y @ lw["qw"] + lw["qb"]).reshape(b, s, n, d)
        k = (y @ lw["kw"] + lw["kb"]).reshape(b, s, n, d)
        v = (y @ lw["vw"] + lw["vb"]).reshape(b, s, n, d)
        sc = jnp.einsum("bsnd,btnd->bnst", q, k) * (1.0 / math.sqrt(d))
        sc = jax.nn.softmax(jnp.where(keep, sc, -jnp.inf), axis=-1)
        ctx = jnp.einsum("bnst,btnd->bsnd", sc, v).reshape(b, s, h)
        x = x + (ctx @ lw["ow"] + lw["ob"])
        y = ln(x, lw["n2g"], lw["n2b"])
        f = jax.nn.gelu(y @ lw["f1w"] + lw["f1b"], approximate=True)
        return x + (f @ lw["f2w"] + lw["f2b"])

    def forward(tokens):
        s = tokens.shape[1]
        x = wte[tokens] + wpe[:s]
        if loop:
            x = jax.lax.while_loop(lambda x: jnp.abs(x).mean() < LOOP_LIMIT,
                                   lambda x: block(jl[0], x), x)  # fmt: skip
        else:
            for lw in jl:
                x = block(lw, x)
        return ln(x, nfg, nfb) @ wte.T

    return jax.jit(forward)


def infer(model, tokens):
    return model(tokens)


def gpt_loop(model, tokens, positions):
    x = F.embedding(tokens, model.wte) + F.embedding(positions, model.wpe)
    while F.mean(F.abs(x)) < LOOP_LIMIT:
        x = model.layers[0](x)
    return F.einsum("bsh,vh->bsv", model.final_norm(x), model.wte)


def gpt_columns(loop: bool) -> dict[str, Column]:
    model = ex.nn.GPT(**GPT, seed=0)
    ids = np.random.default_rng(0).integers(0, GPT["vocab_size"], (1, SEQ)).astype(np.int32)
    tokens = ex.tensor(ids, "int32")
    if loop:
        positions = ex.tensor(np.arange(SEQ, dtype=np.int32), "int32")
        cols = _ours(gpt_loop, (model, tokens, positions))
    else:
        cols = _ours(infer, (model, tokens))
    w = _gpt_weights(model)
    cols["numpy"] = Column(lambda: lambda: _np_gpt(w, ids, loop), _tracemalloc_peak)
    torch = _torch()
    if torch is not None:
        tids = torch.from_numpy(ids.astype(np.int64))
        fwd = _torch_gpt(torch, w, loop)
        cols["torch"] = Column(lambda: lambda: _no_grad(torch, fwd, tids))
        cols["torch_compile"] = Column(lambda: _bind(_no_grad, torch, torch.compile(fwd), tids))
    jax = _jax()
    if jax is not None:
        jids = jax.numpy.asarray(ids)
        cols["jax_jit"] = _jax_column(_jax_gpt(jax, w, loop), (jids,))
    return cols


def _bind(fn: Callable, *args) -> Callable[[], object]:
    return lambda: fn(*args)


def _no_grad(torch, fn, *args):
    with torch.no_grad():
        return fn(*args)


# --- (b) the elementwise block ----------------------------------------------------------


def block(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


def elementwise_columns(n: int = 2048, h: int = 2048) -> dict[str, Column]:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((n, h)).astype(np.float32)
    bs = rng.standard_normal(h).astype(np.float32)
    ms = rng.random((n, h)) > 0.1
    rs = rng.standard_normal((n, h)).astype(np.float32)
    args = tuple(ex.tensor(a) for a in (xs, bs, ms, rs))
    cols = _ours(block, args)

    def hand():
        y = _np_gelu(xs + bs)  # one temporary, GELU in place over it
        y *= ms
        y += rs
        return y

    cols["numpy"] = Column(lambda: hand, _tracemalloc_peak)
    torch = _torch()
    if torch is not None:
        tx, tb, tm, tr = (torch.from_numpy(a) for a in (xs, bs, ms, rs))

        def tblock(x, b, m, r):
            return torch.where(m, torch.nn.functional.gelu(x + b, approximate="tanh"), 0.0) + r

        cols["torch"] = Column(lambda: lambda: tblock(tx, tb, tm, tr))
        cols["torch_compile"] = Column(lambda: _bind(torch.compile(tblock), tx, tb, tm, tr))
    jax = _jax()
    if jax is not None:
        jnp = jax.numpy

        def jblock(x, b, m, r):
            return jnp.where(m, jax.nn.gelu(x + b, approximate=True), 0.0) + r

        jargs = tuple(jnp.asarray(a) for a in (xs, bs, ms, rs))
        cols["jax_jit"] = _jax_column(jax.jit(jblock), jargs)
    return cols


# --- (c) the MLP training step ----------------------------------------------------------

MLP_BATCH, MLP_HIDDEN, MLP_LAYERS = 128, 256, 4


class Net(ex.nn.Cell):
    def __init__(self):
        self.layers = ex.nn.CellList([ex.nn.MLP(MLP_HIDDEN, 4 * MLP_HIDDEN, "gelu", seed=i)
                                      for i in range(MLP_LAYERS)])  # fmt: skip


def mlp_loss(net, x):
    for layer in net.layers:
        x = layer(x)
    return F.mean(x * x)


def mlp_step(net, x):
    return value_and_grad(mlp_loss)(net, x)


def mlp_columns() -> dict[str, Column]:
    net = Net()
    net.parameters()
    xs = np.random.default_rng(0).standard_normal((MLP_BATCH, MLP_HIDDEN)).astype(np.float32)
    x = ex.tensor(xs)
    cols = _ours(mlp_step, (net, x))
    params = [(m.fc1.w.numpy(), m.fc1.b.numpy(), m.fc2.w.numpy(), m.fc2.b.numpy())
              for m in net.layers]  # fmt: skip

    def hand():
        acts, h = [], xs
        for w1, b1, w2, b2 in params:
            u = h @ w1 + b1
            a = _np_gelu(u)
            y = a @ w2 + b2
            acts.append((h, u, a))
            h = y
        loss = np.float32((h * h).mean())
        g = h * np.float32(2.0 / h.size)
        grads = []
        for (w1, _, w2, _), (hin, u, a) in zip(reversed(params), reversed(acts), strict=True):
            gw2, gb2 = a.T @ g, g.sum(0)
            da = g @ w2.T
            gu = gelu_grad(u, da)
            gw1, gb1 = hin.T @ gu, gu.sum(0)
            g = gu @ w1.T
            grads.append((gw1, gb1, gw2, gb2))
        return loss, grads[::-1]

    cols["numpy"] = Column(lambda: hand, _tracemalloc_peak)
    torch = _torch()
    if torch is not None:
        tp = [tuple(torch.from_numpy(np.array(p)).requires_grad_() for p in ps) for ps in params]
        flat = [p for ps in tp for p in ps]
        tx = torch.from_numpy(xs)

        def tloss(x, *flat):
            for i in range(MLP_LAYERS):
                w1, b1, w2, b2 = flat[4 * i : 4 * i + 4]
                x = torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2
            return (x * x).mean()

        def tstep(fn):
            loss = fn(tx, *flat)
            return loss, torch.autograd.grad(loss, flat)

        cols["torch"] = Column(lambda: lambda: tstep(tloss))
        cols["torch_compile"] = Column(lambda: _bind(tstep, torch.compile(tloss)))
    jax = _jax()
    if jax is not None:
        jnp = jax.numpy

        def jloss(flat, x):
            for i in range(MLP_LAYERS):
                w1, b1, w2, b2 = flat[4 * i : 4 * i + 4]
                x = jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2
            return (x * x).mean()

        jflat = [jnp.asarray(p) for ps in params for p in ps]
        cols["jax_jit"] = _jax_column(jax.jit(jax.value_and_grad(jloss)), (jflat, jnp.asarray(xs)))
    return cols


# --- (e), (f): PyTorch modules through ex.compile -----------------------------------------

TORCH_MLP = {"layers": 4, "hidden": 128, "batch": 1}
GPT2_TINY = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1024, "n_positions": 64,
             "bos_token_id": 0, "eos_token_id": 0, "seq": 32, "batch": 1}  # fmt: skip


def _compiled_columns(module, inputs: tuple, torch, donate: tuple[int, ...] = ()
                      ) -> dict[str, Column]:  # fmt: skip
    """Our eager (``run_eager``: the IR interpreter, every op timed into a Trace), our
    static path (numpy kernels; numba when it is installed; ``donate``: ex.compile's),
    torch eager and torch.compile, all called with the same torch tensors under
    ``no_grad``."""

    def ours(backend: str, eager: bool = False) -> Column:
        built = []

        def make():  # this process's first call: traced (the disk cache: `_fresh_process`)
            prog = ex.compile(module, inputs, backend=backend, disk_cache="off",
                              donate=() if eager else donate)  # fmt: skip
            built.append(prog)
            run = prog.run_eager if eager else prog
            return lambda: run(*inputs)

        def info():  # the static run's memory-plan buffers live between calls
            if eager:
                return {}
            prog = built[-1]
            return {"plan_buffer_bytes": prog.program.persistent_bytes,
                    "generated": sum(n.op == "generated" for n in prog.optimized.ops),
                    "huge_page_bytes": prog.huge_page_bytes}  # fmt: skip

        return Column(make, _tracemalloc_peak, info)

    cols = {"eager": ours("numpy", eager=True), "jit_numpy": ours("numpy")}
    if numba_available():
        cols["jit_numba"] = ours("numba")
    cols["torch"] = Column(lambda: _bind(_no_grad, torch, module, *inputs))
    cols["torch_compile"] = Column(lambda: _bind(_no_grad, torch, torch.compile(module), *inputs))
    return cols


def _torch_mlp(torch):
    """(e)'s module and input (seeded: the same in every process)."""
    torch.manual_seed(0)
    h, layers = TORCH_MLP["hidden"], []
    for i in range(TORCH_MLP["layers"]):
        layers.append(torch.nn.Linear(h, h))
        if i < TORCH_MLP["layers"] - 1:
            layers.append(torch.nn.GELU(approximate="tanh"))
    return torch.nn.Sequential(*layers).eval(), (torch.randn(TORCH_MLP["batch"], h),)


def torch_mlp_columns() -> dict[str, Column]:
    """(e) a torch.nn MLP at batch 1: 4 Linear layers of hidden 128, tanh-GELU between."""
    torch = _torch()
    if torch is None:
        return {}
    net, (x,) = _torch_mlp(torch)
    layers = list(net)
    cols = _compiled_columns(net, (x,), torch)
    ws = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy()) for m in layers
          if isinstance(m, torch.nn.Linear)]  # fmt: skip
    xs = x.numpy()

    def hand():
        y = xs
        for i, (w, b) in enumerate(ws):
            y = y @ w + b
            if i < len(ws) - 1:
                y = _np_gelu(y)
        return y

    cols["numpy"] = Column(lambda: hand, _tracemalloc_peak)
    return cols


def _torch_and_transformers():
    """``(torch, transformers)``, or ``(None, None)`` when either is missing (the rows that
    need them are left out)."""
    torch = _torch()
    try:
        import transformers
    except ImportError:
        return None, None
    return (torch, transformers) if torch is not None else (None, None)


def gpt2_tiny_columns() -> dict[str, Column]:
    """(f) transformers' GPT2LMHeadModel, tiny (2 layers, hidden 64), batch 1, 32 tokens."""
    torch, transformers = _torch_and_transformers()
    if transformers is None:
        return {}
    model, inputs = _gpt2_tiny(torch, transformers)
    return _compiled_columns(model, inputs, torch)


def _gpt2_tiny(torch, transformers):
    """(f)'s model and input (seeded: the same in every process)."""
    cfg = transformers.GPT2Config(**{k: v for k, v in GPT2_TINY.items()
                                     if k not in ("seq", "batch")})  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.eval()
    ids = torch.arange(GPT2_TINY["batch"] * GPT2_TINY["seq"]).reshape(GPT2_TINY["batch"], -1)
    ids = (ids * 7 + 3) % cfg.vocab_size
    model.config.use_cache = False  # torch's own columns return no cache either
    return model, (ids,)


#: Rows whose first call is also timed in fresh processes on the disk cache of ex.compile.
FRESH_ROWS = ("e_torch_mlp", "f_gpt2_tiny")


def _fresh_module(name: str):
    torch, transformers = _torch_and_transformers()
    if name == "e_torch_mlp":
        return _torch_mlp(torch)
    return _gpt2_tiny(torch, transformers)


def _fresh_process(name: str) -> dict:
    """ex.compile's first call (compile + one static call, numpy backend) in new processes
    sharing a fresh disk cache: ``cold`` (the first: torch.export traces, the entry is
    written) then ``warm`` (the second: the entry is loaded, torch.export not called).
    ``first_call_ms`` counts from the ``ex.compile`` call (imports and building the module
    before it are ``setup_ms``); ``process_s`` is the whole process from the outside."""
    env = {**os.environ, "EXPLORER_COMPILE_CACHE": tempfile.mkdtemp(prefix="explorer-compile-")}
    out = {}
    for which in ("cold", "warm"):
        res = _probe_process("--probe-compile", name, env)
        if "error" in res:
            return res
        out[which] = res
    return out


def _probe_compile(name: str) -> None:
    """Print (as JSON) ex.compile's first call of row ``name`` in this process."""
    t0 = time.perf_counter()
    module, inputs = _fresh_module(name)
    t1 = time.perf_counter()
    prog = ex.compile(module, inputs)
    prog(*inputs)
    t2 = time.perf_counter()
    print(json.dumps({"setup_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3,
                      "cache": prog.cache.kind}))  # fmt: skip


GPT2_SMALL_PREFILL = 512


def gpt2_small_columns() -> dict[str, Column]:
    """(g) transformers' GPT-2 small (124M, random weights) prefilling 512 tokens at batch 1:
    matmul-bound, so the columns show what compilation costs or saves on a real model."""
    torch, transformers = _torch_and_transformers()
    if transformers is None:
        return {}
    cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0)  # 12 layers, hidden 768
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.eval()
    ids = (torch.arange(GPT2_SMALL_PREFILL).reshape(1, -1) * 7 + 3) % cfg.vocab_size
    model.config.use_cache = False
    return _compiled_columns(model, (ids,), torch)


GPT2_DECODE_PREFIX = 128


def gpt2_decode_columns() -> dict[str, Column]:
    """(h) GPT-2 small (random weights) decoding one token at batch 1 after a 128-token
    prefix (`_decode_columns`)."""
    torch, transformers = _torch_and_transformers()
    if transformers is None:
        return {}
    cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0)  # 12 layers, hidden 768
    torch.manual_seed(0)
    return _decode_columns(torch, transformers.AutoModelForCausalLM.from_config(cfg).eval())


#: (i): TinyLlama-1.1B's shape (hidden 2048, 22 layers, 32 heads, 4 key/value heads, MLP
#: 5632, vocabulary 32000), random weights in float32 (4.4 GB).
LLAMA_1B = {"hidden_size": 2048, "num_hidden_layers": 22, "num_attention_heads": 32,
            "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000,
            "max_position_embeddings": 2048, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip


def llama_1b_decode_columns() -> dict[str, Column]:
    """(i) a 1.1B Llama (TinyLlama's shape, random weights) decoding one token at batch 1
    after a 128-token prefix (`_decode_columns`)."""
    torch, transformers = _torch_and_transformers()
    if transformers is None:
        return {}
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**LLAMA_1B)
    return _decode_columns(torch, transformers.AutoModelForCausalLM.from_config(cfg).eval())


def _decode_columns(torch, model) -> dict[str, Column]:
    """One token at batch 1 after a `GPT2_DECODE_PREFIX`-token prefix, the key/value cache
    carried as inputs: ours and torch.compile run ``torch_decode.step_module`` (the cache
    as tensors with one free slot, the new token's keys and values out: what
    `Decoder.step` calls; ours with the caches donated, so the new slot is written in
    place); torch
    eager runs the model as a torch user does, on its own ``DynamicCache`` (cropped back to
    the prefix after each call: crop(-1)), with its default attention (sdpa; ours is traced
    as eager attention, the same function)."""
    p = GPT2_DECODE_PREFIX
    prefix = (torch.arange(p).reshape(1, -1) * 7 + 3) % model.config.vocab_size
    with torch.no_grad():
        cache = model(prefix, use_cache=True).past_key_values
    kv = [torch.cat([t, torch.zeros_like(t[:, :, :1])], dim=2)  # the free slot
          for layer in cache.layers for t in (layer.keys, layer.values)]  # fmt: skip
    ids = torch.tensor([[11]])
    inputs = (ids, torch.from_numpy(step_mask(1, p, p)), torch.tensor([[p]]), *kv)
    donate = tuple(range(3, len(inputs)))
    cols = _compiled_columns(step_module(model), inputs, torch, donate)

    def torch_step():
        with torch.no_grad():
            out = model(ids, past_key_values=cache, use_cache=True)
            new = [t[:, :, -1:] for layer in cache.layers for t in (layer.keys, layer.values)]
            cache.crop(-1)  # back to the prefix
        return (out.logits, *new)

    cols["torch"] = Column(lambda: torch_step)
    return cols


# --- the runner -------------------------------------------------------------------------


def _close(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Largest difference relative to the reference's scale (over all outputs)."""
    worst = 0.0
    for r, g in zip(ref, got, strict=True):
        scale = float(np.max(np.abs(r))) or 1.0
        worst = max(worst, float(np.max(np.abs(r - g.astype(r.dtype)), initial=0.0)) / scale)
    return worst


def run_workload(name: str, cols: dict[str, Column], rounds: int) -> dict:
    fns, out = {}, {}
    ref = None
    for col in COLUMNS:
        c = cols.get(col)
        if c is None:
            out[col] = None
            continue
        before = compile_seconds()
        time.sleep(SETTLE_S)
        t0 = time.perf_counter()
        try:
            fn = c.make()
            result = fn()
        except Exception as e:  # noqa: BLE001  (a framework that cannot run it: say why)
            out[col] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        first = time.perf_counter() - t0
        arrays = _np(result)
        if ref is None:
            ref = arrays
        fns[col] = fn
        out[col] = {"first_call_ms": first * 1e3, "max_rel_diff": _close(ref, arrays)}
        if col == "jit_numba":  # kernels compile in the background: wait before timing
            wait_compiled()
            out[col]["kernels_ready_ms"] = (time.perf_counter() - t0) * 1e3
            out[col]["max_rel_diff_kernels"] = _close(ref, _np(fn()))
            if WARM_PROBE[0]:
                out[col]["warm_process"] = _warm_process(name)
        if col == "jit_numpy" and name in FRESH_ROWS and WARM_PROBE[0]:
            out[col]["fresh_process"] = _fresh_process(name)
        out[col]["numba_compile_s"] = compile_seconds() - before
        if c.info is not None:
            out[col] |= c.info()
    # steady state: calls per round so that a round takes ~50 ms
    number = {}
    for col, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        number[col] = max(1, int(0.05 / max(time.perf_counter() - t0, 1e-6)))
    times: dict[str, list[float]] = {col: [] for col in fns}
    order = list(fns)
    for r in range(rounds):
        # each round starts at another column, and the threads of the column before (XLA's
        # and torch's pools spin-wait after a call) get SETTLE_S to park: otherwise the
        # column after jax.jit ran beside its spinning threads (our eager: 6.5 ms that way,
        # 2.5 ms alone)
        for col in order[r % len(order) :] + order[: r % len(order)]:
            fn = fns[col]
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            for _ in range(number[col]):
                fn()
            times[col].append((time.perf_counter() - t0) / number[col])
    for col, fn in fns.items():
        ms = statistics.median(times[col]) * 1e3
        out[col]["ms"] = ms
        if col in ("torch_compile", "jax_jit"):
            out[col]["compile_ms"] = out[col]["first_call_ms"] - ms
        peak = cols[col].peak
        out[col]["peak_bytes"] = (
            None if peak is None else peak(fn) + out[col].get("plan_buffer_bytes", 0)
        )
        rss = _rss_peak(fn)
        out[col]["peak_rss_bytes"] = (
            None if rss is None else rss + out[col].get("plan_buffer_bytes", 0)
        )  # buffers allocated before the call count as the call's (they serve no other)
        if col == "jit_numba":
            out[col] |= _kernel_split(fn)
    print(f"  {name}: done", file=sys.stderr)
    return out


WARM_PROBE = [True]  # --no-warm-probe
SETTLE_S = 0.05  # idle time before each timed column (see run_workload)
MATMULS = ("matmul", "bmm", "einsum")


def _kernel_split(fn: Callable, calls: int = 20) -> dict:
    """Per call: the time of all kernels and of the matmul kernels (BLAS, which our eager
    calls too), from a trace of ``calls`` calls. Eager over the matmul time is the most
    any compilation of this program can gain with single-threaded BLAS."""
    time.sleep(SETTLE_S)
    with ex.trace.record() as rec:
        for _ in range(calls):
            fn()
    kernels = [e for e in rec.events if e.kind == "kernel"]
    total = sum(e.dur_us for e in kernels) / calls / 1e3
    blas = sum(e.dur_us for e in kernels if e.name in MATMULS) / calls / 1e3
    return {"kernels_ms": total, "matmul_ms": blas}


def _warm_process(name: str) -> dict:
    """The numba column's first call in a new process whose kernel cache this run filled
    (numba's import and loading the kernels from its disk cache included), compiling
    synchronously (``EXPLORER_NUMBA_COMPILE=sync``): what a second session pays."""
    return _probe_process("--probe", name, {**os.environ, "EXPLORER_NUMBA_COMPILE": "sync"})


def _probe_process(flag: str, name: str, env: dict) -> dict:
    """Run this script with ``flag name`` in a new process: its last stdout line (JSON)
    with ``process_s``, the whole process timed from outside, or ``{"error": ...}``."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, flag, name], env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    res = json.loads(done.stdout.strip().splitlines()[-1])
    return {**res, "process_s": time.perf_counter() - t0}


def _probe(name: str) -> None:
    """Print (as JSON) the first call of workload ``name``'s numba column in this process."""
    col = WORKLOADS[name][1]()["jit_numba"]
    t0 = time.perf_counter()
    col.make()()
    first = time.perf_counter() - t0
    print(json.dumps({"first_call_ms": first * 1e3, "numba_compile_s": compile_seconds()}))


def _fmt_ms(v: dict | None, key: str = "ms") -> str:
    if v is None:
        return "-"
    if "error" in v:
        return "error"
    x = v.get(key)
    if x is None:
        return "n/a"
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _fmt_mib(v: dict | None, key: str = "peak_bytes") -> str:
    if v is None or "error" in v or v.get(key) is None:
        return "n/a"
    return f"{v[key] / 2**20:.2f}"


def _ok(v: dict | None) -> bool:
    return bool(v) and "error" not in v  # type: ignore[operator]


def _best_jit(w: dict) -> tuple[str, float]:
    opts = [(c, w[c]["ms"]) for c in ("jit_numpy", "jit_numba") if _ok(w.get(c))]
    return min(opts, key=lambda t: t[1]) if opts else ("jit_numpy", math.inf)


def targets(res: dict) -> list[tuple[str, bool | None, str]]:
    a, b, c = res["a_gpt"], res["b_elementwise"], res["c_mlp_step"]
    rows = []
    for key, label in ((a, "(a)"), (b, "(b)")):
        col, ms = _best_jit(key)
        t = key.get("torch")
        ok = None if not t or "ms" not in t else ms <= t["ms"]
        rows.append((f"@jit at least as fast as torch eager on {label}", ok,
                     f"{HEAD[col]} {ms:.2f} ms vs torch {_fmt_ms(t)} ms"))  # fmt: skip
    col, ms = _best_jit(a)
    nb = a.get("jit_numba") or {}
    ceiling = ""
    if nb.get("matmul_ms"):
        ceiling = (f"; its matmul kernels alone take {nb['matmul_ms']:.2f} ms a call, so "
                   f"{a['eager']['ms'] / nb['matmul_ms']:.2f}x is the most any compilation "
                   "could gain on single-threaded BLAS")  # fmt: skip
    rows.append(("@jit >= 3x our fair eager on (a)", a["eager"]["ms"] / ms >= 3.0,
                 f"{a['eager']['ms'] / ms:.2f}x ({HEAD[col]}){ceiling}"))  # fmt: skip
    col, ms = _best_jit(b)
    rows.append(("@jit >= 1.5x our fair eager on (b)", b["eager"]["ms"] / ms >= 1.5,
                 f"{b['eager']['ms'] / ms:.2f}x ({HEAD[col]})"))  # fmt: skip
    saving = {k: 1 - c[k]["peak_bytes"] / c["eager"]["peak_bytes"]
              for k in ("jit_numpy", "jit_numba") if c.get(k) and c[k].get("peak_bytes")}  # fmt: skip
    best = max(saving.values()) if saving else None
    rows.append(("@jit peak memory >= 30% below our fair eager on (c)",
                 None if best is None else best >= 0.30,
                 ", ".join(f"{HEAD[k]} -{v:.0%}" for k, v in saving.items())))  # fmt: skip
    # compile time of the @jit rows (a)-(d); the torch rows' columns time ex.compile apart
    npc = [res[w]["jit_numpy"]["compile_ms"] for w in WORKLOADS
           if _ok(res[w].get("jit_numpy")) and "compile_ms" in res[w]["jit_numpy"]]  # fmt: skip
    worst = max(npc, default=math.inf)
    rows.append(("compile (numpy backend) under 100 ms", worst < 100.0,
                 f"worst {worst:.1f} ms over the workloads"))  # fmt: skip
    nb = [res[w]["jit_numba"]["compile_ms"] for w in WORKLOADS
          if _ok(res[w].get("jit_numba")) and "compile_ms" in res[w]["jit_numba"]]  # fmt: skip
    if nb:
        rows.append(("compile (numba backend, passes only) under 100 ms", max(nb) < 100.0,
                     f"worst {max(nb):.1f} ms; numba kernels are compiled on first call"))  # fmt: skip
    for w in WORKLOADS:
        tc = res[w].get("torch_compile")
        if not tc or "first_call_ms" not in tc:
            continue
        nb = res[w].get("jit_numba") or {}
        cases = [("jit_numpy", "", res[w].get("jit_numpy") or {}),
                 ("jit_numba", " (numpy kernels serve it, numba compiles in the background)", nb),
                 ("jit_numba", " kernels ready, cold cache",
                  {"first_call_ms": nb.get("kernels_ready_ms")}),
                 ("jit_numba", " new process, warm cache, sync compile",
                  nb.get("warm_process") or {})]  # fmt: skip
        for col, how, j in cases:
            if j.get("first_call_ms"):
                ratio = tc["first_call_ms"] / j["first_call_ms"]
                rows.append((f"first call >= 10x under torch.compile's: {w} {HEAD[col]}{how}",
                             ratio >= 10, f"{j['first_call_ms']:.0f} ms vs "
                             f"{tc['first_call_ms']:.0f} ms ({ratio:.1f}x)"))  # fmt: skip
    return rows


def torch_targets(res: dict) -> list[tuple[str, bool | None, str]]:
    """Issue 27's targets on the rows of PyTorch modules that ran: ours static (the faster
    backend) against torch eager, torch.compile and our eager, and its peak RSS."""
    rows = []
    need = {"e_torch_mlp": 2.0, "h_gpt2_decode": 1.5}
    for w in ("e_torch_mlp", "f_gpt2_tiny", "g_gpt2_prefill", "h_gpt2_decode", "i_llama_1b_decode"):
        r = res.get(w)
        if not r:
            continue
        col, ms = _best_jit(r)
        t, tc, e = r.get("torch"), r.get("torch_compile"), r.get("eager")
        fresh = (r.get("jit_numpy") or {}).get("fresh_process") or {}
        if "warm" in fresh:
            ms_w, ms_c = fresh["warm"]["first_call_ms"], fresh["cold"]["first_call_ms"]
            rows.append((f"first call of a fresh process under 1 s, disk cache warm, on {w}",
                         ms_w < 1000 and fresh["warm"]["cache"] == "hit",
                         f"{ms_w:.0f} ms ({fresh['warm']['cache']}; cold cache "
                         f"{ms_c:.0f} ms)"))  # fmt: skip
        if w in need and _ok(t):
            x = t["ms"] / ms
            rows.append((f"static >= {need[w]}x torch eager on {w}", x >= need[w],
                         f"{x:.2f}x ({HEAD[col]} {ms:.2f} ms, torch {t['ms']:.2f} ms)"))  # fmt: skip
        if _ok(tc):
            rows.append((f"static not slower than torch.compile on {w}", ms <= tc["ms"],
                         f"{HEAD[col]} {ms:.2f} ms, torch.compile {tc['ms']:.2f} ms"))  # fmt: skip
        if _ok(e):
            rows.append((f"static >= 3x our eager on {w}", e["ms"] / ms >= 3.0,
                         f"{e['ms'] / ms:.2f}x"))  # fmt: skip
            s_rss, e_rss = r[col].get("peak_rss_bytes"), e.get("peak_rss_bytes")
            if s_rss is not None and e_rss:
                rows.append((f"static peak RSS >= 30% below our eager on {w}",
                             s_rss <= 0.7 * e_rss,
                             f"{s_rss / 2**20:.1f} vs {e_rss / 2**20:.1f} MiB "
                             f"(torch eager {_fmt_mib(t, 'peak_rss_bytes')} MiB)"))  # fmt: skip
    return rows


WORKLOADS = {
    "a_gpt": ("(a) GPT inference b=1, 2 layers, h=128", lambda: gpt_columns(loop=False)),
    "b_elementwise": ("(b) bias+GELU+mask+residual, 4M", elementwise_columns),
    "c_mlp_step": (f"(c) {MLP_LAYERS}-layer MLP train step", mlp_columns),
    "d_gpt_loop": ("(d) GPT forward, data-dependent loop", lambda: gpt_columns(loop=True)),
    "e_torch_mlp": ("(e) torch MLP b=1, 4 layers, h=128", torch_mlp_columns),
    "f_gpt2_tiny": ("(f) transformers GPT-2 tiny b=1, s=32", gpt2_tiny_columns),
    "g_gpt2_prefill": (f"(g) GPT-2 small prefill b=1, s={GPT2_SMALL_PREFILL}", gpt2_small_columns),
    "h_gpt2_decode": (
        f"(h) GPT-2 small decode b=1, prefix {GPT2_DECODE_PREFIX}",
        gpt2_decode_columns,
    ),
    "i_llama_1b_decode": (
        f"(i) Llama 1.1B decode b=1, prefix {GPT2_DECODE_PREFIX}",
        llama_1b_decode_columns,
    ),
}


def merge_results(old: dict, new: dict) -> dict:
    """The rows of ``old`` with ``new``'s over them: an old run's machine entry that names a
    row run again goes (its numbers are gone), and issue 27's targets are computed again
    over all the rows kept."""
    ran = {k for k in new if k in WORKLOADS}
    kept = {k: v for k, v in old.items()
            if not (k.startswith("machine_") and ran & set(k[len("machine_"):].split("+")))}  # fmt: skip
    res = {**kept, **new}
    trows = torch_targets(res)
    if trows:
        res["torch_targets"] = [{"target": t, "met": ok, "measured": m} for t, ok, m in trows]
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch intra-op threads (default 1, as our BLAS; its OpenMP pool "
                         "spinning on a shared 2-core machine made (d) 5x slower)")  # fmt: skip
    ap.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    ap.add_argument("--warm-cache", action="store_true",
                    help="use numba's on-disk kernel cache as it is (default: a fresh one)")  # fmt: skip
    ap.add_argument("--no-warm-probe", action="store_true",
                    help="skip the numba first call in a second process (warm disk cache)")  # fmt: skip
    ap.add_argument("--probe", help=argparse.SUPPRESS)  # internal: see _warm_process
    ap.add_argument("--probe-compile", help=argparse.SUPPRESS)  # internal: _fresh_process
    args = ap.parse_args(argv)
    if args.probe:
        _probe(args.probe)
        return {}
    if args.probe_compile:
        _probe_compile(args.probe_compile)
        return {}
    WARM_PROBE[0] = not args.no_warm_probe
    if not args.warm_cache:  # cold caches: numba's kernels and torch inductor's
        os.environ["EXPLORER_CODEGEN_CACHE"] = tempfile.mkdtemp(prefix="explorer-codegen-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchinductor-")
    rounds = 3 if args.quick else 7
    pinned = pin_malloc()
    load_start = os.getloadavg()  # over the cpu count: other work shared the machine
    TORCH_THREADS[0] = args.torch_threads
    t_start = time.perf_counter()
    res: dict = {}
    only = args.only.split(",")
    for key, (_, make) in WORKLOADS.items():
        if key in only:
            res[key] = run_workload(key, make(), rounds)
    torch, jax = _torch(), _jax()
    res["machine"] = {
        "python": platform.python_version(), "numpy": np.__version__,
        "processor": platform.machine(), "cpus": os.cpu_count(),
        "torch": None if torch is None else torch.__version__,
        "torch_threads": None if torch is None else torch.get_num_threads(),
        "jax": None if jax is None else jax.__version__,
        "kernel_caches": "warm" if args.warm_cache else "cold (fresh numba and inductor dirs)",
        "rounds": rounds, "total_s": time.perf_counter() - t_start,
        "malloc_pinned": pinned, "mmap_threshold_bytes": MMAP_THRESHOLD,
        "load_average_at_start": load_start, "load_average_at_end": os.getloadavg(),
    }  # fmt: skip
    rows = targets(res) if set(WORKLOADS) <= set(res) else []
    if rows:
        res["targets"] = [{"target": t, "met": ok, "measured": m} for t, ok, m in rows]
    trows = torch_targets(res)
    if trows:  # issue 27's, kept apart: a run of some rows (--only) keeps the others' targets
        res["torch_targets"] = [{"target": t, "met": ok, "measured": m} for t, ok, m in trows]

    print(f"\nmedian ms per call ({rounds} interleaved rounds); peak MiB; first call ms")
    print(f"{'workload':40s}" + "".join(f"{HEAD[c]:>15s}" for c in COLUMNS))
    for key, (label, _) in WORKLOADS.items():
        if key not in res:
            continue
        w = res[key]
        print(f"{label:40s}" + "".join(f"{_fmt_ms(w[c]):>15s}" for c in COLUMNS))
        print(f"{'    peak memory (MiB)':40s}" + "".join(f"{_fmt_mib(w[c]):>15s}" for c in COLUMNS))
        print(f"{'    peak RSS of a call (MiB)':40s}"
              + "".join(f"{_fmt_mib(w[c], 'peak_rss_bytes'):>15s}" for c in COLUMNS))  # fmt: skip
        print(f"{'    first call (ms)':40s}"
              + "".join(f"{_fmt_ms(w[c], 'first_call_ms'):>15s}" for c in COLUMNS))  # fmt: skip
        print(f"{'    compile (ms)':40s}"
              + "".join(f"{_fmt_ms(w[c], 'compile_ms'):>15s}" for c in COLUMNS))  # fmt: skip
        nb = w.get("jit_numba")
        if nb and "numba_compile_s" in nb:
            warm = nb.get("warm_process") or {}
            if "matmul_ms" in nb:
                print(f"    @jit numba kernels {nb['kernels_ms']:.2f} ms a call, of which matmul "
                      f"(BLAS) {nb['matmul_ms']:.2f} ms")  # fmt: skip
            print(f"    numba kernels: {nb.get('generated', 0)} generated; the first call ran "
                  f"numpy kernels while they compiled in the background, ready "
                  f"{nb.get('kernels_ready_ms', 0) / 1e3:.2f} s after it began "
                  f"({nb['numba_compile_s']:.2f} s compiling)")  # fmt: skip
            if nb.get("huge_page_bytes"):
                print(f"    weights moved onto huge pages in place by ex.compile: "
                      f"{nb['huge_page_bytes'] / 2**20:.0f} MiB (torch's columns read the same "
                      "tensors)")  # fmt: skip
            if "first_call_ms" in warm:
                print(f"    new process, warm kernel cache, sync compile: first call "
                      f"{warm['first_call_ms']:.0f} ms (loading {warm['numba_compile_s']:.2f} s, "
                      f"numba's import included)")  # fmt: skip
        fresh = (w.get("jit_numpy") or {}).get("fresh_process") or {}
        if "warm" in fresh:
            print(f"    ex.compile + first call in a fresh process: {fresh['cold']['first_call_ms']:.0f}"
                  f" ms (cold disk cache), {fresh['warm']['first_call_ms']:.0f} ms (warm: "
                  f"{fresh['warm']['cache']}); imports and the model before it "
                  f"{fresh['warm']['setup_ms']:.0f} ms")  # fmt: skip
        bad = {c: v for c, v in w.items() if v and "error" in v}
        for c, v in bad.items():
            print(f"    {HEAD[c]}: {v['error']}")
        diffs = {HEAD[c]: f"{v['max_rel_diff']:.1e}" for c, v in w.items()
                 if v and "max_rel_diff" in v}  # fmt: skip
        print(f"    max |diff| / max |ref| against our eager: {diffs}")
    print(
        "torch peak memory: n/a (torch's CPU allocator is not traced by tracemalloc); "
        "jax: XLA memory analysis (temporaries + outputs)"
    )
    print(
        "peak RSS of a call: one method for every column (VmHWM reset before the call, minus "
        f"VmRSS before it; glibc's mmap and trim thresholds pinned at {MMAP_THRESHOLD // 1024} KiB: "
        f"{'yes' if res['machine']['malloc_pinned'] else 'NO'}); ours static adds its "
        "memory plan's buffers (allocated once, before the call)"
    )
    print("\ntargets:")
    for t, ok, m in rows + trows:
        flag = "n/a" if ok is None else ("YES" if ok else "NO")
        print(f"  {flag:4s} {t}: {m}")
    print(f"total {res['machine']['total_s']:.0f} s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not set(WORKLOADS) <= set(res) and RESULTS.exists():  # --only: keep the other rows
        res["machine_" + "+".join(k for k in WORKLOADS if k in res)] = res.pop("machine")
        res = merge_results(json.loads(RESULTS.read_text()), res)
    RESULTS.write_text(json.dumps(res, indent=2, default=str))
    print(f"wrote {RESULTS}")
    return res


if __name__ == "__main__":
    main()
