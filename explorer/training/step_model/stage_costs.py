"""Per-layer costs inside one pipeline stage, found by the operator-strategy search.

The tensor-parallel layout of every operator comes from ``explorer.search`` on the
graph of a one-layer and a two-layer model over a ``{"tp": t}`` mesh (so Megatron-style
column/row splits are found, not assumed); the layer's cost is the difference of the two
plans' costs and the embedding + head cost is what remains of the one-layer plan. Each part also
carries its local kernels (`kernels.OpShape`: GEMM dims, bytes) under the chosen layouts,
which `kernels.timed_costs` turns into compute times by shape.

What is decided and what it costs are kept apart: `StageDecisions` holds the layouts the
search chose (and what follows from them alone: sizes, kernels, the chosen strategies' raw
FLOPs, bytes and collectives); costing them under a `CostParams` is a few array
operations with the search's own formula (``costmodel.node_terms`` / ``edge_terms``).
Normally the layouts are searched under the very `CostParams` they are costed with; inside
``with decisions_fixed_at(p0):`` they are searched under ``p0`` once and only re-costed
under the params each call passes (how `calibrate` moves a bandwidth or an efficiency
without searching again). Costs are memoized on every argument (model, sequence, tp,
microbatch size, hardware, cost parameters, search method, fused ops, and the params the
layouts were decided under): ``stage_costs.memo``.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from ...hardware import Cluster, Mesh
from ...memo import memoize
from ...models import ModelConfig, build
from ...search.constraints import Pin
from ...search.costmodel import EdgeTable, NodeTable, edge_terms, node_terms
from ...search.errors import SearchError
from ...search.params import CostParams
from ...search.plan import ShardingPlan
from ...search.planner import Method, Planner
from .costs import OpShape, PartCost, StageCosts
from .kernels import op_shapes

__all__ = [
    "StageDecisions",
    "stage_costs",
    "stage_decisions",
    "decisions_fixed_at",
]

_ATTENTION_CORE = ("scores", "scale", "mask", "probs", "probs_dropout", "context")

#: ``layout="megatron"``: the strategy of each contraction of a dense layer under
#: Megatron-LM's tensor parallelism (Shoeybi et al. 2019, section 3: the first GEMM of the
#: MLP split by columns, the second by rows; attention split by heads, its output
#: projection by rows), as Megatron-Core (ColumnParallelLinear / RowParallelLinear) and
#: torchtitan (parallelize_llama.py's ColwiseParallel / RowwiseParallel plan) run it.
#: ``n=tp``: the output features (or heads) split; ``k=tp``: the contraction split (a
#: partial sum reduced after it). The norms and residual adds between them run on a
#: ``1/tp`` share of the sequence (``b=tp``: Korthikanti et al. 2022's sequence parallelism,
#: Megatron-Core's sequence_parallel, torchtitan's SequenceParallel on the norms), so the
#: collectives are the all-gather before a column split and the reduce-scatter after a row
#: split.
MEGATRON_TP = {
    "attn.q": "n=tp", "attn.k": "n=tp", "attn.v": "n=tp", "attn.scores": "n=tp",
    "attn.context": "n=tp", "attn.o": "k=tp", "mlp.gate": "n=tp", "mlp.up": "n=tp",
    "mlp.fc1": "n=tp", "mlp.down": "k=tp", "mlp.fc2": "k=tp", "attn.norm": "b=tp",
    "mlp.norm": "b=tp", "attn.residual": "b=tp", "mlp.residual": "b=tp",
}  # fmt: skip
LAYOUTS = ("searched", "megatron")

# The CostParams the layouts are decided under, when fixed (per thread and per task).
_DECIDED_AT: contextvars.ContextVar[CostParams | None] = contextvars.ContextVar(
    "explorer_stage_decisions_at", default=None
)


# ----- decisions ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Chosen:
    """The raw tables of the chosen strategies of some nodes (and edges) of one plan,
    stacked into one table each (a row per node or edge), so that their cost under any
    `CostParams` is one call of the search's own ``node_terms`` / ``edge_terms``."""

    nodes: NodeTable
    edges: EdgeTable | None

    @classmethod
    def of(
        cls, plan: ShardingPlan, nodes: list[int], with_edges: bool, shared: bool = False
    ) -> _Chosen:  # fmt: skip
        """``shared``: a value redistributed once serves every consumer that needs it in
        the same layout (the edges after the first of one source and layout cost nothing:
        sequence parallelism all-gathers a norm's output once for the q, k and v GEMMs, and
        reduce-scatters their summed gradient once)."""
        model, choice = plan.cost_tables
        picked = [(model.nodes[i], choice[i]) for i in nodes]

        def col(values) -> np.ndarray:
            return np.array(list(values), dtype=float).reshape(-1, 1)

        def rows(arrays) -> np.ndarray:
            arrays = list(arrays)
            width = max((a.shape[0] for a in arrays), default=0)
            out = np.zeros((len(arrays), width))
            for r, a in enumerate(arrays):
                out[r, : a.shape[0]] = a
            return out

        # Arrays of shape (rows, 1) broadcast against the (rows, steps) collectives:
        # node_terms reads nt.x[k] with k = slice(None), and every scalar field as a column.
        nt = NodeTable(
            name="chosen", strategies=(),
            flops=col(t.flops[k] for t, k in picked),
            rw_bytes=col(t.rw_bytes[k] for t, k in picked),
            read_bytes=col(t.read_bytes[k] for t, k in picked),
            mem_bytes=col(t.mem_bytes[k] for t, k in picked),
            coll_time=rows(t.coll_time[k] for t, k in picked),
            coll_bytes=rows(t.coll_bytes[k] for t, k in picked),
            coll_kind=np.zeros((0, 0), dtype=int), is_dp=np.zeros(0, dtype=bool),
            peak_flops=col(t.peak_flops for t, _ in picked),  # type: ignore[arg-type]
            mem_bw=col(t.mem_bw for t, _ in picked),  # type: ignore[arg-type]
            multiplicity=col(t.multiplicity for t, _ in picked),  # type: ignore[arg-type]
        )  # fmt: skip
        et = None
        if with_edges:
            pairs = [
                (e, choice[model.index[e.src]], choice[model.index[e.dst]]) for e in model.edges
            ]
            if shared:
                pairs = _first_uses(plan, pairs)
            et = EdgeTable(
                src="chosen", dst="chosen", pos=0,
                time=rows(e.time[u, v] for e, u, v in pairs),
                nbytes=rows(e.nbytes[u, v] for e, u, v in pairs),
                kind=np.zeros((0, 0), dtype=int),
                grad_time=col(e.grad_time[u, v] for e, u, v in pairs),
                grad_bytes=col(e.grad_bytes[u, v] for e, u, v in pairs),
                multiplicity=col(e.multiplicity for e, _, _ in pairs),  # type: ignore[arg-type]
            )  # fmt: skip
        return cls(nt, et)

    def cost(self, p: CostParams) -> np.ndarray:
        """``[compute, communication, gradient]`` under ``p``, summed over the rows (the
        terms ``breakdown.plan_breakdown`` adds up; memory is not a time)."""
        compute, comm, _ = node_terms(self.nodes, p)
        out = np.array([float(np.sum(compute)), float(np.sum(comm)), 0.0])
        if self.edges is not None:
            ecomm, grad = edge_terms(self.edges, p)
            out += (0.0, float(np.sum(ecomm)), float(np.sum(grad)))
        return out


