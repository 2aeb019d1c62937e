"""``kernel_efficiency(trace, cluster)``: the GEMM and fused-attention efficiency a trace's
kernels reached, fitted with the step model's own kernel times (``ex.training``; it stands
on ``explorer.traces`` for the shapes and times and on ``step_model.kernels`` for the
model).

Every GEMM whose shape the trace records (`explorer.traces.matmuls.gemm_calls`) and every
fused attention op with its shapes (``aten::_scaled_dot_product_flash_attention`` and its
backward, the cuDNN / efficient / CPU variants) is timed by the step model's kernel
functions (`explorer.training.step_model.kernels.gemm_s`: tile and wave quantization, HBM
roofline, launch overhead; `attention_s`: causal block skipping, the backward's FLOP
ratio) under ``params``. A part's efficiency is the value of its knob
(``matmul_efficiency_cap``, ``flash_attention_efficiency``) at which those times add up to
the measured time: one number per part, and one per GEMM shape class (the smallest of M, K
and N: small GEMMs fill fewer tiles, and the ceiling a large one reaches is the cap's
meaning). `KernelEfficiency.params` puts the parts' values into `TrainingParams`, so a
calibration or a plan starts from the efficiency the cluster showed.

A trace does not record whether attention was causal: ``causal=True`` (decoder training)
unless told.

>>> import explorer as ex
>>> from explorer.traces.cpu_runs import host_cluster
>>> t = ex.traces.load_kineto(ex.traces.vendored("cpu_gloo_ddp"))
>>> eff = ex.training.kernel_efficiency(t, host_cluster(ex.traces.vendored("cpu_gloo_ddp")))
>>> [(r.part, r.shape_class) for r in eff.rows]  # the tiny model's GEMMs: one class
[('matmul', 'all'), ('attention', 'all'), ('attention', 'forward'), ('attention', 'backward')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...hardware import Cluster
from ...traces import KinetoTrace, RankTrace
from ...traces.breakdown import kernels_by_step
from ...traces.matmuls import gemm_calls
from ..errors import CalibrationError
from ..params import TrainingParams
from ..step_model.kernels import attention_efficiency, attention_s, gemm_s, matmul_cap

__all__ = ["EfficiencyRow", "KernelEfficiency", "kernel_efficiency", "attention_calls",
           "KERNEL_PARTS", "kernel_samples", "kernel_part_seconds", "kernels_measured",
           "kernels_predicted"]  # fmt: skip

US = 1e-6
_ITEMSIZE = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# fused attention ops, forward and backward (not the aten::scaled_dot_product_attention
# wrapper, which encloses one of them on a CPU trace)
_ATTENTION = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
              "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention",
              "aten::_efficient_attention")  # fmt: skip
_CLASSES = ((0, 128, "min dim < 128"), (128, 1024, "min dim 128-1023"),
            (1024, math.inf, "min dim >= 1024"))  # fmt: skip
_KNOB = {"matmul": "matmul_efficiency_cap", "attention": "flash_attention_efficiency"}
_LOWEST = 1e-4


@dataclass(frozen=True)
class EfficiencyRow:
    """One part (or one GEMM shape class) of a trace's kernels.

    Attributes:
        part: ``matmul`` or ``attention``; ``shape_class``: ``all``, or for a GEMM the class
            of its smallest dimension, for attention ``forward`` / ``backward``.
        calls, measured_s: kernels (ops) and their measured seconds, over all ranks.
        before_s: what the step model's kernel functions give under the starting params.
        before, efficiency: the knob's starting value and the value that reproduces
            ``measured_s`` (None when no value in (0, 1] does: ``note`` says why).
    """

    part: str
    shape_class: str
    calls: int
    measured_s: float
    before_s: float
    before: float
    efficiency: float | None
    note: str = ""

    def __str__(self) -> str:
        eff = "n/a" if self.efficiency is None else f"{self.efficiency:.3g}"
        return (
            f"{self.part:9} {self.shape_class:17} {self.calls:6d} calls  measured "
            f"{self.measured_s:.4g} s, predicted {self.before_s:.4g} s at {self.before:.3g}; "
            f"fitted {eff}" + (f" ({self.note})" if self.note else "")
        )


@dataclass(frozen=True)
class KernelEfficiency:
    """The parts' efficiency rows (matmul first; ``all`` then each class)."""

    rows: tuple[EfficiencyRow, ...]

    def value(self, part: str) -> float | None:
        """The fitted efficiency of a part over all its calls, or None."""
        return next((r.efficiency for r in self.rows
                     if r.part == part and r.shape_class == "all"), None)  # fmt: skip

    def params(self, base: TrainingParams | None = None) -> TrainingParams:
        """``base`` (`TrainingParams`, default the defaults) with each fitted part's knob
        set (``matmul_efficiency_cap``, ``flash_attention_efficiency``)."""
        base = TrainingParams() if base is None else base
        if not isinstance(base, TrainingParams):
            raise CalibrationError(f"KernelEfficiency.params({base!r}): expected TrainingParams")
        fitted = {_KNOB[p]: v for p in _KNOB if (v := self.value(p)) is not None}
        return replace(base, **fitted)

    def __str__(self) -> str:
        return "\n".join(str(r) for r in self.rows)


