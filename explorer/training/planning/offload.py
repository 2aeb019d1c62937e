"""Host offload inside `plan_training`: when no configuration fits on the devices alone,
keep optimizer states (then parameters too) in host memory (`terms.offload`) and plan again.

Ranked like the device-only plans: each non-fitting estimate is re-priced with the offload
(`terms.offload.apply_offload`); the fastest few that now fit (device and host memory) are
simulated event by event, re-priced, and the fastest is the plan, with ``plan.offload``
saying what moved and what it costs. ``optimizer`` is tried before ``optimizer+params``
(it moves fewer bytes per step and needs no weight streaming).
"""

from __future__ import annotations

import time

from ...hardware import Cluster
from ...models import ModelConfig
from ..errors import OffloadError
from ..offload import OffloadKind, apply_offload
from ..params import TrainingParams
from ..simulate import SimResult, simulate
from .ranking import candidate, normalize, rank
from .result import TrainingPlan

__all__ = ["OFFLOAD_ORDER", "offload_fallback"]

OFFLOAD_ORDER: tuple[OffloadKind, ...] = ("optimizer", "optimizer+params")
_SIMULATE_TOP = 3


def offload_fallback(
    cfg: ModelConfig, results: list[SimResult], cluster: Cluster, devices: int, gb: int,
    seq: int, tparams: TrainingParams, t0: float, top_k: int = 5,
) -> TrainingPlan | None:  # fmt: skip
    """The fastest configuration among ``results`` (estimates, none fitting) that fits
    with host offload, as a TrainingPlan with ``offload`` set; None when none fits even so
    (or the chip's host link is unknown)."""
    for kind in OFFLOAD_ORDER:
        try:
            priced = [(apply_offload(r, kind, cluster, tparams), r) for r in results]
        except OffloadError:
            return None
        ok = [(s, t, r) for (s, t), r in priced if s.fits and t.fits_host]
        if not ok:
            continue
        ok.sort(key=lambda x: rank(x[0]))
        exact = []
        for _, _, r in ok[:_SIMULATE_TOP]:
            sim = simulate(cfg, r.config, cluster, gb, seq, tparams)
            s, t = apply_offload(sim, kind, cluster, tparams)
            if s.fits and t.fits_host:
                exact.append((s, t))
        if not exact:
            exact = [(s, t) for s, t, _ in ok[:1]]
        exact.sort(key=lambda x: rank(x[0]))
        best, terms = exact[0]
        best = normalize(best)
        alts = [
            candidate(normalize(s), best, s.timeline is not None)
            for s, _ in exact[1:] + [(s, t) for s, t, _ in ok[_SIMULATE_TOP:]]
        ][:top_k]
        return TrainingPlan(
            model=cfg.name, hardware=cluster.name, devices=devices, global_batch=gb, seq=seq,
            config=best.config, sim=best, alternatives=tuple(alts), over_memory=(),
            searched=len(results), search_time_s=time.perf_counter() - t0, model_config=cfg,
            offload=terms,
        )  # fmt: skip
    return None