def _first_uses(plan: ShardingPlan, pairs: list) -> list:
    """``pairs`` (edge, source strategy, consumer strategy) with every edge after the first
    of the same source and required input layout made free (zero time, bytes and gradient
    time): `_Chosen.of`'s ``shared``."""
    seen, out = set(), []
    for e, u, v in pairs:
        key = (e.src, str(plan.assignment[e.dst].in_layouts[e.pos]))
        if key in seen:
            z2 = np.zeros_like(e.grad_time)
            e = replace(e, time=np.zeros_like(e.time), nbytes=np.zeros_like(e.nbytes),
                        grad_time=z2, grad_bytes=np.zeros_like(e.grad_bytes))  # fmt: skip
        seen.add(key)
        out.append((e, u, v))
    return out


@dataclass(frozen=True, eq=False)
class StageDecisions:
    """What the operator search decided for one layer, the embedding and the head, and
    what follows from the layouts alone (not from the `CostParams`).

    Attributes:
        decided_at: the `CostParams` the search ran under.
        choice: the chosen strategy index of every node of the one-layer and the two-layer
            plan (two decisions are the same layouts when their ``choice`` is equal).
        strategies: (op in layer 0, strategy name) of the contractions.
    """

    decided_at: CostParams
    choice: tuple[tuple[int, ...], tuple[int, ...]]
    strategies: tuple[tuple[str, str], ...]
    plan1: _Chosen = field(repr=False)
    plan2: _Chosen = field(repr=False)
    embed: _Chosen = field(repr=False)
    fused: _Chosen = field(repr=False)
    core: _Chosen = field(repr=False)
    sizes: tuple[dict[str, int], dict[str, int], dict[str, int]] = field(repr=False)
    kernels: tuple[tuple[OpShape, ...], ...] = field(repr=False)

    def costs(self, params: CostParams) -> StageCosts:
        """The stage costs of these layouts under ``params`` (which may differ from the
        params they were decided under)."""
        p = _normal(params)
        one, two = self.plan1.cost(p), self.plan2.cost(p)
        layer = two - one
        head = one - layer - self.embed.cost(p)  # the head keeps the fused ops' share
        layer = layer - self.fused.cost(p)
        s_layer, s_embed, s_head = self.sizes
        k_layer, k_embed, k_head = self.kernels
        return StageCosts(
            layer=replace(
                _part(layer, p, **s_layer, kernels=k_layer),
                recompute_selective_s=_split(self.core.cost(p), p)[0],
            ),
            embed=_part(self.embed.cost(p), p, **s_embed, kernels=k_embed),
            head=_part(head, p, **s_head, kernels=k_head),
            strategies=self.strategies,
        )


