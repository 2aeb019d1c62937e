"""How the planners rank simulated configurations and say why one lost: faster first, ties
(to the nanosecond) broken by memory; ``per_layer`` recomputation of none or all layers named
``selective`` or ``full``. Shared by the one-cluster search and its host-offload fallback."""

from __future__ import annotations

from dataclasses import replace

from ..config import ParallelConfig
from ..simulate import SimResult
from .result import Candidate

__all__ = ["normalize", "rank", "why", "candidate"]

_GIB = 2**30
# Step times closer than this fraction are a tie (floating-point noise, not a cause).
_TIE_FRACTION = 1e-9


def normalize(r: SimResult) -> SimResult:
    """per_layer with 0 fully recomputed layers is selective; with all of them, full."""
    c = r.config
    if c.recompute != "per_layer":
        return r
    k = c.recompute_num_layers or 0
    most = max(r.partition.layer_counts())
    if k == 0:
        c = c.replace(recompute="selective", recompute_num_layers=None)
    elif k >= most:
        c = c.replace(recompute="full", recompute_num_layers=None)
    return r if c is r.config else _replace_config(r, c)


def _replace_config(r: SimResult, c: ParallelConfig) -> SimResult:
    return replace(r, config=c)


def rank(r: SimResult) -> tuple[float, float]:
    """Faster first; among equal times (to the nanosecond), less memory first."""
    return (round(r.step_time_s / _TIE_FRACTION) * _TIE_FRACTION, r.memory.total)


def why(r: SimResult, best: SimResult) -> str:
    if not r.fits:
        return (
            f"over memory by {r.over_memory_bytes / _GIB:.2f} GiB "
            f"({r.memory.total / _GIB:.1f} of {r.memory_cap_bytes / _GIB:.0f} GiB, stage "
            f"{r.memory.stage}: largest row {max(r.memory.rows(), key=lambda kv: kv[1])[0]})"
        )
    dt = r.step_time_s - best.step_time_s
    tiny = _TIE_FRACTION * best.step_time_s
    if dt <= tiny:
        return (
            f"as fast (within {_TIE_FRACTION:.0e} of the step); ranked after it on "
            f"memory: {r.memory.total / _GIB:.1f} vs {best.memory.total / _GIB:.1f} GiB"
        )
    mine, theirs = dict(r.time_by_kind), dict(best.time_by_kind)
    deltas = sorted(((mine.get(k, 0) - theirs.get(k, 0), k) for k in mine), reverse=True)
    where = ", ".join(f"{k} +{d:.3g} s" for d, k in deltas[:2] if d > tiny) or "no single cause"
    return f"slower by {dt / best.step_time_s:.1%} (+{dt:.3g} s): {where}"


def candidate(r: SimResult, best: SimResult, simulated: bool) -> Candidate:
    return Candidate(
        config=r.config, step_time_s=r.step_time_s, tflops_per_device=r.tflops_per_device,
        memory_bytes=r.memory.total, fits=r.fits, simulated=simulated, reason=why(r, best),
    )  # fmt: skip
