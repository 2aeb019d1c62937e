"""``SearchSpace``: the configurations `plan_training` considers, and their enumeration.

``structures`` lists the (tp, pp, dp, cp) factorisations valid for a model, a device count,
a batch and a sequence (with why the others are not); ``configurations`` the
ParallelConfigs of one structure before the recompute ladder (the rules that keep the space
small are in `explorer.training.plan`'s docstring); ``cheapest_recompute`` walks that
ladder; ``tp_candidates`` the tensor-parallel degrees.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from ...checks import is_int
from ...hardware import Cluster
from ...models import ModelConfig
from ..config import (
    KV_EXCHANGES,
    RECOMPUTE_POLICIES,
    SCHEDULES,
    ZERO_STAGES,
    ParallelConfig,
    RecomputePolicy,
    ScheduleKind,
)
from ..errors import ParallelConfigError, TrainingPlanError
from ..step_model.terms import cp as cp_terms
from ..step_model.terms import zero as zero_terms

__all__ = [
    "SearchSpace", "structures", "configurations", "divisors", "tp_candidates",
    "RECOMPUTE_LADDER", "cheapest_recompute",
]  # fmt: skip

R = TypeVar("R")

#: Recomputation policies cheapest first: step time grows none < selective < per_layer <
#: full while activation memory shrinks (``per_layer`` with 0 fully recomputed layers is
#: ``selective``, with all of them ``full``).
RECOMPUTE_LADDER: tuple[RecomputePolicy, ...] = ("none", "selective", "per_layer", "full")


@dataclass(frozen=True)
class SearchSpace:
    """The configurations `plan_training` considers (None: all that are valid).

    >>> SearchSpace(tp=(8,), pp=(8,), schedules=("interleaved_1f1b",)).tp
    (8,)
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    microbatch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[ScheduleKind, ...] = SCHEDULES
    virtual_stages: tuple[int, ...] = (2, 3, 4)
    zero: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "per_layer")
    sp: tuple[bool, ...] | None = None  # None: True when tp > 1
    ep: tuple[int, ...] | None = None  # None: 1 for dense models; for MoE every divisor of
    # gcd(dp, experts)
    etp: tuple[int, ...] | None = None  # expert tensor parallelism; None: etp = tp (the
    # unfolded layout, ep dividing dp); given: MoE parallel folding, ep need not divide dp
    # (ParallelConfig.etp: etp * ep divides tp * cp * dp)
    cp: tuple[int, ...] | None = None  # None: terms.cp.needs_cp(seq, cp_min_positions)
    cp_min_positions: int = 8192
    cp_kv_exchange: tuple[str, ...] = KV_EXCHANGES

    def __post_init__(self) -> None:
        for name in ("schedules", "zero", "recompute", "sp"):
            values = getattr(self, name)
            if not isinstance(values, tuple) and not (name == "sp" and values is None):
                raise TrainingPlanError(
                    f"SearchSpace.{name}={values!r}; expected a tuple of choices, e.g. "
                    f"{getattr(SearchSpace, name) or (True, False)!r}"
                )
        if self.sp is not None and not (self.sp and all(isinstance(v, bool) for v in self.sp)):
            raise TrainingPlanError(
                f"SearchSpace.sp={self.sp!r}; expected a non-empty tuple of True/False (or "
                "None: True when tp > 1)"
            )
        for s in self.schedules:
            if s not in SCHEDULES:
                raise TrainingPlanError(
                    f"SearchSpace.schedules has {s!r}; expected among {', '.join(SCHEDULES)}"
                )
        for name in ("tp", "pp", "microbatch_sizes", "virtual_stages", "ep", "etp", "cp"):
            values = getattr(self, name)
            optional = name in ("tp", "pp", "ep", "etp", "cp")  # None: every valid value
            if (values is None and not optional) or (
                values is not None and not _positive_ints(values)
            ):
                raise TrainingPlanError(
                    f"SearchSpace.{name}={values!r}; expected a non-empty tuple of ints >= 1"
                    + (" (or None: every valid value)" if optional else "")
                )
        if any(v < 2 for v in self.virtual_stages):
            raise TrainingPlanError(
                f"SearchSpace.virtual_stages={self.virtual_stages!r}; interleaving needs at "
                "least 2 chunks per device"
            )
        if not _positive_ints((self.cp_min_positions,)):
            raise TrainingPlanError(
                f"SearchSpace.cp_min_positions={self.cp_min_positions!r}; expected an int >= 1 "
                "(the fewest sequence positions a context-parallel rank keeps)"
            )
        ex = self.cp_kv_exchange
        if not isinstance(ex, tuple) or not ex or any(e not in KV_EXCHANGES for e in ex):
            raise TrainingPlanError(
                f"SearchSpace.cp_kv_exchange={ex!r}; expected a non-empty tuple among "
                f"{', '.join(repr(e) for e in KV_EXCHANGES)}"
            )
        bad = [z for z in self.zero if isinstance(z, bool) or z not in ZERO_STAGES]
        if bad or not self.zero:
            raise TrainingPlanError(
                f"SearchSpace.zero={self.zero!r}; expected ZeRO stages among 0, 1, 2, 3"
            )
        bad = [r for r in self.recompute if r not in RECOMPUTE_POLICIES]
        if bad or not self.recompute:
            raise TrainingPlanError(
                f"SearchSpace.recompute={self.recompute!r}; expected policies among "
                f"{', '.join(RECOMPUTE_POLICIES)}"
            )