def _split(cost: np.ndarray, p: CostParams) -> tuple[float, float, float, float]:
    """(forward, backward, tp forward, tp backward) seconds of ``[compute, comm, grad]``."""
    compute, comm, grad = (float(x) for x in cost)
    fwd = compute / (1 + p.backward_compute_ratio)
    comm_fwd = comm / (1 + p.backward_comm_ratio)
    return fwd, compute - fwd, comm_fwd, comm - comm_fwd + grad


def _part(cost: np.ndarray, p: CostParams, **sizes) -> PartCost:
    f, b, tf, tb = _split(cost, p)
    return PartCost(forward_s=f, backward_s=b, tp_forward_s=tf, tp_backward_s=tb, **sizes)


@functools.lru_cache(maxsize=64)  # a replace() validates every field: once per CostParams
def _normal(p: CostParams) -> CostParams:
    """The params the per-stage search runs under: training, and no whole-device memory
    cap (memory is modelled per stage by the training simulator; the one-layer search
    must not reject a layout because the whole device is the cap)."""
    if p.device_memory_cap_bytes is None:
        p = replace(p, device_memory_cap_bytes=float("inf"))
    return p if p.training else replace(p, training=True)


@memoize(maxsize=32, name="training.stage_planners")
def _planners(cfg: ModelConfig, seq: int, tp: int, microbatch_size: int, cluster: Cluster):
    """The one- and two-layer graphs and their `Planner` (cost tables built once, so a
    search under other `CostParams` only re-weighs them)."""
    mesh = Mesh({"tp": tp}, hardware=cluster)
    g1 = build(cfg.replace(num_layers=1), batch=microbatch_size, seq=seq)
    g2 = build(cfg.replace(num_layers=2), batch=microbatch_size, seq=seq)
    # reuse_layers=False: two layers gain nothing from solving repeats once
    return mesh, g1, Planner(g1, mesh, reuse_layers=False), Planner(g2, mesh, reuse_layers=False)