def attention_calls(trace: KinetoTrace | RankTrace) -> dict[tuple[str, tuple, bool], list]:
    """``{(op, q shape (b, h, s_q, d) + (s_k,), backward): [calls, seconds]}``: the fused
    attention ops whose shapes the trace records (on a GPU trace their kernels' time)."""
    ranks = trace.ranks if isinstance(trace, KinetoTrace) else (trace,)
    acc: dict[tuple[str, tuple, bool], list] = {}
    for r in ranks:
        if r.device == "gpu":
            per_op: dict[int, list] = {}
            for k in r.kernels:
                if k.category == "attention" and k.op.startswith(_ATTENTION) and k.external_id is not None:  # fmt: skip
                    per_op.setdefault(k.external_id, [k.op, k.shapes, 0.0])[2] += k.dur
            items = [tuple(v) for v in per_op.values()]
        else:
            items = [(a.name, a.shapes, a.dur) for a in r.ops if a.name.startswith(_ATTENTION)]
        for op, shapes, dur in items:
            q = shapes[0] if shapes else None
            kv = shapes[1] if len(shapes) > 1 else None
            if not (_dims4(q) and _dims4(kv)):
                continue
            key = (op, (*q, kv[2]), op.endswith("_backward"))
            row = acc.setdefault(key, [0, 0.0])
            row[0] += 1
            row[1] += dur * US
    return acc


def _dims4(x) -> bool:
    return isinstance(x, tuple) and len(x) == 4 and all(isinstance(d, int) for d in x)


def kernel_efficiency(
    trace: KinetoTrace | RankTrace,
    cluster: Cluster,
    params: TrainingParams | None = None,
    *,
    dtype: str = "bf16",
    causal: bool = True,
) -> KernelEfficiency:
    """Fit the GEMM and attention efficiency to the trace's kernels (module doc).

    Args:
        trace: a trace from `load_kineto` (recorded with ``record_shapes=True``).
        cluster: the cluster it ran on (its chip's peak, tiles, compute units, HBM).
        params: the `TrainingParams` the other kernel knobs come from (default: defaults).
        dtype: the GEMMs' and attention's dtype (``bf16``, ``fp16``, ``fp32``, ...).
        causal: whether the attention was causal.

    Raises:
        CalibrationError: not a trace, not a cluster, a dtype the chip has no peak for, or a
            trace without any GEMM or attention shape.
    """
    if isinstance(trace, RankTrace):
        trace = KinetoTrace((trace,))
    if not isinstance(trace, KinetoTrace):
        raise CalibrationError(
            f"kernel_efficiency({trace!r}): expected a KinetoTrace from load_kineto"
        )
    if not isinstance(cluster, Cluster):
        raise CalibrationError(
            f"kernel_efficiency(cluster={cluster!r}): expected a Cluster "
            "(ex.hardware.load('h100'), or the run's own)"
        )
    if dtype not in _ITEMSIZE or dtype not in dict(cluster.chip.peak_flops_per_s):
        raise CalibrationError(
            f"kernel_efficiency(dtype={dtype!r}): {cluster.chip.name} has peaks for "
            f"{', '.join(dict(cluster.chip.peak_flops_per_s))}; give one of them"
        )
    base = TrainingParams() if params is None else params
    if not isinstance(base, TrainingParams):
        raise CalibrationError(f"kernel_efficiency(params={params!r}): expected TrainingParams")
    chip, size = cluster.chip, _ITEMSIZE[dtype]

    def gemm(dims):
        b, m, k, n = dims
        return lambda p: gemm_s(b, m, n, k, size, chip, p, dtype)

    def attention(key):
        _, (b, h, sq, d, sk), backward = key
        flops, nbytes = 4.0 * b * h * sq * sk * d, size * b * h * d * (2 * sq + 2 * sk)
        return lambda p: attention_s(flops, nbytes, sq, causal, backward, chip, p, dtype)

    groups: list[tuple[str, str, list]] = []  # (part, class, [(time fn, calls, seconds)])
    gemms = [(gemm(dims), c, s, min(dims[1:])) for (_, dims), (c, s) in gemm_calls(trace).items()]
    if gemms:
        groups.append(("matmul", "all", gemms))
        for low, top, name in _CLASSES:
            sel = [g for g in gemms if low <= g[3] < top]
            if sel and len(sel) < len(gemms):
                groups.append(("matmul", name, sel))
    atts = [(attention(key), c, s, key[2]) for key, (c, s) in attention_calls(trace).items()]
    if atts:
        groups.append(("attention", "all", atts))
        for name, bwd in (("forward", False), ("backward", True)):
            sel = [a for a in atts if a[3] == bwd]
            if sel and len(sel) < len(atts):
                groups.append(("attention", name, sel))
    if not groups:
        raise CalibrationError(
            "kernel_efficiency: the trace records no GEMM or fused attention shape; profile "
            "with record_shapes=True (torch.profiler.profile(record_shapes=True))"
        )
    return KernelEfficiency(
        tuple(_row(part, cls, items, base, chip) for part, cls, items in groups)
    )