def _positive_ints(values: object) -> bool:
    return (
        isinstance(values, tuple) and len(values) > 0 and all(is_int(v, minimum=1) for v in values)
    )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def cheapest_recompute(
    policies: Iterable[RecomputePolicy], evaluate: Callable[[RecomputePolicy], R | None],
    fits: Callable[[R], bool], stop_on: tuple[type[Exception], ...] = (),
) -> list[tuple[RecomputePolicy, R]]:  # fmt: skip
    """Walk ``policies`` up `RECOMPUTE_LADDER` (cheapest first, whatever order they are
    given in) until one fits: the ``(policy, result)`` pairs evaluated, in order; the last
    one fits, or none does. ``evaluate(policy)`` returns None for a rung that is not valid
    (the walk goes on to the next); an error among ``stop_on`` ends the walk (the
    configuration is invalid whatever the rung). `plan_training`'s search, the re-planning
    screen and the hetero pipeline search walk it.

    >>> cheapest_recompute(("full", "none"), {"none": 90, "full": 50}.get, lambda gib: gib <= 80)
    [('none', 90), ('full', 50)]
    """
    tried: list[tuple[RecomputePolicy, R]] = []
    for policy in sorted(policies, key=RECOMPUTE_LADDER.index):
        try:
            r = evaluate(policy)
        except stop_on:
            break
        if r is None:
            continue
        tried.append((policy, r))
        if fits(r):
            break
    return tried


def tp_candidates(cfg: ModelConfig, chips_per_node: int, devices: int | None = None) -> list[int]:
    """The tensor-parallel degrees worth searching for ``cfg``: the divisors of its attention
    heads (each rank keeps whole heads) that fit in one node (its collectives run in every
    layer's forward and backward and need the node's links; Megatron-LM keeps tp within a
    node; the one-cluster structures pass `Cluster.scale_up_chips`, an NVLink domain larger
    than a node such as a GB200 NVL72 rack) and, with ``devices``, divide them (a pool's
    chips per replica).
    The one-cluster structures, the least-memory search behind "fits nowhere" and the hetero
    pipeline's pools all ask here.

    >>> from explorer.models import load
    >>> tp_candidates(load("gpt3-175b"), chips_per_node=8), tp_candidates(load("gpt2"), 8, 8)
    ([1, 2, 3, 4, 6, 8], [1, 2, 4])
    """
    return [
        t for t in divisors(cfg.num_heads)
        if t <= chips_per_node and (devices is None or devices % t == 0)
    ]  # fmt: skip


def structures(
    cfg: ModelConfig, devices: int, cluster: Cluster, gb: int, seq: int, space: SearchSpace
):
    """(tp, pp, dp, cp) valid for the model, devices, batch and sequence; and why others
    fail."""
    tps = space.tp or tp_candidates(cfg, cluster.scale_up_chips, devices)
    cps = space.cp or cp_terms.needs_cp(seq, space.cp_min_positions)
    out, reasons = [], []
    for tp, cp in itertools.product(tps, cps):
        if devices % (tp * cp):
            continue
        if cp > 1 and seq % (2 * cp):
            reasons.append(f"cp={cp}: 2 * cp does not divide the sequence {seq}")
            continue
        for pp in space.pp or divisors(devices // (tp * cp)):
            if (devices // (tp * cp)) % pp:
                continue
            if pp > cfg.num_layers:
                reasons.append(f"pp={pp} > {cfg.num_layers} layers")
                continue
            dp = devices // (tp * pp * cp)
            if gb % dp:
                with_cp = f", cp={cp}" if cp > 1 else ""
                reasons.append(
                    f"dp={dp} (tp={tp}, pp={pp}{with_cp}) does not divide the batch {gb}"
                )
                continue
            out.append((tp, pp, dp, cp))
    return out, reasons


def configurations(cfg, tp, pp, dp, cp, gb, space: SearchSpace):
    """Per structure, the configurations to estimate (before the recompute ladder)."""
    exchanges = space.cp_kv_exchange if cp > 1 else ("all_gather",)
    etps = space.etp if space.etp is not None else (None,)
    if space.ep is not None:  # folded (etp given): ep need not divide dp
        eps = tuple(e for e in space.ep if dp % e == 0 or space.etp is not None)
    elif cfg.is_moe:
        eps = tuple(divisors(math.gcd(dp, cfg.num_experts)))
    else:
        eps = (1,)
    for mbs in space.microbatch_sizes:
        if (gb // dp) % mbs:
            continue
        m = gb // dp // mbs
        for sched in space.schedules:
            if pp == 1 and sched != "1f1b":
                continue
            if sched == "gpipe" and "1f1b" in space.schedules:
                continue  # dominated by 1F1B (module docstring)
            vs = space.virtual_stages if sched == "interleaved_1f1b" else (1,)
            for v in vs:
                if pp * v > cfg.num_layers + 2 or (sched == "interleaved_1f1b" and m % pp):
                    continue
                if v > 1 and cfg.num_layers % (pp * v) and not cfg.num_layers % pp:
                    continue  # uneven chunks only where the layers do not split over pp
                for zero in zero_terms.stages_worth_searching(space.zero, dp * cp):
                    sps = space.sp if space.sp is not None else (tp > 1,)
                    for sp, ep, etp, kv in itertools.product(sps, eps, etps, exchanges):
                        if sp and tp == 1:
                            continue
                        try:
                            config = ParallelConfig(
                                dp=dp, tp=tp, pp=pp, sp=sp, ep=ep, etp=etp,
                                microbatch_size=mbs, schedule=sched, virtual_stages=v,
                                zero=zero, cp=cp, cp_kv_exchange=kv,
                            )  # fmt: skip
                        except ParallelConfigError:
                            continue  # an etp x ep that does not fold out of tp x cp x dp
                        yield config