def _megatron_pins(cfg: ModelConfig, graph, tp: int) -> tuple[Pin, ...]:
    """`MEGATRON_TP` as pins on the layers' contractions of ``graph`` (a dense model's:
    an MoE or latent-attention layer keeps the searched layouts), none for ``tp == 1``."""
    if tp <= 1 or cfg.is_moe or cfg.is_mla:
        return ()
    pins = []
    for n in graph.ops:
        if not n.scope.startswith("layers."):
            continue
        key = ".".join(n.name.split(".")[-2:])
        if key in MEGATRON_TP:
            pins.append(Pin(n.name, MEGATRON_TP[key]))
    return tuple(pins)


def _search(planner: Planner, method: Method, p: CostParams, pins: tuple[Pin, ...]):
    """The plan under ``pins``; the searched one when no plan honours them (a head or
    feature count ``tp`` does not divide)."""
    if pins:
        try:
            return planner.search(method, p, constraints=pins)
        except SearchError:
            pass
    return planner.search(method, p)


@memoize(maxsize=256, name="training.stage_decisions")
def stage_decisions(
    cfg: ModelConfig, seq: int, tp: int, microbatch_size: int, cluster: Cluster,
    params: CostParams, method: Method = "dynamic_programming", fused: tuple[str, ...] = (),
    layout: str = "searched",
) -> StageDecisions:  # fmt: skip
    """The layouts the operator search chooses for one layer, the embedding and the head
    on a ``tp``-way group under ``params`` (see `stage_costs`); ``layout="megatron"``
    pins a dense layer's contractions to `MEGATRON_TP`."""
    p = _normal(params)
    mesh, g1, planner1, planner2 = _planners(cfg, seq, tp, microbatch_size, cluster)
    megatron = layout == "megatron"
    plan1 = _search(planner1, method, p, _megatron_pins(cfg, g1, tp) if megatron else ())
    plan2 = _search(
        planner2, method, p, _megatron_pins(cfg, planner2.graph, tp) if megatron else ()
    )
    index = plan1.cost_tables[0].index
    embed, fused_, core = [], [], []
    for n in g1.ops:
        short = n.name.split(".")[-1]
        if n.scope.startswith("embed"):
            embed.append(index[n.name])
        elif n.scope.startswith("layers.0") and short in fused:
            fused_.append(index[n.name])
        elif n.scope.startswith("layers.0") and short in _ATTENTION_CORE:
            core.append(index[n.name])

    def sizes(scope: str) -> dict[str, int]:
        params_ = [n for n in g1.parameters if n.scope.startswith(scope)]
        ops = [n.name for n in g1.ops if n.scope.startswith(scope)]
        return {
            "params": sum(n.type.numel for n in params_),
            "expert_params": sum(
                n.type.numel for n in params_ if ".moe" in n.name and len(n.type.shape) == 3
            ),
            "flops": g1.flops(ops),
            "param_shapes": tuple((n.name[len(scope) + 1 :], tuple(n.type.shape)) for n in params_),
        }

    def kernels(scope: str, skip: tuple[str, ...] = ()) -> tuple[OpShape, ...]:
        return op_shapes(g1, plan1, mesh, scope, skip, _ATTENTION_CORE)

    every = list(range(len(plan1.cost_tables[1])))
    return StageDecisions(
        decided_at=p,
        choice=(plan1.cost_tables[1], plan2.cost_tables[1]),
        strategies=tuple(
            (n.name, plan1.assignment[n.name].name)
            for n in g1.ops
            if n.scope.startswith("layers.0") and g1.group(n.name).value == "contraction"
        ),
        plan1=_Chosen.of(plan1, every, with_edges=True, shared=megatron),
        plan2=_Chosen.of(
            plan2, list(range(len(plan2.cost_tables[1]))), with_edges=True, shared=megatron
        ),
        embed=_Chosen.of(plan1, embed, with_edges=False),
        fused=_Chosen.of(plan1, fused_, with_edges=False),
        core=_Chosen.of(plan1, core, with_edges=False),
        sizes=(sizes("layers.0"), sizes("embed"), sizes("head")),
        kernels=(kernels("layers.0", fused), kernels("embed"), kernels("head")),
    )