def _row(part: str, cls: str, items: list, base: TrainingParams, chip) -> EfficiencyRow:
    knob = _KNOB[part]
    measured = sum(s for _, _, s, _ in items)
    calls = sum(c for _, c, _, _ in items)

    def total(eff: float) -> float:
        p = replace(base, **{knob: eff})
        return sum(fn(p) * c for fn, c, _, _ in items)

    before = (matmul_cap if part == "matmul" else attention_efficiency)(chip, base)
    before_s = total(before)
    eff, note = _solve(total, measured)
    return EfficiencyRow(part, cls, calls, measured, before_s, before, eff, note)


def _solve(total, measured: float) -> tuple[float | None, str]:
    """The efficiency in (0, 1] at which ``total`` (decreasing in it) equals ``measured``."""
    if total(1.0) > measured:
        return None, "faster than the model allows at peak: the HBM roofline or overheads bind"
    if total(_LOWEST) < measured:
        return None, f"slower than {_LOWEST:g} of peak: not compute-bound time"
    from scipy.optimize import brentq

    return float(brentq(lambda e: total(e) - measured, _LOWEST, 1.0, xtol=1e-9)), ""


# ----- a run's kernels, for calibrate ------------------------------------------------------
KERNEL_PARTS: tuple[str, ...] = ("matmul", "attention")


def kernel_samples(trace: KinetoTrace, keep) -> tuple[tuple[str, tuple, float, float], ...]:
    """A trace's GEMMs and fused attention ops with their shapes, per device and step:
    ``(part, dims, calls, seconds)`` with ``dims`` ``(batch, M, K, N)`` for a GEMM and
    ``(b, h, s_q, d, s_k, backward)`` for attention, averaged over the ranks' steps in
    ``keep`` (step numbers): what `MeasuredRun.from_trace` records for `calibrate`."""
    ranks, pairs = [], 0
    for r in trace.ranks:
        steps = [i for i, s in enumerate(r.steps) if s.number in keep]
        if not steps:
            continue
        windows = [(r.steps[i].ts, r.steps[i].end) for i in steps]
        ops = tuple(a for a in r.ops if any(lo <= a.ts < hi for lo, hi in windows))
        kernels: tuple = ()
        if r.device == "gpu":
            per = kernels_by_step(r)
            kernels = tuple(k for i in steps for k in per[i])
        ranks.append(replace(r, ops=ops, kernels=kernels))
        pairs += len(steps)
    if not pairs:
        return ()
    sub = KinetoTrace(tuple(ranks))
    out = [("matmul", dims, c / pairs, s / pairs) for (_, dims), (c, s) in gemm_calls(sub).items()]
    out += [("attention", (*dims, int(bwd)), c / pairs, s / pairs)
            for (_, dims, bwd), (c, s) in attention_calls(sub).items()]  # fmt: skip
    return tuple(out)


def kernel_part_seconds(samples, cluster: Cluster, params: TrainingParams, dtype: str) -> dict:
    """Per part of ``samples`` (`kernel_samples`), the seconds the step model's kernel
    functions give its calls under ``params``: what `calibrate` fits the parts' efficiency
    knobs with."""
    chip, size = cluster.chip, _ITEMSIZE.get(dtype, 2)
    out: dict[str, float] = {}
    for part, dims, calls, _ in samples:
        if part == "matmul":
            b, m, k, n = dims
            t = gemm_s(b, m, n, k, size, chip, params, dtype)
        else:
            b, h, sq, d, sk, bwd = dims
            flops, nbytes = 4.0 * b * h * sq * sk * d, size * b * h * d * (2 * sq + 2 * sk)
            t = attention_s(flops, nbytes, sq, True, bool(bwd), chip, params, dtype)
        out[part] = out.get(part, 0.0) + t * calls
    return out


def kernels_measured(run) -> dict[str, float]:
    """A `MeasuredRun`'s measured seconds per kernel part (`KERNEL_PARTS` order)."""
    out: dict[str, float] = {}
    for part, _, _, secs in run.kernels:
        out[part] = out.get(part, 0.0) + secs
    return {k: out[k] for k in KERNEL_PARTS if k in out}


def kernels_predicted(run, params: TrainingParams) -> dict[str, float]:
    """The step model's kernel times of a `MeasuredRun`'s recorded kernels under ``params``
    (`kernel_part_seconds` on its cluster, at its precision)."""
    return kernel_part_seconds(run.kernels, run.cluster, params, run.precision)
