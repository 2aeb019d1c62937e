"""A floor under a configuration's estimated step time, for the search's branch and bound.

`estimate` prices a step as ``pipeline_time(t_stage, m, p) + 2 (S - 1) p2p + tail``. Each
stage's seconds per microbatch ``t_g`` are its compute (kernels, microbatch and MoE
overheads) plus terms that are never negative: exposed tensor-, expert-, context- and
data-parallel communication, ZeRO gathers, recomputation, offload copies. An exposed term
``exposed_s(comm, window, f, i) = comm - min(f comm, window) (1 - i)`` is at least
``comm (1 - f (1 - i))`` whatever its window, so each term has a floor that does not depend
on the recompute policy or on the compute it hides behind. The floor of a configuration:

- when its stage split is known before the estimate (one stage; the configuration's own
  ``stage_layers``; interleaved 1F1B over equal chunks: `simulate._partition`'s rules),
  each stage's compute plus the floors of its tensor-parallel, expert-parallel, ZeRO-3
  gather and per-microbatch gradient terms, through the same `pipeline_time`, plus each
  device's tail floor (optimizer step, the floors of its gradient reduction and ZeRO-1/2
  weight gather); `pipeline_time` grows with every stage's time, so this is a floor for
  every recompute policy;
- otherwise (the split is balanced by time), with ``C`` the compute plus tensor-parallel
  floor of one microbatch through the whole model (the same for every split into
  ``S = p v`` stages), the slowest stage holds at least ``C / S`` and the busiest of ``p``
  devices at least ``C / p``::

      1F1B, GPipe:    sum_g t_g + (m - 1) max_g t_g      >= C + (m - 1) C / p
      interleaved:    m max_d W_d + (p - 1) max_g t_g    >= m C / p + (p - 1) C / (p v)

  both ``C (m / p + (p - 1) / (p v))``, and the tail at least 0. Some stage holds at
  least ``n = ceil(L / S)`` layers, and a stage's floor (its compute, tensor- and
  expert-parallel, ZeRO-3 gather and per-microbatch gradient floors) grows with its
  layers, so ``max_g t_g`` is also at least that of a stage of ``n`` layers alone
  (`_fullest_stage_floor`): the larger of the two bounds is kept (GPT-3 175B at batch
  6144 on 256 A100s: the median floor of these configurations 94% -> 97% of the
  estimate, and the scaling curve's search estimates 9 configurations a point, not 85).

A configuration whose floor is above the step times the plan keeps cannot enter them, and
`plan_homogeneous` skips its estimate (it still estimates those the over-memory list could
name). The floor mirrors `StepModel.stage_segments` and `StepModel.tail` term by term:
a change there must keep it below (tests/training/test_bound.py checks every
configuration of several searches).

>>> import explorer as ex
>>> from explorer.training.step_model.model import StepModel
>>> cfg, hw = ex.models.load("gpt2"), ex.hardware.load("a100-80g")
>>> par = ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=2)
>>> step = StepModel(cfg, par, hw, 16, 512, ex.TrainingParams())
>>> step_time_floor(step) <= ex.estimate(cfg, par, hw, 16, 512).step_time_s
True
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import ParallelConfig
from ..pipeline.partition import StagePartition, distinct_devices, uniform_partition
from ..pipeline.schedule import pipeline_time
from ..step_model.kernels import optimizer_step_s
from ..step_model.model import StepModel
from ..step_model.split import probe_partition
from ..step_model.terms import dense, dp, ep, recompute, tp, zero

__all__ = ["step_time_floor", "FLOOR_SLACK", "known_partition"]

#: relative slack taken off the floor before it is compared: the floor sums the same terms
#: in another order than `estimate` does, so the two may differ in the last bits
FLOOR_SLACK = 1e-6


def step_time_floor(
    step: StepModel, zero_terms: bool = True, recomputed: int | None = None
) -> float:
    """Seconds no stage split and no recompute policy of ``step``'s configuration can beat
    in `estimate` (module docstring). It relies on `TrainingParams` keeping every overlap
    fraction and ``overlap_interference`` in [0, 1] (checked when they are made), which
    keeps each exposed term at least 0.

    ``zero_terms=False`` leaves out every term that depends on the ZeRO stage (ZeRO-3
    gathers, gradient reductions, the tail): a floor for every ZeRO stage of the
    configuration at once.

    ``recomputed=k`` (a ``per_layer`` configuration whose ladder cannot fit with fewer than
    ``k`` fully recomputed layers per stage, `simulate.ladder_fits`): the floor adds the
    recomputation of ``k`` full layers per stage and the attention core of the others
    (`_recompute_floor`), a floor for every count from ``k`` up."""
    part = known_partition(step.par, step.cfg.num_layers)
    rec = None if recomputed is None else _recompute_floor(step, recomputed)
    if part is None:
        return _even_floor(step, rec, zero_terms)
    return _staged_floor(step, part, zero_terms, rec)


def _recompute_floor(step: StepModel, k: int) -> tuple[Callable[[int], float], float] | None:
    """(seconds a stage of ``n`` layers recomputes per microbatch at least, seconds any
    split of the model into stages recomputes at least), with ``k`` or more layers of each
    stage fully recomputed (`recompute.layers_s`: a full layer's forward ``F``, a
    selective one's attention core ``s``; more full layers cost more when ``F >= s``, and
    with ``F < s`` every layer costs at least ``F``). Any split: every layer at least the
    cheaper, and at least ``k`` layers full in all."""
    if step.par.recompute != "per_layer":
        return None
    full = recompute.layers_s(step, 1, 1)  # one layer, fully recomputed
    sel = recompute.layers_s(step, 1, 0)  # one layer, its attention core
    L = step.cfg.num_layers
    k = k if full >= sel else L

    def per_stage(n: int) -> float:
        return recompute.layers_s(step, n, k)

    return per_stage, L * min(full, sel) + max(full - sel, 0.0) * min(k, L)


def known_partition(par: ParallelConfig, num_layers: int) -> StagePartition | None:
    """The split `estimate` will use when it does not depend on the stages' times (the
    first rules of `simulate._partition`), else None."""
    if par.stage_layers is not None:
        if sum(par.stage_layers) != num_layers:
            return None  # `estimate` refuses it; nothing to bound
        return StagePartition.from_layers(par.stage_layers)
    if par.pp == 1 or (par.virtual_stages > 1 and num_layers % par.stages == 0):
        return uniform_partition(num_layers, par.stages)
    return None


def _floor(comm: float, fraction: float, interference: float) -> float:
    """The least ``exposed_s(comm, window, fraction, interference)`` over every window."""
    return comm * (1.0 - fraction * (1.0 - interference))


def _tp_floor(step: StepModel, part: StagePartition, g: int) -> float:
    n = part.layers(g)
    f, b = tp.stage_comm_s(step, part, g)
    raw = f + b - tp.regathered_s(step, n)  # the re-gathers depend on the recompute policy
    return _floor(raw, step.tparams.tp_comm_overlap_fraction, step.tparams.overlap_interference)


def _by_shape(step: StepModel, part: StagePartition, of) -> list[float]:
    """``of(g)`` for every stage of ``part``, worked out once per stage shape (layers,
    embedding?, head?) when the model has no dense first layers (as `StepModel` keeps its
    stage terms: with them a stage's position matters too)."""
    if step.dense is not None:
        return [of(g) for g in range(part.stages)]
    memo: dict[tuple, float] = {}
    out = []
    for g, shape in enumerate(part.shapes):
        value = memo.get(shape)
        if value is None:
            value = memo[shape] = of(g)
        out.append(value)
    return out


def _even_floor(step: StepModel, rec=None, zero_terms: bool = True) -> float:
    par = step.par
    p, v, stages = par.pp, par.virtual_stages, par.stages
    part = uniform_partition(step.cfg.num_layers, stages)

    def stage(g: int) -> float:
        fwd, bwd = step.stage_compute_s(part, g)
        return fwd + bwd + _tp_floor(step, part, g)

    whole = step.derived.get(("floor whole",))  # the same for every recomputation floor
    if whole is None:
        whole = step.derived[("floor whole",)] = sum(_by_shape(step, part, stage))
    if rec is not None:  # the split is not known: what every split recomputes at least
        whole += rec[1]
    p2p = 2 * (stages - 1) * step.p2p_s
    floor = whole * (step.m / p + (p - 1) / (p * v)) + p2p
    fullest = _fullest_stage_floor(step, zero_terms, rec)
    if fullest is None:
        return floor
    if v == 1:  # sum_g t_g + (m - 1) max_g t_g
        return max(floor, whole + (step.m - 1) * fullest + p2p)
    return max(floor, step.m * whole / p + (p - 1) * fullest + p2p)  # m W_d + (p - 1) t_g


def _fullest_stage_floor(step: StepModel, zero_terms: bool, rec) -> float | None:
    """A floor under the slowest stage's time in every split: some stage holds at least
    ``n = ceil(L / S)`` layers, and a stage's floor (`_stage_floor`) grows with its layers
    and with the embedding or the head, so it is at least that of a stage of ``n`` layers
    alone (the cheaper of the two end stages' when there are two). None where that does
    not hold or cannot be priced: dense first layers (layers of two kinds), more stages
    than layers."""
    L, S = step.cfg.num_layers, step.par.stages
    if step.dense is not None or S > L or S < 2:
        return None
    n = -(-L // S)
    key = ("fullest stage", zero_terms)
    base = step.derived.get(key)
    if base is None:
        probes = [(probe_partition(L, S, 1, n), 1)] if S > 2 else [
            (probe_partition(L, S, 0, n), 0), (probe_partition(L, S, 1, n), 1)
        ]  # fmt: skip
        base = step.derived[key] = min(_stage_floor(step, q, g, zero_terms) for q, g in probes)
    return base if rec is None else base + rec[0](n)


def _staged_floor(
    step: StepModel, part: StagePartition, zero_terms: bool = True, rec=None
) -> float:
    """The floor over a known split: each stage's terms and the tail are worked out once
    per (split, ZeRO terms?) of a step (`_staged_parts`); a recomputation floor adds to
    each stage (the search asks several counts of one configuration; the floors differ
    from one sum in the last bits only, which FLOOR_SLACK covers)."""
    key = ("floor parts", part, zero_terms)
    parts = step.derived.get(key)
    if parts is None:
        parts = step.derived[key] = _staged_parts(step, part, zero_terms)
    t_stage, tail = parts
    if rec is not None:
        t_stage = [t + rec[0](part.layers(g)) for g, t in enumerate(t_stage)]
    pipe = pipeline_time(t_stage, step.m, step.par.pp) + 2 * (step.par.stages - 1) * step.p2p_s
    return pipe if not zero_terms else pipe + tail


def _stage_floor(step: StepModel, part: StagePartition, g: int, zero_terms: bool) -> float:
    """Stage ``g``'s seconds per microbatch at least, recomputation aside: its compute and
    the floors of its tensor-parallel, expert-parallel, ZeRO-3 gather and per-microbatch
    gradient terms (``zero_terms``)."""
    tparams = step.tparams
    io = tparams.overlap_interference
    # the terms no ZeRO stage changes, by the stage's shape (without dense first layers),
    # kept for the configuration's other ZeRO stages (`StepModel.zero_free`)
    key = ("stage floor", part.shapes[g]) if step.dense is None else None
    t = step.zero_free.get(key) if key is not None else None
    if t is None:
        fwd, bwd = step.stage_compute_s(part, g)
        ep_raw = ep.stage_s(step, dense.moe_layers_in(step, part, (g,)))
        t = fwd + bwd + _tp_floor(step, part, g)
        t += 2 * _floor(ep_raw, tparams.ep_comm_overlap_fraction, io)
        if key is not None:
            step.zero_free[key] = t
    if not zero_terms:
        return t
    n = part.layers(g)
    params = step.stage_params(part, g)
    gather = zero.gather_s(step, params, n)
    grads = dp.microbatch_s(step, params, n)
    return (
        t + 2 * _floor(gather, tparams.zero_gather_overlap_fraction, io)
        + _floor(grads, tparams.zero_grad_overlap_fraction, io)
    )  # fmt: skip


def _staged_parts(
    step: StepModel, part: StagePartition, zero_terms: bool
) -> tuple[list[float], float]:
    """(each stage's floor per microbatch without recomputation, the tail's floor)."""
    par, tparams = step.par, step.tparams
    io = tparams.overlap_interference
    p, v = par.pp, par.virtual_stages
    t_stage = _by_shape(step, part, lambda g: _stage_floor(step, part, g, zero_terms))
    if not zero_terms:
        return t_stage, 0.0
    tail = 0.0
    tails: dict[float, float] = {}  # by a device's parameters
    # without dense first layers a device's parameters follow its chunks' shapes: the
    # first device of each (`distinct_devices`) stands for the others
    devices = range(p) if step.dense is not None else distinct_devices(part, p, v)
    for d in devices:
        params = sum(step.stage_params(part, c * p + d) for c in range(v))
        if params not in tails:
            opt = optimizer_step_s(zero.updated_params(step, params), step.cluster.chip, tparams)
            grads = _floor(dp.tail_s(step, params), tparams.grad_overlap_fraction, io)
            gather = _floor(
                zero.tail_gather_s(step, params), tparams.param_gather_overlap_fraction, io
            )
            tails[params] = opt + grads + gather
        tail = max(tail, tails[params])
    return t_stage, tail