@contextmanager
def decisions_fixed_at(params: CostParams) -> Iterator[None]:
    """Within the block, `stage_costs` takes the layouts the search chooses under
    ``params`` and only re-costs them under the `CostParams` it is given: moving a
    bandwidth or an efficiency then costs array operations, not a search. Per thread
    (a context variable); blocks nest, the innermost wins.

    >>> import explorer as ex
    >>> cfg, hw = ex.models.load("gpt2"), ex.hardware.load("a100-80g")
    >>> p0, p1 = ex.CostParams(), ex.CostParams(bandwidth_efficiency=0.4)
    >>> with decisions_fixed_at(p0):
    ...     moved = stage_costs(cfg, 256, 2, 1, hw, p1)
    >>> moved.layer.tp_forward_s > stage_costs(cfg, 256, 2, 1, hw, p0).layer.tp_forward_s
    True
    """
    if not isinstance(params, CostParams):
        raise SearchError(
            f"decisions_fixed_at({params!r}): expected the CostParams to decide layouts under"
        )
    token = _DECIDED_AT.set(_normal(params))
    try:
        yield
    finally:
        _DECIDED_AT.reset(token)


def stage_costs(
    cfg: ModelConfig, seq: int, tp: int, microbatch_size: int, cluster: Cluster,
    params: CostParams, method: Method = "dynamic_programming", fused: tuple[str, ...] = (),
    layout: str = "searched",
) -> StageCosts:  # fmt: skip
    """Costs of one layer, the embedding and the head on a ``tp``-way group.

    ``fused`` names layer ops (by the last part of their name, e.g. ``"scale"``) that a
    fused kernel folds into their neighbour, so their own cost is dropped: Megatron-LM's
    fused scale-mask-softmax, bias-GeLU and bias-dropout-add kernels. The layouts are
    searched under ``params`` (or, inside `decisions_fixed_at`, under its params).
    ``layout``: ``"searched"`` (the operator search's layouts) or ``"megatron"`` (a dense
    layer's contractions pinned to Megatron-LM's tensor parallelism, `MEGATRON_TP`).

    >>> import explorer as ex
    >>> c = stage_costs(ex.models.load("gpt2"), 256, 2, 1, ex.hardware.load("a100-80g"),
    ...                 ex.CostParams())
    >>> c.layer.params
    7087872
    """
    if layout not in LAYOUTS:
        raise SearchError(
            f"stage_costs(layout={layout!r}); expected one of {', '.join(LAYOUTS)} (the "
            "operator search's layouts, or Megatron-LM's tensor parallelism)"
        )
    decided_at = _DECIDED_AT.get() or _normal(params)
    return _stage_costs(
        cfg, seq, tp, microbatch_size, cluster, params, method, fused, decided_at, layout
    )


@memoize(maxsize=256, name="training.stage_costs")
def _stage_costs(cfg, seq, tp, microbatch_size, cluster, params, method, fused, decided_at, layout):
    decisions = stage_decisions(
        cfg, seq, tp, microbatch_size, cluster, decided_at, method, fused, layout
    )
    return decisions.costs(params)


stage_costs.memo = _stage_costs.memo  # type: ignore[attr-defined]
