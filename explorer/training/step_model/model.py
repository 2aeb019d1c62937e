"""The model of one training configuration: times and sizes per stage, memory per
device, communication per step. `simulate` and `estimate` (in ``simulate.py``) share it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

from explorer.hardware.wan import collective_time as dc_collective_time

from ...hardware import Cluster, HardwareError, Mesh
from ...ir import DType
from ...memo import Memo, memoize
from ...models import ModelConfig
from ..config import ParallelConfig
from ..errors import ParallelConfigError, TrainingParamsError
from ..layout import check_layout
from ..memory import MemoryBreakdown
from ..params import TrainingParams
from ..pipeline.partition import StagePartition
from .costs import StageCosts
from .kernels import optimizer_step_s, timed_costs
from .placement import mesh_axes
from .stage_costs import stage_costs
from .terms import cp, dense, dp, ep, pp, recompute, tp, zero

__all__ = ["COMM_KINDS", "StepModel", "exposed_s"]

COMM_KINDS = ("tp", "pp", "dp", "zero", "ep", "cp")


class StepModel:
    """Times and sizes of one configuration: shared by `simulate` and `estimate`.

    The parallelisms' terms live in ``terms/`` (tp, pp, dp, zero, recompute, ep, cp); this class
    holds the configuration and composes them into stage segments, the step's tail, memory
    per device, FLOPs and bytes sent.
    """

    def __init__(
        self, cfg, par: ParallelConfig, cluster: Cluster, gb: int, seq: int, tp_: TrainingParams
    ):
        cluster = _sized(_job_cluster(cluster, tp_), par)
        self.cfg, self.par, self.cluster, self.seq, self.tparams = cfg, par, cluster, seq, tp_
        _validate(cfg, par, cluster, seq)
        _check_precision(tp_, cluster)
        self.m = par.microbatches(gb)
        self.gb = gb
        self.seq_local = cp.local_seq(seq, par.cp)  # positions per context-parallel rank
        whole = stage_costs(
            dense.layer_config(cfg),  # every layer a MoE layer; dense first layers: moe.py
            seq,
            par.tp,
            par.microbatch_size,
            cluster,
            tp_.cost,
            tp_.search_method,
            tp_.fused_ops,
            tp_.tp_layout,
        )
        whole = timed_costs(whole, cluster.chip, tp_)  # kernel time by shape (kernels.py)
        self.costs: StageCosts = cp.split_costs(whole, par.cp)
        self.costs = dense.ep_kernels(self.costs, cfg, par, cluster.chip, tp_)  # experts over ep
        # devices over (pp, dp, ep, cp, tp); across datacenters dp goes outermost
        self.mesh, self._collective_times = _shared_mesh(par, cluster)
        self.act_dtype_bytes = _itemsize(cfg.dtype)
        self.cap = tp_.cost.device_memory_cap_bytes or float(cluster.chip.memory_bytes)
        # Parameters on one device per part.
        self.layer_params = ep.layer_params(self.costs.layer, par.tp, par.ep, par.etp)
        self.embed_params = tp.split_params(self.costs.embed.params, par.tp)
        self.head_params = tp.split_params(pp.head_params(self), par.tp)
        self.p2p_s, self.p2p_bytes = pp.p2p(self)
        self.p2p_s *= 1.0 - tp_.p2p_overlap_fraction  # sent behind the next chunk's compute
        self.ep_s, self.ep_bytes = ep.all_to_all(self)
        self.cp_fwd_s, self.cp_bwd_s, self.cp_fwd_bytes, self.cp_bwd_bytes = cp.exchange(self)
        self.dense = dense.dense_layers(self)  # MoE models' dense first layers, or None
        # per-policy activation bytes of one layer and the embedding's: pure functions of
        # the configuration, asked for ~100 times per estimate (recompute ladder, splits)
        self._layer_act: dict[str, float] = {}
        self._embed_act: float | None = None
        # what `simulate` and `estimate` derive from this configuration more than once (the
        # memory of one split at one recompute count, asked by the split and the ladder)
        self.derived: dict[tuple, object] = {}
        # the memory terms that depend on the configuration alone (`device_memory`: head
        # activations, context parallelism's K/V in flight, ZeRO-3's gather buffer), on
        # first use
        self._memory_terms: tuple[float, float, float] | None = None
        self._reduce_buffers: dict[float, float] = {}
        # per (split, device): `device_memory`'s terms that do not depend on the recompute
        # count or the activations (the ladder asks ~5 counts of one split); per (its
        # chunks' layer counts, recompute count): the recompute working set
        self._device_static: dict[tuple, tuple] = {}
        self._working_sets: dict[tuple, float] = {}
        self._stage_params: dict[tuple[int, bool, bool], float] = {}
        # a stage's compute seconds (by its shape, without dense first layers) and
        # activation bytes (by layers, embedding?, recomputed layers): asked ~10 times per
        # shape by the split, the memory of each device and the tail's windows
        self._stage_compute: dict[tuple[int, bool, bool], tuple[float, float]] = {}
        self._stage_act: dict[tuple[int, bool, int | None], float] = {}
        # per pipeline device, the chunk live counts its peak activations are weighed by
        # (`simulate.chunk_live_counts`: the same for every split and recompute count)
        self.live_states: dict[int, tuple[tuple[int, ...], ...]] = {}
        # what the plan's search derives from this configuration that no ZeRO stage
        # changes (a stage's floor without its ZeRO terms): shared with `with_zero` twins
        self.zero_free: dict[tuple, object] = {}

    def with_zero(self, zero: int) -> StepModel:
        """This configuration at ZeRO stage ``zero``: the same costs, mesh and parts, and
        the same tables of what no ZeRO stage changes (per-layer and per-stage activations,
        stage compute and parameters, live counts, working sets, ``zero_free``), shared
        with this one; the memory and the tables that depend on the stage start empty. The
        plan's search asks for the ZeRO stages of one configuration one after another
        (`planning.bounded`): a sibling costs a copy instead of a construction.

        >>> import explorer as ex
        >>> cfg, hw = ex.models.load("gpt2"), ex.hardware.load("a100-80g")
        >>> one = StepModel(cfg, ex.ParallelConfig(dp=4, zero=1), hw, 16, 512, ex.TrainingParams())
        >>> three = one.with_zero(3)
        >>> three.par.zero, three._stage_act is one._stage_act, three.derived is one.derived
        (3, True, False)
        """
        twin = copy.copy(self)
        twin.par = self.par.replace(zero=zero)
        twin.derived = {}
        twin._memory_terms = None
        twin._reduce_buffers = {}
        twin._device_static = {}
        return twin

    def collective_s(self, kind: str, size: float, axes: tuple[str, ...]) -> float:
        """Seconds of one collective on this configuration's mesh (memoized): looked up
        in the mesh's own table first (`_shared_mesh`), which spares hashing the whole
        mesh and its cluster on each of the ~10 collectives of an estimate."""
        key = (kind, size, axes)
        seconds = self._collective_times.get(key)
        if seconds is None:
            seconds = self._collective_times[key] = _collective_s(self.mesh, kind, size, axes)
        return seconds

    # --- per-layer activations and recompute ------------------------------------------
    def layer_act(self, policy: str) -> float:
        """`recompute.layer_act` of this configuration (computed once per policy)."""
        act = self._layer_act.get(policy)
        if act is None:
            act = self._layer_act[policy] = recompute.layer_act(self, policy)
        return act

    def layer_policies(self, n_layers: int, n_full: int | None) -> tuple[int, int, int]:
        """(layers with no recompute, selective, full) among ``n_layers`` of a stage."""
        return recompute.layer_policies(self.par.recompute, n_layers, n_full)

    # --- times per part ---------------------------------------------------------------
    def stage_compute_s(self, part: StagePartition, g: int) -> tuple[float, float]:
        """(forward, backward) compute seconds of stage ``g`` for one microbatch: its
        parts' kernels plus ``microbatch_overhead_s`` each way, and ``moe_layer_overhead_s``
        for each of its MoE layers. Without dense first layers they depend on the stage's
        shape alone (layers, embedding?, head?), so they are computed once per shape."""
        return self._by_shape(self._stage_compute, self._stage_compute_of, part, g)

    def _by_shape(self, cache: dict, compute, part: StagePartition, g: int):
        """``compute(part, g)``, kept in ``cache`` by the stage's shape (layers, embedding?,
        head?) when the model has no dense first layers (with them the stage's position
        matters too)."""
        if self.dense is not None:
            return compute(part, g)
        key = part.shapes[g]  # (layers, embedding?, head?)
        value = cache.get(key)
        if value is None:
            value = cache[key] = compute(part, g)
        return value

    def _stage_compute_of(self, part: StagePartition, g: int) -> tuple[float, float]:
        c = self.costs
        n = part.layers(g)
        fwd = n * c.layer.forward_s
        bwd = n * c.layer.backward_s
        for has, P in ((part.has_embed(g), c.embed), (part.has_head(g), c.head)):
            if has:
                fwd += P.forward_s
                bwd += P.backward_s
        fwd, bwd = dense.stage_compute(self, part, g, fwd, bwd)
        over = self.tparams.microbatch_overhead_s
        if self.cfg.is_moe and self.tparams.moe_layer_overhead_s:
            over += dense.moe_layers_in(self, part, (g,)) * self.tparams.moe_layer_overhead_s
        return fwd + over, bwd + over

    def stage_segments(self, part: StagePartition, g: int, n_full: int | None):
        """(forward segments, backward segments) of stage ``g`` for one microbatch."""
        n = part.layers(g)
        fwd, bwd = self.stage_compute_s(part, g)
        tpf, tpb = tp.stage_comm_s(self, part, g)
        tp_frac = self.tparams.tp_comm_overlap_fraction  # TP comm overlap / async TP
        io = self.tparams.overlap_interference
        # activation offload: each way's host copies on their own stream behind the stage's
        # compute; what they cannot hide delays the compute that needs the buffers. No
        # overlap_interference: the copy engines move them, not the SMs, and they take a
        # small share of HBM (225 GB/s of a GB200's 8 TB/s)
        off = recompute.offload_copy_s(self, n, n_full)
        if off:
            fwd, bwd = fwd + exposed_s(off, fwd, 1.0), bwd + exposed_s(off, bwd, 1.0)
        tpf, tpb = exposed_s(tpf, fwd, tp_frac, io), exposed_s(tpb, bwd, tp_frac, io)
        rec = recompute.layers_s(self, n, n_full)
        params = self.stage_params(part, g)
        ep_raw = ep.stage_s(self, dense.moe_layers_in(self, part, (g,)))
        # overlap_moe_expert_parallel_comm: a forward's all-to-alls behind another
        # microbatch's backward compute, a backward's behind another's forward
        ep_frac = self.tparams.ep_comm_overlap_fraction
        ep_f, ep_b = exposed_s(ep_raw, bwd, ep_frac, io), exposed_s(ep_raw, fwd, ep_frac, io)
        zg_raw = zero.gather_s(self, params, n)
        z_frac = self.tparams.zero_gather_overlap_fraction
        zg = exposed_s(zg_raw, fwd, z_frac, io)  # forward gather behind the forward
        zgb = exposed_s(zg_raw, bwd, z_frac, io)  # backward gather behind the backward
        zgr_raw = zg_raw * zero.regather_fraction(self, n, n_full)
        zgr = exposed_s(zgr_raw, rec, z_frac, io)  # recompute's gather behind the recompute
        free = max(bwd + rec - (zg_raw - zgb) - (zgr_raw - zgr), 0.0)  # not yet hiding any
        grads = exposed_s(
            dp.microbatch_s(self, params, n), free, self.tparams.zero_grad_overlap_fraction, io
        )  # ZeRO 2/3: each microbatch's reduce-scatter behind its backward
        cpf, cpb = cp.stage_s(self, n, n_full)
        f = [("zero-gather", zg), ("compute-forward", fwd), ("tp-comm", tpf), ("ep-comm", ep_f),
             ("cp-comm", cpf)]  # fmt: skip
        b = [("zero-gather", zgb + zgr), ("recompute", rec), ("compute-backward", bwd),
             ("tp-comm", tpb), ("ep-comm", ep_b), ("cp-comm", cpb),
             ("dp-comm", grads)]  # fmt: skip
        return f, b

    def stage_params(self, part: StagePartition, g: int) -> float:
        """Parameters on a device of stage ``g``. Without dense first layers they depend
        on the stage's layer count and whether it holds the embedding and the head alone
        (`dense.params_delta`), so they are computed once per such shape."""
        return self._by_shape(self._stage_params, self._stage_params_of, part, g)

    def _stage_params_of(self, part: StagePartition, g: int) -> float:
        return (
            part.layers(g) * self.layer_params
            + part.has_embed(g) * self.embed_params
            + part.has_head(g) * self.head_params
            + dense.params_delta(self, part, g)
        )

    def device_backward_s(self, part: StagePartition, d: int, n_full: int | None) -> float:
        """Compute seconds of one microbatch's backward (with recomputation) over the
        chunks of pipeline device ``d``: what the last gradient reduction can hide behind."""
        total = 0.0
        for c in range(self.par.virtual_stages):
            g = c * self.par.pp + d
            total += self.stage_compute_s(part, g)[1] + recompute.layers_s(
                self, part.layers(g), n_full
            )
        return total

    def device_forward_s(self, part: StagePartition, d: int) -> float:
        """Compute seconds of one microbatch's forward over the chunks of pipeline device
        ``d``: what the ZeRO-1/2 weight all-gather can hide behind in the next step."""
        chunks = range(self.par.virtual_stages)
        return sum(self.stage_compute_s(part, c * self.par.pp + d)[0] for c in chunks)

    def tail(
        self, params: float, backward_window_s: float = 0.0, forward_window_s: float = 0.0
    ) -> list[tuple[str, float]]:
        """Gradient reduction, optimizer step and (ZeRO 1/2) weight all-gather on a
        device holding ``params`` parameters; ``grad_overlap_fraction`` of the reduction
        runs behind the last microbatch's backward, at most ``backward_window_s`` of it
        (`device_backward_s`); ``param_gather_overlap_fraction`` of the weight all-gather
        behind the next step's first forward, at most ``forward_window_s``
        (`device_forward_s`)."""
        tp_ = self.tparams
        local = zero.updated_params(self, params)
        opt_s = optimizer_step_s(local, self.cluster.chip, tp_)
        io = tp_.overlap_interference
        grads = exposed_s(dp.tail_s(self, params), backward_window_s, tp_.grad_overlap_fraction, io)
        gather = exposed_s(
            zero.tail_gather_s(self, params), forward_window_s,
            tp_.param_gather_overlap_fraction, io,
        )  # fmt: skip
        return [("dp-comm", grads), ("optimizer", opt_s), ("zero-gather", gather)]

    # --- memory -----------------------------------------------------------------------
    def embed_act(self) -> float:
        """Activation bytes the embedding keeps per microbatch (its dropout mask; none
        when the model has no dropout, `recompute.activation_terms`)."""
        if self._embed_act is None:
            a = recompute.activation_terms(self)
            sbh = self.seq_local * self.par.microbatch_size * self.cfg.hidden_size
            self._embed_act = sbh * a.embedding_dropout_bytes / (self.par.tp if self.par.sp else 1)
        return self._embed_act

    def stage_act(self, part: StagePartition, g: int, n_full: int | None) -> float:
        """Activation bytes of stage ``g`` per microbatch in flight (less what its
        offloaded layers keep in host memory, `recompute.offload_saved_bytes`); computed once
        per (layers, embedding?, recomputed layers)."""
        n, embed, _ = part.shapes[g]
        key = (n, embed, n_full)
        act = self._stage_act.get(key)
        if act is None:
            act = recompute.layers_act(self, n, n_full) - recompute.offload_saved_bytes(
                self, n, n_full
            )
            if embed:
                act += self.embed_act()
            self._stage_act[key] = act
        return act

    def head_act(self) -> float:
        cfg, a = self.cfg, self.tparams.activations
        sbh = self.seq_local * self.par.microbatch_size * cfg.hidden_size
        return sbh * a.head_bytes * (1 + cfg.vocab_size / cfg.hidden_size) / self.par.tp

    def device_memory(
        self, part: StagePartition, d: int, n_full: int | None, live_act: float
    ) -> MemoryBreakdown:
        """The breakdown of device ``d`` given its peak live activations ``live_act``."""
        tp_ = self.tparams
        static = self._device_static.get((part, d))
        if static is None:
            static = self._device_static[part, d] = self._device_static_of(part, d)
        w, gr, opt, has_head, counts, rbuf = static
        if self._memory_terms is None:
            self._memory_terms = (
                self.head_act(), cp.transient_bytes(self), zero.gather_buffer_bytes(self)
            )  # fmt: skip
        head, transient, zbuf = self._memory_terms
        act = live_act + (head if has_head else 0.0)
        act += transient  # the layer in flight's gathered K, V (dK, dV)
        work = self._working_sets.get((counts, n_full))
        if work is None:
            work = self._working_sets[counts, n_full] = recompute.working_set(
                self, list(counts), n_full
            )
        al = tp_.allowances
        # Fragmentation is the caching allocator's: the CUDA context and the collective
        # library's buffers are allocated outside it (`MemoryAllowances`).
        frag = al.fragmentation_fraction * (w + gr + opt + act + work + zbuf + rbuf)
        return MemoryBreakdown(
            parameters=w, gradients=gr, optimizer_states=opt, activations=act,
            recompute_working_set=work, zero_gather_buffer=zbuf, zero_reduce_buffer=rbuf,
            runtime_context=al.runtime_context_bytes,
            communication_buffers=al.communication_buffer_bytes, fragmentation=frag, stage=d,
        )  # fmt: skip

    def _device_static_of(self, part: StagePartition, d: int) -> tuple:
        """What `device_memory` of device ``d`` reads of ``part`` alone: (weights,
        gradients, optimizer states, holds the head?, its chunks' layer counts, reduce
        buffer)."""
        par = self.par
        chunks = [c * par.pp + d for c in range(par.virtual_stages)]
        shapes = part.shapes
        params = sum(self.stage_params(part, g) for g in chunks)
        w, gr, opt = zero.state_bytes(self, params)
        has_head = any(shapes[g][2] for g in chunks)
        counts = tuple(shapes[g][0] for g in chunks)
        return w, gr, opt, has_head, counts, self.reduce_buffer(part, chunks)

    def reduce_buffer(self, part: StagePartition | None, chunks: list[int]) -> float:
        """Unsharded gradients a ZeRO-2/3 device holds until their reduce-scatter
        (`zero.reduce_buffer`): its largest part (a layer, the embedding or the head;
        every part when ``part`` is None) up to ``zero_reduce_bucket_params``."""
        units = [self.layer_params]
        shapes = part.shapes if part is not None else None
        if shapes is None or any(shapes[g][1] for g in chunks):
            units.append(self.embed_params)
        if shapes is None or any(shapes[g][2] for g in chunks):
            units.append(self.head_params)
        unit = max(units)
        buf = self._reduce_buffers.get(unit)
        if buf is None:
            buf = self._reduce_buffers[unit] = zero.reduce_buffer(self, unit)
        return buf

    def flops(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs with recomputation) of one step, whole job."""
        c, cfg = self.costs, self.cfg
        fwd = (
            cfg.num_layers * c.layer.flops + c.embed.flops + c.head.flops + dense.flops_delta(self)
        )
        factor = 1 + self.tparams.cost.backward_compute_ratio
        seqs = self.gb / self.par.microbatch_size
        model = factor * fwd * seqs
        return model, model + recompute.extra_flops_per_sequence(self) * seqs

    def comm_bytes(self, part: StagePartition, worst: int) -> tuple[tuple[str, float], ...]:
        """Bytes device ``worst`` sends per step, by kind (``COMM_KINDS``)."""
        par = self.par
        chunks = [k * par.pp + worst for k in range(par.virtual_stages)]
        params = sum(self.stage_params(part, g) for g in chunks)
        n = sum(part.layers(g) for g in chunks)
        return (
            ("tp", tp.comm_bytes(self, n)),
            ("pp", pp.comm_bytes(self)),
            ("dp", dp.comm_bytes(self, params)),
            ("zero", zero.comm_bytes(self, params)),
            ("ep", ep.comm_bytes(self, dense.moe_layers_in(self, part, chunks))),
            ("cp", cp.comm_bytes(self, n)),
        )


