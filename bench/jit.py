"""Eager vs @jit, side by side in one run: prints ratios and writes bench/results/jit.json.

Workloads (issue 6): (a) small-batch GPT inference (batch 1, 2 layers, hidden 128), bound
by per-op overhead; (b) a memory-bound elementwise block (bias + GELU + mask + residual
over 4M elements); (c) peak memory of a 4-layer MLP forward (tracemalloc: numpy reports
its allocations to it); and the compile time of one transformer block. Where PyTorch is
installed it also prints torch eager vs torch.compile (optional; skipped otherwise).

The eager baseline is fair (issue 13): eager runs the kernels ``@jit`` runs (one fp32 GELU
from ``explorer.ir.activations``, einsum on BLAS from ``explorer.ir.contraction``), so the
ratios measure only what the compiler adds: fusion, memory planning, per-op overhead.

Run: ``.venv/bin/python bench/jit.py [--quick]``. Never gates CI on absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

# Small matmuls on a shared 2-core machine: BLAS worker threads only add wake-up jitter
# (milliseconds per call), for eager and jit alike. Both modes run single-threaded BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import explorer as ex  # noqa: E402
from explorer.compiler import F  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "jit.json"
TARGETS = {"gpt_speedup": 3.0, "elementwise_speedup": 1.5, "mlp_memory_saving": 0.30,
           "block_compile_ms": 100.0}  # fmt: skip


def _time(fn, repeat: int, number: int) -> float:
    """Median seconds per call over ``repeat`` rounds of ``number`` calls."""
    fn()
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return statistics.median(rounds)


def _side_by_side(eager, static, repeat: int, number: int) -> tuple[float, float]:
    """Interleave the two so that machine noise hits both alike."""
    eager(), static()
    te, ts = [], []
    for _ in range(repeat):
        te.append(_time(eager, 1, number))
        ts.append(_time(static, 1, number))
    return statistics.median(te), statistics.median(ts)


def infer(model, tokens):
    return model(tokens)


def gpt_inference(quick: bool) -> dict:
    model = ex.nn.GPT(vocab_size=1024, hidden=128, num_layers=2, num_heads=4, max_seq_len=64,
                      seed=0)  # fmt: skip
    tokens = ex.tensor(np.random.default_rng(0).integers(0, 1024, (1, 64)), "int32")
    static = ex.jit(infer)
    np.testing.assert_allclose(static(model, tokens).numpy(), infer(model, tokens).numpy(),
                               rtol=1e-4, atol=1e-4)  # fmt: skip
    te, ts = _side_by_side(lambda: infer(model, tokens), lambda: static(model, tokens),
                           repeat=5 if quick else 15, number=20)  # fmt: skip
    entry = next(iter(static.cache.values()))
    return {"eager_ms": te * 1e3, "jit_ms": ts * 1e3, "speedup": te / ts,
            "eager_ops": _count_ops(lambda: infer(model, tokens)),
            "jit_kernels": len(entry.graph.ops)}  # fmt: skip


def _count_ops(fn) -> int:
    with ex.trace.record() as t:
        fn()
    return len(t.trace.compute_events)


def block(x, b, mask, r):
    return F.where(mask, F.gelu(x + b), 0.0) + r


def elementwise(quick: bool) -> dict:
    rng = np.random.default_rng(0)
    n, h = 2048, 2048  # 4M elements
    x = ex.tensor(rng.standard_normal((n, h)))
    b = ex.tensor(rng.standard_normal(h))
    mask = ex.tensor(rng.random((n, h)) > 0.1)
    r = ex.tensor(rng.standard_normal((n, h)))
    static = ex.jit(block)
    np.testing.assert_allclose(static(x, b, mask, r).numpy(), block(x, b, mask, r).numpy(),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    te, ts = _side_by_side(lambda: block(x, b, mask, r), lambda: static(x, b, mask, r),
                           repeat=3 if quick else 7, number=3)  # fmt: skip
    return {"elements": n * h, "eager_ms": te * 1e3, "jit_ms": ts * 1e3, "speedup": te / ts}


def mlp(model, x):
    for layer in model.layers:
        x = layer(x)
    return x


def _peak(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del out
    return peak


def mlp_memory(quick: bool, activation: str = "gelu") -> dict:
    batch, hidden = 512, 512

    class Net(ex.nn.Cell):
        def __init__(self):
            self.layers = ex.nn.CellList([ex.nn.MLP(hidden, 4 * hidden, activation, seed=i)
                                          for i in range(4)])  # fmt: skip

    net = Net()
    net.parameters()
    x = ex.tensor(np.random.default_rng(0).standard_normal((batch, hidden)))
    eager_peak = _peak(lambda: mlp(net, x))
    fresh = ex.jit(mlp)
    fresh(net, x)  # compile outside the measurement
    entry = next(iter(fresh.cache.values()))
    entry.programs.clear()  # the measured call allocates its buffers inside the window
    static_peak = _peak(lambda: fresh(net, x))
    plan = entry.plan
    return {"activation": activation, "eager_peak_bytes": eager_peak,
            "jit_peak_bytes": static_peak, "saving": 1 - static_peak / eager_peak,
            "plan": str(plan)}  # fmt: skip


def block_fn(blk, x):
    return blk(x)


def compile_time(quick: bool) -> dict:
    blk = ex.nn.TransformerBlock(128, 4, seed=0)
    blk.parameters()
    x = ex.tensor(np.random.default_rng(0).standard_normal((1, 64, 128)))
    times = []
    for _ in range(3 if quick else 7):
        f = ex.jit(block_fn)
        t0 = time.perf_counter()
        f(blk, x)
        first = time.perf_counter() - t0
        run = _time(lambda f=f: f(blk, x), 3, 5)
        times.append((first - run) * 1e3)
    return {"compile_ms": statistics.median(times)}


def torch_compare(quick: bool) -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    x = torch.randn(2048, 2048)
    b = torch.randn(2048)
    mask = torch.rand(2048, 2048) > 0.1
    r = torch.randn(2048, 2048)

    def tblock(x, b, mask, r):
        return torch.where(mask, torch.nn.functional.gelu(x + b, approximate="tanh"), 0.0) + r

    try:
        compiled = torch.compile(tblock)
        compiled(x, b, mask, r)
    except Exception as e:  # noqa: BLE001  (torch.compile needs a C compiler; report why not)
        return {"error": f"torch.compile failed: {e}"[:200]}
    te, ts = _side_by_side(lambda: tblock(x, b, mask, r), lambda: compiled(x, b, mask, r), 3, 3)
    return {"elementwise_eager_ms": te * 1e3, "elementwise_compiled_ms": ts * 1e3,
            "speedup": te / ts}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args(argv)
    res = {
        "gpt_inference": gpt_inference(args.quick),
        "elementwise": elementwise(args.quick),
        "mlp_memory": mlp_memory(args.quick, "gelu"),
        "mlp_memory_relu": mlp_memory(args.quick, "relu"),
        "block_compile": compile_time(args.quick),
        "torch": torch_compare(args.quick),
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.machine(),
        },  # fmt: skip
    }
    met = {
        "gpt_speedup": res["gpt_inference"]["speedup"] >= TARGETS["gpt_speedup"],
        "elementwise_speedup": res["elementwise"]["speedup"] >= TARGETS["elementwise_speedup"],
        "mlp_memory_saving": res["mlp_memory"]["saving"] >= TARGETS["mlp_memory_saving"],
        "block_compile_ms": res["block_compile"]["compile_ms"] < TARGETS["block_compile_ms"],
    }
    res["targets"] = TARGETS
    res["met"] = met
    g, e, m, mr, c = (res[k] for k in ("gpt_inference", "elementwise", "mlp_memory",
                                         "mlp_memory_relu", "block_compile"))  # fmt: skip
    rows = [
        ("(a) GPT inference b=1 L=2 h=128", f"{g['eager_ms']:.2f} ms", f"{g['jit_ms']:.2f} ms",
         f"{g['speedup']:.2f}x", ">= 3x", met["gpt_speedup"]),
        ("(b) bias+GELU+mask+residual 4M", f"{e['eager_ms']:.1f} ms", f"{e['jit_ms']:.1f} ms",
         f"{e['speedup']:.2f}x", ">= 1.5x", met["elementwise_speedup"]),
        ("(c) 4-layer MLP peak (gelu)", f"{m['eager_peak_bytes'] / 2**20:.1f} MiB",
         f"{m['jit_peak_bytes'] / 2**20:.1f} MiB", f"-{m['saving']:.0%}", ">= 30% less",
         met["mlp_memory_saving"]),
        ("    4-layer MLP peak (relu)", f"{mr['eager_peak_bytes'] / 2**20:.1f} MiB",
         f"{mr['jit_peak_bytes'] / 2**20:.1f} MiB", f"-{mr['saving']:.0%}", "(info)", None),
        ("compile time, transformer block", "", f"{c['compile_ms']:.1f} ms", "", "< 100 ms",
         met["block_compile_ms"]),
    ]  # fmt: skip
    print(f"{'workload':34s} {'eager':>11s} {'jit':>11s} {'ratio':>8s}  {'target':12s} met")
    for name, a, b, r, t, ok in rows:
        flag = "" if ok is None else ("yes" if ok else "NO")
        print(f"{name:34s} {a:>11s} {b:>11s} {r:>8s}  {t:12s} {flag}")
    print(f"GPT: {g['eager_ops']} eager ops -> {g['jit_kernels']} kernels; MLP plan: {m['plan']}")
    if res["torch"] is None:
        print("torch not installed: torch eager vs torch.compile comparison skipped")
    else:
        print(f"torch: {res['torch']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2, default=str))
    print(f"wrote {RESULTS}")
    return res


if __name__ == "__main__":
    main()
