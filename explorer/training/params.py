"""``TrainingParams``: every knob of the training-step model, with the helpers that keep each
float knob's unit, range and source beside it (`knob`, `check_knobs`, `knob_table`).

The vocabulary of the training area: the step model, the planner and the calibration all
read it, and it reads nothing of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from ..checks import is_int, is_number
from ..search.params import CostParams
from ..search.planner import METHODS, Method
from .errors import TrainingParamsError
from .memory import ActivationTerms, MemoryAllowances, StateBytes, check_nonnegative

__all__ = ["TrainingParams", "CALIBRATED_COST", "knob", "check_knobs", "knob_table"]


# --- the knobs (fields of TrainingParams) ---------------------------------------------------
def knob(
    default: float, unit: str, low: float, high: float, source: str, low_open: bool = False
) -> Any:
    """A float field of `TrainingParams`: its unit, its range ``[low, high]`` (``(low,
    high]`` with ``low_open``) and where its default comes from (a citation or the word
    "assumption"), kept in the field's metadata for `check_knobs`, `knob_table` and the
    calibration."""
    meta = {"unit": unit, "range": (low, high), "low_open": low_open, "source": source}
    return field(default=default, metadata=meta)


def check_knobs(owner: object) -> None:
    """Raise `TrainingParamsError` naming the first `knob` field of ``owner`` that is not
    a finite number in its range."""
    cls = type(owner).__name__
    for f in fields(owner):  # type: ignore[arg-type]
        if "range" not in f.metadata:
            continue
        v, (lo, hi), lo_open = getattr(owner, f.name), f.metadata["range"], f.metadata["low_open"]
        if not is_number(v, minimum=lo, maximum=hi, above=lo if lo_open else None, numpy=True):
            where = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            raise TrainingParamsError(
                f"{cls}.{f.name}={v!r}; expected a finite number in {where} "
                f"({f.metadata['unit']}); default {f.default!r}"
            )


def knob_table(owner: object) -> str:
    """The `knob` fields of ``owner`` as text: name, value, unit, range, source.

    >>> import explorer as ex
    >>> print(knob_table(ex.training.TrainingParams()).splitlines()[0])
    field | value | unit | range | source
    """
    rows = ["field | value | unit | range | source"]
    for f in fields(owner):  # type: ignore[arg-type]
        if "range" in f.metadata:
            lo, hi = f.metadata["range"]
            rows.append(
                f"{f.name} | {getattr(owner, f.name)!r} | {f.metadata['unit']} | "
                f"{lo:g}..{hi:g} | {f.metadata['source']}"
            )
    return "\n".join(rows)


# The operator search's costs in the training model: 65% of peak for contractions and 80%
# of link and HBM bandwidth. With ``kernel_model="shape"`` (the default) they choose each
# op's layout and price collectives (bandwidth_efficiency); compute times come from
# `kernels` (matmul_efficiency_cap 0.65 on full waves of tiles, hbm_efficiency 0.8), set
# once so that the ten rows of Narayanan et al. 2021, Table 1 stay within 5% (worst row
# 4.7%; bench/training.py prints the table). ``kernel_model="flat"`` times compute with
# compute_efficiency alone (worst row 5.1%).
CALIBRATED_COST = CostParams(compute_efficiency=0.65, bandwidth_efficiency=0.8)


@dataclass(frozen=True)
class TrainingParams:
    """Every knob of the training-step model besides the per-operator `CostParams`.

    Args:
        cost: the cost model of the operator search and of collectives
            (``compute_efficiency``, ``bandwidth_efficiency``, ``grad_comm_overlap``, and
            ``device_memory_cap_bytes``: the memory a device may use, None = the chip's);
            default `CALIBRATED_COST`.
        state: bytes per parameter of weights, gradients, optimizer states.
        activations: Korthikanti et al.'s activation coefficients (a GPT layer's), scaled
            to the model's layer (`memory.layer_terms`) unless ``per_architecture=False``.
        allowances: runtime context, communication buffers, fragmentation.
        optimizer_step_bytes_per_param: HBM traffic of one Adam update per parameter:
            read and write fp32 master, momentum and variance (24 B) and the 16-bit
            gradient and weight (4 B).
        p2p_scatter_gather: send 1/t of a stage's output between nodes and all-gather it
            inside (Narayanan et al. 2021, section 4.1).
        zero3_prefetch_layers: layers of full weights a ZeRO-3 device holds at once (the
            layer running and the one prefetched, as DeepSpeed does).
        zero3_recompute_regather: ZeRO-3 gathers a fully recomputed layer's weights a third
            time, for the recomputed forward (DeepSpeed: the checkpointed forward runs the
            module's pre-forward hooks again, which fetch the partitioned parameters;
            PyTorch FSDP likewise re-gathers under activation checkpointing).
        search_method: the operator-strategy search used for per-layer costs.
        fused_ops: layer ops whose cost a fused kernel absorbs (Megatron-LM's
            FusedScaleMaskSoftmax: scale and mask; bias_gelu: the fc1 bias; bias-dropout-
            add: the o and fc2 biases); ``()`` costs every op as its own kernel.
        kernel_model: ``shape`` times each layer's kernels by their local shapes
            (`explorer.training.step_model.kernels`: tile and wave quantization, rooflines, overheads);
            ``flat`` keeps the operator search's one fraction of peak
            (``cost.compute_efficiency``) for every op.
        flash_attention: the attention core runs as one fused kernel (FlashAttention);
            False: scores, softmax and context are separate kernels (Megatron-LM 2021).
            A layer then keeps no s x s scores (``recompute="none"`` needs the memory of
            ``"selective"``) and selective recomputation adds no time.
        cp_kv_regather: with context parallelism's all-gather exchange, a layer keeps only
            its own ``s / cp`` positions of K and V for the backward and all-gathers them
            again there (TransformerEngine's ``AttnFuncWithCPAndKVAllGather``, written
            after Llama 3 section 3.3.2, saves the local K, V and re-gathers in its
            backward): no gathered K, V held between forward and backward, one more
            all-gather per layer and microbatch. False (default, an assumption: Llama 3
            does not say): the gathered K, V are kept for the backward, as autograd keeps a
            plain all-gather's output that the attention reads.

    The float knobs below carry their unit, range and source in the field's metadata
    (`kernels.knob_table(params)` prints them; ``TrainingParamsError`` names a bad one):

    ============================  =========  ===============================================
    field                         unit       meaning
    ============================  =========  ===============================================
    matmul_efficiency_cap         fraction   of peak FLOP/s a full wave of GEMM tiles runs at
    tile_reuse_exponent           1          smaller tiles run at (reuse/best reuse)^this
    hbm_efficiency                fraction   of HBM bandwidth memory-bound kernels reach
    kernel_overhead_s             s          fixed time per kernel launched
    microbatch_overhead_s         s          fixed time per forward or backward of a stage
    memory_bound_backward_ratio   1          backward bytes / forward bytes, memory-bound ops
    flash_attention_efficiency    fraction   of peak the fused attention kernel runs at
    flash_backward_flops_ratio    1          fused attention backward FLOPs / forward
    flash_block_tokens            tokens     fused attention block (causal skip granularity)
    grad_overlap_fraction         fraction   of gradient reduction hidden behind backward
    zero3_max_live_params         params     ZeRO-3 gathered weights held at most at once
    zero_gather_overlap_fraction  fraction   of ZeRO-3 weight gathers hidden behind compute
    zero_grad_overlap_fraction    fraction   of ZeRO-2/3 per-microbatch reduce-scatters hidden
    zero_bandwidth_efficiency     fraction   of link bandwidth ZeRO-3's gathers/reduce-scatters reach
    zero3_collectives_per_tensor  1          ZeRO-3 collectives per gathered weight tensor
    zero3_persistence_threshold   elements   ZeRO-3 keeps smaller tensors whole on every device
    zero_reduce_bucket_params     params     ZeRO-2/3 unsharded gradients held until reduced
    ============================  =========  ===============================================
    """

    cost: CostParams = field(default_factory=lambda: CALIBRATED_COST)
    state: StateBytes = field(default_factory=StateBytes)
    activations: ActivationTerms = field(default_factory=ActivationTerms)
    allowances: MemoryAllowances = field(default_factory=MemoryAllowances)
    optimizer_step_bytes_per_param: float = 28.0
    p2p_scatter_gather: bool = True
    zero3_prefetch_layers: int = 2
    zero3_recompute_regather: bool = True
    search_method: Method = "dynamic_programming"
    fused_ops: tuple[str, ...] = ("scale", "mask", "fc1_bias", "o_bias", "fc2_bias")
    kernel_model: Literal["shape", "flat"] = "shape"
    flash_attention: bool = False
    cp_kv_regather: bool = False
    matmul_efficiency_cap: float = knob(
        0.65, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True,
        source="assumption, set once so that Narayanan et al. 2021 Table 1 stays within 5% "
        "(bench/training.py)")  # fmt: skip
    tile_reuse_exponent: float = knob(
        0.5, "dimensionless", 0.0, 4.0,
        source="assumption; smaller cuBLAS tiles are less efficient (NVIDIA Matrix "
        "Multiplication Background User's Guide, section 2.3)")  # fmt: skip
    hbm_efficiency: float = knob(
        0.8, "fraction of HBM bandwidth", 0.0, 1.0, low_open=True,
        source="assumption (the earlier CostParams.bandwidth_efficiency default)")  # fmt: skip
    kernel_overhead_s: float = knob(
        2e-6, "seconds per kernel", 0.0, 1e-3,
        source="assumption: the gap between dependent kernels on one CUDA stream")  # fmt: skip
    microbatch_overhead_s: float = knob(
        0.0, "seconds per stage forward or backward", 0.0, 10.0,
        source="assumption (0: framework time per microbatch not modelled until fitted)")  # fmt: skip
    memory_bound_backward_ratio: float = knob(
        2.0, "backward bytes / forward bytes", 0.0, 10.0,
        source="assumption (CostParams.backward_compute_ratio's default)")  # fmt: skip
    flash_attention_efficiency: float = knob(
        0.6, "fraction of peak FLOP/s", 0.0, 1.0, low_open=True,
        source="Dao 2023, FlashAttention-2: 50-73% of A100 peak (assumption within it)")  # fmt: skip
    flash_backward_flops_ratio: float = knob(
        2.5, "backward FLOPs / forward FLOPs", 0.0, 10.0,
        source="Dao 2023, FlashAttention-2: 5 matmuls backward (scores recomputed) to 2 "
        "forward")  # fmt: skip
    flash_block_tokens: float = knob(
        128.0, "tokens", 1.0, 65536.0,
        source="Dao 2023, FlashAttention-2, section 3.3: blocks of 64-128 tokens")  # fmt: skip
    grad_overlap_fraction: float = knob(
        0.0, "fraction of the gradient reduction", 0.0, 1.0,
        source="assumption: Megatron-LM 2021 reduces gradients after the last backward")  # fmt: skip
    zero3_max_live_params: float = knob(
        1e9, "parameters", 1.0, 1e13,
        source="DeepSpeed's default stage3_max_live_parameters (1e9; DeepSpeed ZeRO "
        "configuration docs, Rajbhandari et al. 2021)")  # fmt: skip
    zero_gather_overlap_fraction: float = knob(
        0.65, "fraction of ZeRO-3 gathers", 0.0, 1.0,
        source="fitted (one value for both ZeRO overlaps, rounded to 0.05; jointly with "
        "zero_bandwidth_efficiency: 0.658) on the fit rows "
        "of Narayanan et al. 2021 Table 2's ZeRO-3 runs (gpt3-175b on 384 and 1536 GPUs, "
        "529.6b on 2240; published.FIT_ROWS, bench/accuracy.py fit_dataset_facts); "
        "DeepSpeed prefetches the next layer's parameters behind compute")  # fmt: skip
    zero_grad_overlap_fraction: float = knob(
        0.65, "fraction of ZeRO-2/3 gradient reduce-scatters", 0.0, 1.0,
        source="fitted with zero_gather_overlap_fraction (same value, same rows of "
        "Narayanan et al. 2021 Table 2); "
        "DeepSpeed's overlap_comm runs each microbatch's gradient reduce-scatter behind "
        "the backward")  # fmt: skip
    zero_bandwidth_efficiency: float = knob(
        1.0, "fraction of link bandwidth", 0.0, 1.0, low_open=True,
        source="fitted with zero_gather_overlap_fraction on the fit rows of Narayanan et al. "
        "2021 Table 2's ZeRO-3 runs (bench/accuracy.py fit_dataset_facts): least squares "
        "stops at the bound 1.0 (line rate). Those runs move the whole weights four times "
        "a step (three gathers, one reduce-scatter): 529.6B on 2240 GPUs in 183.7 s needs "
        "at least 0.92 of the 25 GB/s NIC; CostParams.bandwidth_efficiency's 0.8 is an "
        "assumption set with Table 1's tensor- and pipeline-parallel runs")  # fmt: skip
    zero3_collectives_per_tensor: float = knob(
        1.0, "collectives per gathered weight tensor per gather or reduce-scatter", 0.0, 100.0,
        source="DeepSpeed ZeRO-3 fetches a module's partitioned parameters tensor by tensor "
        "(deepspeed/runtime/zero/partition_parameters.py, Init._all_gather: with async_op, "
        "the prefetching path, one _allgather_param per parameter); assumption: the "
        "gradients' reduce-scatters as many; each pays a ring's latency "
        "(terms/zero.ring_latency_s). The tensors a layer gathers are counted from its "
        "architecture (terms/zero.gathered_tensors): a Megatron-LM GPT layer 4")  # fmt: skip
    zero3_persistence_threshold: float = knob(
        1e5, "elements", 0.0, 1e15,
        source="DeepSpeed's default stage3_param_persistence_threshold (1e5; DeepSpeed ZeRO "
        "configuration docs): smaller tensors (biases, norms, routers) stay whole on every "
        "device and are never gathered")  # fmt: skip
    zero_reduce_bucket_params: float = knob(
        5e8, "parameters", 1.0, 1e13,
        source="DeepSpeed's default reduce_bucket_size (5e8 elements; DeepSpeed ZeRO "
        "configuration docs); PyTorch FSDP reduce-scatters one wrapped module (a layer) at a "
        "time: a ZeRO-2/3 device holds min(layer, bucket) unsharded gradients "
        "(memory.reduce_buffer_bytes)")  # fmt: skip

    def __post_init__(self) -> None:
        kinds = (
            ("cost", CostParams),
            ("state", StateBytes),
            ("activations", ActivationTerms),
            ("allowances", MemoryAllowances),
        )
        for name, kind in kinds:
            if not isinstance(getattr(self, name), kind):
                raise TrainingParamsError(
                    f"TrainingParams.{name}={getattr(self, name)!r}; expected a {kind.__name__}"
                )
        check_nonnegative(self, ("optimizer_step_bytes_per_param",))
        check_knobs(self)
        if self.kernel_model not in ("shape", "flat"):
            raise TrainingParamsError(
                f"TrainingParams.kernel_model={self.kernel_model!r}; expected 'shape' "
                "(kernel time by shape) or 'flat' (one fraction of peak)"
            )
        for name in ("flash_attention", "p2p_scatter_gather", "cp_kv_regather"):
            if not isinstance(getattr(self, name), bool):
                raise TrainingParamsError(
                    f"TrainingParams.{name}={getattr(self, name)!r}; expected True or False"
                )
        k = self.zero3_prefetch_layers
        if not is_int(k, minimum=1):
            raise TrainingParamsError(
                f"TrainingParams.zero3_prefetch_layers={k!r}; expected an int >= 1 (the layer "
                "running is always held)"
            )
        if self.search_method not in METHODS:
            raise TrainingParamsError(
                f"TrainingParams.search_method={self.search_method!r}; expected one of "
                f"{', '.join(METHODS)}"
            )
        if not isinstance(self.fused_ops, tuple) or not all(
            isinstance(x, str) for x in self.fused_ops
        ):
            raise TrainingParamsError(
                f"TrainingParams.fused_ops={self.fused_ops!r}; expected a tuple of op names "
                "such as ('scale', 'mask')"
            )

    def replace(self, **changes) -> TrainingParams:
        return replace(self, **changes)
