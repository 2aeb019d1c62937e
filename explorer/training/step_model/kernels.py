"""Kernel time by shape: how long each operator of a layer runs on one device.

The operator search (`stage_costs`) picks every op's tensor-parallel layout; this module
times the local kernels that layout leaves on a device, by kind:

=============  ===========================================================================
kind           time of one kernel (plus ``kernel_overhead_s`` each)
=============  ===========================================================================
gemm           tiles = batch x ceil(M / tile rows) x ceil(N / tile cols); waves =
               ceil(tiles / compute units); compute = waves x (2 x tile rows x tile cols
               x K) / (per-unit peak x ``matmul_efficiency_cap`` x tile reuse); the time is
               the larger of that and bytes / (HBM bandwidth x ``hbm_efficiency``) (a
               roofline), for the best of the chip's tiles. The backward runs the two
               gradient GEMMs (dA = dC B^T, dB = A^T dC), each with its own quantization.
attention      ``flash_attention``: the attention core (scores, scale, mask, softmax,
               dropout, context) is one fused kernel: its FLOPs (the masked blocks skipped
               when causal) at ``flash_attention_efficiency`` of peak, or its Q, K, V, O
               bytes over HBM, whichever is longer; the backward does
               ``flash_backward_flops_ratio`` x the FLOPs (it recomputes the scores).
memory         norms, softmax, elementwise, gathers, losses: bytes / (HBM bandwidth x
               ``hbm_efficiency``); the backward moves ``memory_bound_backward_ratio`` x
               the bytes.
view           reshape: no kernel.
=============  ===========================================================================

>>> import explorer as ex
>>> chip = ex.hardware.load("a100-80g").chip
>>> p = ex.training.TrainingParams()
>>> one, over = gemm_s(1, 256 * 12, 128 * 9, 4096, 2, chip, p), gemm_s(
...     1, 256 * 12, 128 * 9 + 1, 4096, 2, chip, p)
>>> over > one  # 108 tiles fill one wave on 108 SMs; one more column needs a second wave
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...hardware import Chip, Mesh
from ...ir import Graph, OpGroup
from ...ir.signature import parse
from ...memo import Memo
from ...search.plan import ShardingPlan
from ..params import TrainingParams
from .costs import OpShape, PartCost, StageCosts

__all__ = [
    "PartTimes",
    "op_shapes",
    "gemm_s",
    "memory_s",
    "attention_s",
    "flash_attention_s",
    "fused_attention",
    "matmul_cap",
    "attention_efficiency",
    "fp8_gemm_s",
    "fp8_gather_factor",
    "TP_GATHER_SHARE",
    "optimizer_step_s",
    "part_times",
    "timed_costs",
    "KERNEL_FIELDS",
]

# Movement ops that only reinterpret a buffer (a view): no kernel runs. The builders'
# grouped-query attention repeats key/value heads with an expand (a broadcast view).
_VIEWS = ("reshape", "transpose", "expand")


@dataclass(frozen=True)
class PartTimes:
    """Kernel seconds of one part for one microbatch on one device.

    Args:
        forward_s, backward_s: every kernel of the forward, of the backward.
        core_forward_s: the attention core's forward (what selective recomputation runs
            again; 0 with flash attention, whose backward already recomputes the scores).
        forward_kernels, backward_kernels: kernels launched (each pays
            ``kernel_overhead_s``).
    """

    forward_s: float
    backward_s: float
    core_forward_s: float
    forward_kernels: int
    backward_kernels: int


# The TrainingParams fields kernel times read (the memo key of `part_times`).
KERNEL_FIELDS = (
    "matmul_efficiency_cap", "tile_reuse_exponent", "hbm_efficiency", "kernel_overhead_s",
    "memory_bound_backward_ratio", "flash_attention", "flash_attention_efficiency",
    "flash_backward_flops_ratio", "flash_block_tokens", "precision", "fp8_cast_bytes_per_element",
    "fp8_matmul_efficiency_ratio", "fp8_scaling_matmul_ratio", "loss_forward_bytes_per_logit",
    "loss_backward_bytes_per_logit", "fp8_tp_gather", "tp_layout", "eager_norm_bytes_ratio",
    "eager_rope_bytes_ratio",
)  # fmt: skip


# --- shapes from the searched plan ---------------------------------------------------------
def op_shapes(
    graph: Graph, plan: ShardingPlan, mesh: Mesh, scope: str, skip: tuple[str, ...] = (),
    core: tuple[str, ...] = (),
) -> tuple[OpShape, ...]:  # fmt: skip
    """The local kernels of the ops under ``scope`` with the layouts ``plan`` chose.

    Args:
        skip: ops (by the last part of their name) a fused kernel absorbs.
        core: ops (by the last part of their name) that form the attention core.
    """
    out, fused_causal = [], False
    for node in graph.ops:
        if not node.scope.startswith(scope):
            continue
        short = node.name.split(".")[-1]
        if short in skip:
            # a causal mask fused into the scores' kernel leaves the core causal
            fused_causal = fused_causal or (node.op == "causal_mask" and short in core)
            continue
        s = plan.assignment[node.name]
        group = graph.group(node.name)
        in_types = graph.input_types(node.name)
        inputs = [graph.node(a) for a in node.inputs]
        common = dict(
            name=node.name, flops=float(s.local_flops), read_bytes=float(s.bytes_read),
            written_bytes=float(s.bytes_written), itemsize=node.type.dtype.itemsize,
            dtype=node.type.dtype.value, core=short in core, causal=node.op == "causal_mask",
        )  # fmt: skip
        ins, out_spec = parse(graph.signature(node.name))
        if group is OpGroup.CONTRACTION and len(ins) == 2:
            local = [
                lay.local_shape(t.shape, mesh)
                for lay, t in zip(s.in_layouts, in_types, strict=True)
            ]
            batch, m, n, k = _gemm_dims(ins, out_spec, local)
            grads = sum(1 for x in inputs if x.op != "input")
            out.append(OpShape(kind="gemm", batch=batch, m=m, n=n, k=k, grads=grads, **common))
        elif group is OpGroup.MOVEMENT and node.op in _VIEWS:
            out.append(OpShape(kind="view", **common))
        elif group is OpGroup.MOVEMENT and any(x.op == "param" for x in inputs):
            # a gather (embedding): it reads the rows it returns, not the whole table
            common["read_bytes"] = common["written_bytes"]
            out.append(OpShape(kind="memory", **common))
        else:
            out.append(OpShape(kind="memory", **common))
    if fused_causal:  # the scores GEMM (the core's first) carries the fused mask
        i = next((i for i, o in enumerate(out) if o.core and o.kind == "gemm"), None)
        if i is not None:
            out[i] = replace(out[i], causal=True)
    return tuple(out)


def _gemm_dims(ins: tuple[str, ...], out: str, local: list[tuple[int, ...]]):
    """(batch, M, N, K) of a two-input einsum from its letters and local input shapes."""
    a, b = ins
    size: dict[str, int] = {}
    for spec, shape in zip(ins, local, strict=True):
        for c, d in zip(spec, shape, strict=True):
            size[c] = d
    batch = math.prod(size[c] for c in out if c in a and c in b)
    m = math.prod(size[c] for c in out if c in a and c not in b)
    n = math.prod(size[c] for c in out if c in b and c not in a)
    k = math.prod(size[c] for c in a if c in b and c not in out)
    return batch, m, n, k


# --- one kernel ----------------------------------------------------------------------------
def _bandwidth(chip: Chip, p: TrainingParams) -> float:
    return chip.memory_bandwidth_bytes_per_s * p.hbm_efficiency


def memory_s(nbytes: float, chip: Chip, p: TrainingParams) -> float:
    """Seconds of one memory-bound kernel moving ``nbytes``: bytes over the achievable HBM
    bandwidth, plus the kernel overhead.

    >>> import explorer as ex
    >>> chip, p = ex.hardware.load("a100-80g").chip, ex.training.TrainingParams(kernel_overhead_s=0.0)
    >>> round(memory_s(2e9, chip, p) / memory_s(1e9, chip, p), 9)
    2.0
    """
    return nbytes / _bandwidth(chip, p) + p.kernel_overhead_s


def optimizer_step_s(params: float, chip: Chip, p: TrainingParams) -> float:
    """Seconds of the device's optimizer step over the ``params`` parameters it updates: a
    memory-bound pass of ``optimizer_step_bytes_per_param`` bytes each over HBM, at
    ``hbm_efficiency`` with the shape kernel model, else at the flat model's
    ``cost.bandwidth_efficiency``. `StepModel.tail` prices the step with it, and host
    offload (`explorer.training.offload`) the device step it removes.

    >>> import explorer as ex
    >>> chip, p = ex.hardware.load("a100-80g").chip, ex.training.TrainingParams()
    >>> round(optimizer_step_s(1e9, chip, p) * 1e3, 2)  # 28 GB at 0.8 x 2.039 TB/s
    17.17
    """
    hbm = p.hbm_efficiency if p.kernel_model == "shape" else p.cost.bandwidth_efficiency
    return params * p.optimizer_step_bytes_per_param / (chip.memory_bandwidth_bytes_per_s * hbm)


def gemm_s(
    batch: int, m: int, n: int, k: int, itemsize: int, chip: Chip, p: TrainingParams,
    dtype: str = "bf16",
) -> float:  # fmt: skip
    """Seconds of ``C[batch, m, n] = A[batch, m, k] B[batch, k, n]``: tile and wave
    quantization on the chip's compute units (the best of its tiles), capped by the HBM
    roofline, plus the kernel overhead. Without compute units or tiles (TPU, Ascend
    profiles) the compute time is the FLOPs at ``matmul_efficiency_cap`` of peak (None:
    the chip's ``matmul_efficiency``); an FP8 GEMM at that ceiling times
    ``fp8_matmul_efficiency_ratio`` and the scaling recipe's ``fp8_scaling_matmul_ratio``."""
    flops = 2.0 * batch * m * n * k
    if flops == 0:
        return 0.0
    rate = chip.peak_flops(dtype) * matmul_cap(chip, p)
    if dtype == "fp8":
        rate *= p.fp8_matmul_efficiency_ratio * p.fp8_scaling_matmul_ratio
    nbytes = itemsize * batch * (m * k + k * n + m * n)
    tiles, units = chip.matmul_tile_shapes, chip.compute_units
    if not tiles or not units:
        compute = flops / rate
    else:
        best_reuse = max(_reuse(t) for t in tiles)
        compute = math.inf
        for tm, tn in tiles:
            count = batch * math.ceil(m / tm) * math.ceil(n / tn)
            waves = math.ceil(count / units)
            # a smaller tile reuses each loaded operand less (tm tn / (tm + tn) FLOPs per
            # element loaded), so it runs below the largest tile's rate
            eff = (_reuse((tm, tn)) / best_reuse) ** p.tile_reuse_exponent
            compute = min(compute, waves * 2.0 * tm * tn * k / (rate / units * eff))
    return max(compute, nbytes / _bandwidth(chip, p)) + p.kernel_overhead_s


def matmul_cap(chip: Chip, p: TrainingParams) -> float:
    """The GEMM ceiling: ``p.matmul_efficiency_cap``, or the chip's ``matmul_efficiency``
    when the knob is None (the stacks' setting)."""
    cap = p.matmul_efficiency_cap
    return chip.matmul_efficiency if cap is None else cap


def attention_efficiency(chip: Chip, p: TrainingParams) -> float:
    """The fused attention kernel's fraction of peak: ``p.flash_attention_efficiency``, or
    the chip's ``attention_efficiency`` when the knob is None."""
    eff = p.flash_attention_efficiency
    return chip.attention_efficiency if eff is None else eff


def fp8_gemm_s(
    batch: int, m: int, n: int, k: int, chip: Chip, p: TrainingParams, cast_elements: float
) -> float:  # fmt: skip
    """Seconds of one FP8 GEMM (`gemm_s` at the chip's FP8 peak, one-byte operands) plus
    the cast of ``cast_elements`` BF16 elements to FP8 (``fp8_cast_bytes_per_element``
    each, over HBM: TransformerEngine and torchao scale and cast each GEMM input)."""
    cast = cast_elements * p.fp8_cast_bytes_per_element / _bandwidth(chip, p)
    return gemm_s(batch, m, n, k, 1, chip, p, "fp8") + cast


def _reuse(tile: tuple[int, int]) -> float:
    tm, tn = tile
    return tm * tn / (tm + tn)


def attention_s(
    flops: float, nbytes: float, seq: int, causal: bool, backward: bool, chip: Chip,
    p: TrainingParams, dtype: str = "bf16",
) -> float:  # fmt: skip
    """Seconds of the fused (flash) attention kernel of one device: ``flops`` are the
    unmasked scores and context FLOPs, ``nbytes`` the Q, K, V and O bytes. Causal: only
    the blocks on or below the diagonal run, ``(n_b + 1) / (2 n_b)`` of them for
    ``n_b = ceil(seq / flash_block_tokens)`` blocks per side."""
    if causal:
        nb = math.ceil(seq / p.flash_block_tokens)
        flops *= (nb + 1) / (2 * nb)
    if backward:
        flops *= p.flash_backward_flops_ratio
        nbytes *= p.memory_bound_backward_ratio
    compute = flops / (chip.peak_flops(dtype) * attention_efficiency(chip, p))
    return max(compute, nbytes / _bandwidth(chip, p)) + p.kernel_overhead_s


def fused_attention(ops: tuple[OpShape, ...], p: TrainingParams) -> bool:
    """Whether a part's attention core runs as one fused kernel (`flash_attention_s`):
    ``flash_attention`` on, the shape kernel model, and a core with its GEMMs."""
    shaped = p.kernel_model == "shape"
    return shaped and p.flash_attention and any(o.core and o.kind == "gemm" for o in ops)


def flash_attention_s(
    ops: tuple[OpShape, ...], backward: bool, chip: Chip, p: TrainingParams
) -> float:  # fmt: skip
    """Seconds of the fused attention kernel (`attention_s`) of a part's attention core
    (``ops``: the part's `OpShape` list, whose core ops the kernel replaces), forward or
    backward. `part_times` adds it to the part's time; the ring context-parallel exchange
    hides behind it (`terms.cp.attention_core_s`)."""
    flops, nbytes, seq, causal, dtype = _flash_shape(ops)
    return attention_s(flops, nbytes, seq, causal, backward, chip, p, dtype)


# --- a part --------------------------------------------------------------------------------
def part_times(
    ops: tuple[OpShape, ...], chip: Chip, p: TrainingParams, fp8: bool | None = None
) -> PartTimes:  # fmt: skip
    """Forward and backward kernel seconds of one part (`OpShape` list) for one
    microbatch, the attention core's forward, and the kernels launched. ``fp8`` (default:
    ``p.precision == "fp8"``): the part's GEMMs outside the attention core run in FP8
    (`fp8_gemm_s`); the embedding and the head are timed with ``fp8=False`` (FP8 training
    keeps the output layer in BF16)."""
    fwd = bwd = core_f = 0.0
    nf = nb = 0
    flash = fused_attention(ops, p)
    fp8 = p.precision == "fp8" if fp8 is None else fp8
    for o in ops:
        if o.kind == "view" or (flash and o.core):
            continue
        if o.kind == "gemm" and fp8 and not o.core:
            f = fp8_gemm_s(o.batch, o.m, o.n, o.k, chip, p, o.batch * o.m * o.k)
            b = 0.0
            if o.grads >= 1:  # dA = dC B^T: the output gradient dC cast once for both
                b += fp8_gemm_s(o.batch, o.m, o.k, o.n, chip, p, o.batch * o.m * o.n)
            if o.grads >= 2:  # dB = A^T dC: both inputs already cast
                b += fp8_gemm_s(o.batch, o.k, o.n, o.m, chip, p, 0.0)
            kb = o.grads
        elif o.kind == "gemm":
            f = gemm_s(o.batch, o.m, o.n, o.k, o.itemsize, chip, p, o.dtype)
            b = 0.0
            if o.grads >= 1:  # dA[m, k] = dC[m, n] B^T
                b += gemm_s(o.batch, o.m, o.k, o.n, o.itemsize, chip, p, o.dtype)
            if o.grads >= 2:  # dB[k, n] = A^T dC
                b += gemm_s(o.batch, o.k, o.n, o.m, o.itemsize, chip, p, o.dtype)
            kb = o.grads
        else:
            nbytes = (o.read_bytes + o.written_bytes) * _eager_ratio(o, p)
            f = memory_s(nbytes, chip, p)
            b = memory_s(nbytes * p.memory_bound_backward_ratio, chip, p)
            kb = 1
            if o.name.split(".")[-1] == _LOSS:
                f, b = _loss_s(o, f, b, chip, p)
        fwd, bwd, nf, nb = fwd + f, bwd + b, nf + 1, nb + kb
        if o.core:
            core_f += f
    if flash:
        fwd += flash_attention_s(ops, False, chip, p)
        bwd += flash_attention_s(ops, True, chip, p)
        nf, nb = nf + 1, nb + 1
    return PartTimes(fwd, bwd, core_f, nf, nb)


_LOSS = "token_loss"  # the builders' cross-entropy op (models/builders.py)


def _eager_ratio(o: OpShape, p: TrainingParams) -> float:
    """HBM bytes of memory op ``o`` over its fused pass: ``eager_norm_bytes_ratio`` for the
    builders' norms (``*norm``), ``eager_rope_bytes_ratio`` for their rotary embeddings
    (``*_rope``), 1 for the rest. The backward keeps its ``memory_bound_backward_ratio``
    of the forward's bytes (an assumption for the eager ops' autograd)."""
    short = o.name.split(".")[-1]
    if short.endswith("norm"):
        return p.eager_norm_bytes_ratio
    if short.endswith("_rope"):
        return p.eager_rope_bytes_ratio
    return 1.0


def _loss_s(o: OpShape, f: float, b: float, chip: Chip, p: TrainingParams) -> tuple[float, float]:
    """(forward, backward) seconds of the loss op ``o``: an unfused loss moves
    ``loss_forward_bytes_per_logit`` / ``loss_backward_bytes_per_logit`` bytes per logit
    over HBM (its FP32 passes, `stacks.UNFUSED_CE_BYTES`) for each BF16 logit it reads; 0
    keeps the fused op's ``f``, ``b``."""
    logits = o.read_bytes / 2  # BF16 logits (FP8 training keeps the head in BF16)
    if p.loss_forward_bytes_per_logit:
        f = memory_s(logits * p.loss_forward_bytes_per_logit, chip, p)
    if p.loss_backward_bytes_per_logit:
        b = memory_s(logits * p.loss_backward_bytes_per_logit, chip, p)
    return f, b


def _flash_shape(ops: tuple[OpShape, ...]) -> tuple[float, float, int, bool, str]:
    """(FLOPs, Q K V O bytes, query length, causal, dtype) of the attention core: the
    scores GEMM reads Q and K and writes the scores; the context GEMM reads the
    probabilities and V and writes O."""
    gemms = [o for o in ops if o.core and o.kind == "gemm"]
    scores, context = gemms[0], gemms[-1]
    flops = sum(o.flops for o in gemms)
    v_bytes = max(context.read_bytes - scores.written_bytes, 0.0)
    nbytes = scores.read_bytes + v_bytes + context.written_bytes
    causal = any(o.core and o.causal for o in ops)
    return flops, nbytes, scores.m, causal, scores.dtype


def timed_costs(costs: StageCosts, chip: Chip, p: TrainingParams) -> StageCosts:
    """``costs`` with each part's compute times (``forward_s``, ``backward_s``,
    ``recompute_selective_s``) from the kernel model; communication and sizes kept.
    ``p.kernel_model == "flat"`` returns ``costs`` unchanged (the operator search's flat
    fraction of peak). Memoized on the costs object (`stage_costs` serves the same one for
    the same search), the chip and the values of `KERNEL_FIELDS`."""
    if p.kernel_model == "flat":
        return costs
    knobs = tuple(getattr(p, f) for f in KERNEL_FIELDS)
    # Keyed by identity: each entry keeps its ``costs`` alive, so no other object can take
    # that id while the entry exists (hashing the kernel lists would cost more than timing
    # them). The entry holds the costs it was made from, checked on every hit.
    key = (id(costs), chip, knobs)
    held, out = _TIMED.get(key, lambda: (costs, _timed_all(costs, chip, p)))
    if held is not costs:  # pragma: no cover - unreachable while entries hold their costs
        return _timed_all(costs, chip, p)
    return out


#: The share of a Megatron-split layer's tensor-parallel volume that is all-gathers (with
#: sequence parallelism: an all-gather and a reduce-scatter of the same size around each of
#: attention and the MLP, forward and backward).
TP_GATHER_SHARE = 0.5


def fp8_gather_factor(p: TrainingParams) -> float:
    """The factor on a layer's tensor-parallel seconds when its all-gathers move FP8
    (``TrainingParams.fp8_tp_gather`` with FP8 training and Megatron's split): 1 byte in
    place of 2 for `TP_GATHER_SHARE` of the volume (3/4); 1 otherwise.

    >>> import explorer as ex
    >>> fp8_gather_factor(ex.stacks.params("torchtitan", precision="fp8"))
    0.75
    >>> fp8_gather_factor(ex.stacks.params("torchtitan"))
    1.0
    """
    if p.precision == "fp8" and p.fp8_tp_gather and p.tp_layout == "megatron":
        return 1.0 - TP_GATHER_SHARE / 2
    return 1.0


_TIMED: Memo[tuple] = Memo("training.timed_costs", maxsize=4096)
_PART_TIMES: Memo[tuple] = Memo("training.part_times", maxsize=4096)


def _timed_all(costs: StageCosts, chip: Chip, p: TrainingParams) -> StageCosts:
    layer = _timed(costs.layer, chip, p, p.precision == "fp8")
    g = fp8_gather_factor(p)  # FP8 tensor-parallel all-gathers (the head stays BF16)
    if g != 1.0:
        layer = replace(layer, tp_forward_s=layer.tp_forward_s * g,
                        tp_backward_s=layer.tp_backward_s * g)  # fmt: skip
    return replace(
        costs,
        layer=layer,
        embed=_timed(costs.embed, chip, p, False),
        head=_timed(costs.head, chip, p, False),
    )


def _timed(part: PartCost, chip: Chip, p: TrainingParams, fp8: bool) -> PartCost:
    # The kernels depend on the layouts alone: costs re-costed under other CostParams
    # (`stage_costs.decisions_fixed_at`) share them, and their times, by identity.
    ops, knobs = part.kernels, (*(getattr(p, f) for f in KERNEL_FIELDS), fp8)
    held, t = _PART_TIMES.get((id(ops), chip, knobs), lambda: (ops, part_times(ops, chip, p, fp8)))
    if held is not ops:  # pragma: no cover - unreachable while entries hold their kernels
        t = part_times(ops, chip, p, fp8)
    return replace(
        part, forward_s=t.forward_s, backward_s=t.backward_s,
        recompute_selective_s=t.core_forward_s,
    )  # fmt: skip