@functools.lru_cache(maxsize=64)
def _itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype`` (parsing the name took 6 us of each estimate)."""
    return DType.parse(dtype).itemsize


def exposed_s(comm_s: float, window_s: float, fraction: float, interference: float = 0.0) -> float:
    """Seconds of ``comm_s`` still on the critical path when ``fraction`` of it runs
    behind ``window_s`` seconds of compute: ``comm_s - min(fraction * comm_s, window_s)``,
    plus ``interference`` times the hidden part (the compute it hides behind runs that
    much slower: the communication kernels hold SMs and HBM bandwidth;
    ``TrainingParams.overlap_interference``).
    The one overlap model of the step: ZeRO gathers and gradient reductions here, the host
    offload's PCIe copies and weight streaming (`explorer.training.offload`).

    >>> exposed_s(3.0, 2.0, 1.0), exposed_s(3.0, 2.0, 0.5), exposed_s(3.0, 2.0, 0.0)
    (1.0, 1.5, 3.0)
    """
    hidden = min(fraction * comm_s, max(window_s, 0.0))
    return comm_s - hidden * (1.0 - interference)


#: a step's mesh and a table of its collectives' seconds, by (mesh axes, cluster object):
#: the ~1,000 configurations of a plan run on a few dozen meshes, and each built its own
#: (the cluster is kept in the entry, so its id names it while the entry lives)
_MESHES: Memo[tuple] = Memo("training.step_meshes", maxsize=1024)


def _shared_mesh(par: ParallelConfig, cluster: Cluster) -> tuple[Mesh, dict]:
    """The mesh of ``par`` on ``cluster`` (`mesh_axes`) and its table of collective
    seconds (kind, size, axes) -> s, shared by every configuration with that mesh; each
    entry a value of `_collective_s`, so the results are the same as without the table."""
    axes = tuple(mesh_axes(par, cluster).items())
    key = (axes, id(cluster))
    entry = _MESHES.peek(key)
    if entry is None or entry[0] is not cluster:
        entry = (cluster, Mesh(dict(axes), hardware=cluster), {})
        _MESHES.put(key, entry)
    return entry[1], entry[2]


@memoize(maxsize=100_000, name="training.collective_s")
def _collective_s(mesh: Mesh, kind: str, size: float, axes: tuple[str, ...]) -> float:
    """Seconds of a collective; keyed by the whole mesh (axes, links, cluster), which is
    everything `Mesh.collective_time` reads; dp across datacenters is hierarchical."""
    return dc_collective_time(mesh, kind, size, axes)


def _job_cluster(cluster: Cluster, p: TrainingParams) -> Cluster:
    """The cluster as the job sees it: with ``multi_rail_collectives`` its ring
    collectives spread over the NICs of their members on a node (`Cluster.
    multi_rail_rings`); with ``aligned_nvlink_domains`` it uses the largest power-of-two
    number of child groups of each level that holds another count (`_aligned_levels`)."""
    rails, aligned = p.multi_rail_collectives, p.aligned_nvlink_domains
    if rails == cluster.multi_rail_rings and not (aligned and cluster.link_levels):
        return cluster
    return _with_job_view(cluster, rails, aligned)


@functools.lru_cache(maxsize=256)
def _with_job_view(cluster: Cluster, rails: bool, aligned: bool) -> Cluster:
    changes: dict[str, object] = {"multi_rail_rings": rails}
    if aligned and cluster.link_levels:
        levels = _aligned_levels(cluster.link_levels)
        if levels != cluster.link_levels:
            changes["link_levels"] = levels
            changes["max_nodes"] = levels[-1].group_size // cluster.chips_per_node
    return dataclasses.replace(cluster, **changes)


def _aligned_levels(levels: tuple) -> tuple:
    """``levels`` with each group holding the largest power of two of its children's
    groups (a GB200 NVL72 rack: 16 of its 18 four-GPU trays, 64 GPUs; the levels above it
    keep their count of such groups), so that power-of-two parallel groups never straddle
    a level's group.

    >>> from explorer.hardware import load
    >>> [lv.group_size for lv in _aligned_levels(load("gb200-nvl72").link_levels)]
    [4, 64, 512]
    """
    out = []
    for i, lv in enumerate(levels):
        child = 1 if i == 0 else levels[i - 1].group_size
        new_child = 1 if i == 0 else out[-1].group_size
        count = lv.group_size // child
        kept = 1 << (count.bit_length() - 1)
        size = new_child * (kept if count != kept else count)
        note = f"{lv.source} | job view: {size} of the level's {lv.group_size} chips".strip(" |")
        out.append(
            lv if size == lv.group_size else dataclasses.replace(lv, group_size=size, source=note)
        )
    return tuple(out)


def _sized(cluster: Cluster, par: ParallelConfig) -> Cluster:
    """``cluster``, `Cluster.extended` when the configuration needs more devices than the
    profile holds (a profile's size is not a ceiling on a job)."""
    try:
        return cluster.extended(par.devices)
    except HardwareError as e:
        raise ParallelConfigError(f"{par} needs {par.devices} devices: {e}") from None


def _check_precision(p: TrainingParams, cluster: Cluster) -> None:
    """FP8 training needs a chip with an FP8 peak."""
    if p.precision == "fp8" and "fp8" not in cluster.chip.dtypes:
        raise TrainingParamsError(
            f"TrainingParams.precision='fp8' on {cluster.chip.name} ({cluster.name}), which "
            f"has no FP8 tensor cores (peaks for {', '.join(cluster.chip.dtypes)}); use "
            "precision='bf16' on this chip, or an FP8 chip (h100-sxm, h200, b200, ...)"
        )


def _validate(cfg: ModelConfig, par: ParallelConfig, cluster: Cluster, seq: int) -> None:
    check_layout(cfg, par, seq)  # the one check of a layout against a model (exports too)
