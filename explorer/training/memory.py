"""Memory per device of a training step: model states, activations and named allowances.

Model states follow mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", section 3.1):
2 bytes of 16-bit weights, 2 of 16-bit gradients and 12 of fp32 optimizer state (master
weights, momentum, variance) per parameter; what ZeRO divides over the data-parallel group
is ``step_model/terms/zero.py`` (`model_state_bytes`).

Activations per transformer layer and microbatch follow Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", equations (1)-(5), in bytes for
sequence s, microbatch b, hidden h, heads a, tensor parallel t:

======================== ==================================
no parallelism           ``sbh (34 + 5as/h)``
tensor parallel          ``sbh (10 + 24/t + 5as/(ht))``
tensor + sequence par.   ``sbh (34/t + 5as/(ht))``
selective recompute      the ``5as/(ht)`` term dropped
full recompute           ``2sbh`` (``2sbh/t`` with sequence parallelism)
======================== ==================================

Context parallelism over ``c`` devices (Llama 3, section 3.3.2) keeps ``s/c`` positions of
every activation, so ``s`` becomes ``s/c`` in each term except the attention scores' key
length: a device's scores are ``(s/c) x s`` per head, ``(sbh/c) 5as/(ht)``. With the
all-gather exchange a layer also keeps the other ranks' keys and values for its backward:
``kv_bytes * b (s - s/c) h_kv / t`` (``h_kv``: key/value channels, GQA's kv heads x head size;
none under full recompute, where the layer's forward runs again; none with the ring exchange,
which passes the chunks around again in the backward; none when they are all-gathered again
in the backward, ``TrainingParams.cp_kv_regather``).

Korthikanti's constants are those of a GPT layer (LayerNorm, dropout, multi-head attention, a
4h GELU MLP). `layer_terms` counts a layer of another architecture by the same rule and
scales the constants by the ratio (see its docstring for the derivation); a LLaMA-style
layer (RMSNorm, no dropout, grouped-query attention, SwiGLU) keeps ``8`` replicated bytes
(not 10) and ``4 + 4 h_kv/h + 6 I/h`` split ones (not 24), and its attention core ``2``
(not 5).

The rows of `MemoryBreakdown` and where each comes from: parameters, gradients and
optimizer states by ZeRO stage (`step_model/terms/zero.py`; Llama 3's FSDP, which shards gradients and
optimizer states but keeps weights whole after the forward, is ZeRO-2); activations as above
times the schedule's peak microbatches in flight (`pipeline.schedule.peak_in_flight`:
Narayanan et al. 2021's interleaved warm-up ``(p - d - 1) 2 + (v - 1) p`` plus one, equal to
PyTorch's ``ScheduleInterleaved1F1B``'s, tests/training/test_cp_llama3.py); the recompute working set and ZeRO-3's gather
buffer; ``zero_reduce_buffer``, the whole gradients of one reduce unit (`reduce_buffer_bytes`);
and the three `MemoryAllowances`, which are assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache

from ..checks import is_number
from ..models import ModelConfig
from .errors import TrainingParamsError

__all__ = [
    "ActivationTerms",
    "StateBytes",
    "MemoryAllowances",
    "MemoryBreakdown",
    "activation_bytes_per_layer",
    "layer_terms",
    "inner_bytes_per_token",
    "reduce_buffer_bytes",
]

_GIB = 2**30


def check_nonnegative(owner: object, names: tuple[str, ...] | None = None) -> None:
    """Raise `TrainingParamsError` unless each numeric field of the dataclass ``owner``
    (or those in ``names``) is a finite real number >= 0."""
    cls = type(owner).__name__
    for f in fields(owner):  # type: ignore[arg-type]
        if (names is None and f.type in ("float", "int")) or (names and f.name in names):
            v = getattr(owner, f.name)
            if not is_number(v, minimum=0, numpy=True):
                raise TrainingParamsError(
                    f"{cls}.{f.name}={v!r}; expected a finite number >= 0 (bytes, counts "
                    "and fractions of the training model cannot be negative, inf or nan)"
                )


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states (mixed-precision Adam).

    Source: Rajbhandari et al. 2020 (ZeRO), section 3.1: 2 + 2 + 12 = 16 bytes.
    """

    weight_bytes: float = 2.0
    gradient_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    source: str = "Rajbhandari et al. 2020 (ZeRO) section 3.1, mixed-precision Adam"

    def __post_init__(self) -> None:
        check_nonnegative(self)


@dataclass(frozen=True)
class ActivationTerms:
    """The coefficients of Korthikanti et al. 2022's activation formulas (bytes per s*b*h).

    Per layer: ``replicated_bytes`` are kept whole by tensor parallelism (norm inputs,
    dropout masks), ``split_bytes`` are split by it (QKV, MLP activations), and
    ``attention_bytes`` * a*s/h are the attention scores, softmax and its dropout mask;
    full recompute keeps ``checkpoint_bytes`` (the layer input in 16 bits). The first stage
    keeps ``embedding_dropout_bytes`` per microbatch in flight; the last stage keeps
    ``head_bytes`` * (1 + V/h) / t for one microbatch (final norm, logits, fp32 loss),
    section 4.3 of the paper. With context parallelism (all-gather exchange) a layer keeps
    ``gathered_kv_bytes`` per position and key/value channel of the other ranks' K and V.

    The values are a GPT layer's; with ``per_architecture`` (default) the step model
    scales the per-layer ones to the model's own layer (`layer_terms`): set it False to
    apply these constants to every architecture unchanged.
    """

    replicated_bytes: float = 10.0
    split_bytes: float = 24.0
    attention_bytes: float = 5.0
    checkpoint_bytes: float = 2.0
    embedding_dropout_bytes: float = 1.0
    head_bytes: float = 4.0
    gathered_kv_bytes: float = 4.0
    per_architecture: bool = True
    source: str = (
        "Korthikanti et al. 2022, eqs. (1)-(5) and section 4.3; gathered_kv_bytes: K and V "
        "in 16 bits (2 + 2 bytes per position and kv channel), Llama 3 all-gather CP"
    )

    def __post_init__(self) -> None:
        check_nonnegative(self)
        if not isinstance(self.per_architecture, bool):
            raise TrainingParamsError(
                f"ActivationTerms.per_architecture={self.per_architecture!r}; expected True "
                "(scale the GPT constants to the model's layer) or False (use them as given)"
            )


@dataclass(frozen=True)
class MemoryAllowances:
    """What activation and state estimators leave out, each its own row of the breakdown.

    These are modelling assumptions, not measurements; set them to what your runtime shows
    (e.g. ``torch.cuda.memory_reserved()`` of an empty job, NCCL's ``NCCL_BUFFSIZE``).

    Args:
        runtime_context_bytes: CUDA/CANN context, cuBLAS workspaces, framework runtime.
        communication_buffer_bytes: collective-library buffers (NCCL/HCCL channels).
        fragmentation_fraction: the caching allocator's fragmentation, a fraction of the
            bytes it holds: model states, activations, working sets and gather buffers.
            Not of the two rows above: the CUDA context is the driver's, and NCCL allocates
            its channel buffers itself (``cudaMalloc``/``cuMem``), outside PyTorch's caching
            allocator (whose ``torch.cuda.memory_reserved()`` counts neither).
    """

    runtime_context_bytes: float = 1.0 * _GIB
    communication_buffer_bytes: float = 0.5 * _GIB
    fragmentation_fraction: float = 0.05
    source: str = "assumptions: typical CUDA context ~1 GiB, NCCL buffers ~0.5 GiB, 5% slack"

    def __post_init__(self) -> None:
        check_nonnegative(self)
        if not self.fragmentation_fraction < 1:
            raise TrainingParamsError(
                f"MemoryAllowances.fragmentation_fraction={self.fragmentation_fraction}; "
                "expected 0 <= value < 1"
            )


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device, one row per kind; ``total`` is their sum.

    >>> m = MemoryBreakdown(parameters=2e9, gradients=2e9, optimizer_states=12e9)
    >>> m.total / 1e9
    16.0
    """

    parameters: float = 0.0
    gradients: float = 0.0
    optimizer_states: float = 0.0
    activations: float = 0.0
    recompute_working_set: float = 0.0
    zero_gather_buffer: float = 0.0
    zero_reduce_buffer: float = 0.0
    runtime_context: float = 0.0
    communication_buffers: float = 0.0
    fragmentation: float = 0.0
    stage: int = 0

    ROWS = (
        "parameters", "gradients", "optimizer_states", "activations", "recompute_working_set",
        "zero_gather_buffer", "zero_reduce_buffer", "runtime_context", "communication_buffers",
        "fragmentation",
    )  # fmt: skip

    @cached_property  # frozen: summed once (the planner asks ~100 000 times per plan)
    def total(self) -> float:
        # the rows in ROWS order, added one by one as sum() over them adds them (0 + the
        # first is the first): the same bits, without a generator and ten getattr calls
        return (
            0 + self.parameters + self.gradients + self.optimizer_states + self.activations
            + self.recompute_working_set + self.zero_gather_buffer + self.zero_reduce_buffer
            + self.runtime_context + self.communication_buffers + self.fragmentation
        )  # fmt: skip

    def rows(self) -> tuple[tuple[str, float], ...]:
        return tuple((r, float(getattr(self, r))) for r in self.ROWS)

    def as_dict(self) -> dict[str, float]:
        return {**dict(self.rows()), "total": self.total, "stage": self.stage}

    def table(self, cap_bytes: float | None = None) -> str:
        """One line per row in GiB, with the total (and the cap when given)."""
        lines = [f"  {r:24s} {v / _GIB:9.2f} GiB" for r, v in self.rows()]
        tail = f"  {'total':24s} {self.total / _GIB:9.2f} GiB"
        if cap_bytes is not None:
            tail += f"  of {cap_bytes / _GIB:.2f} GiB"
        return "\n".join([f"memory per device (stage {self.stage}):", *lines, tail])

    def __str__(self) -> str:
        return f"{self.total / _GIB:.2f} GiB per device (stage {self.stage})"


def activation_bytes_per_layer(
    seq: int, microbatch: int, hidden: int, heads: int, tp: int = 1, sp: bool = False,
    recompute: str = "none", terms: ActivationTerms = ActivationTerms(),
    cp: int = 1, kv_hidden: float | None = None, kv_exchange: str = "all_gather",
    kv_kept: bool = True,
) -> float:  # fmt: skip
    """Activation bytes one transformer layer keeps for one microbatch until its backward,
    on one device.

    Korthikanti et al. 2022 (see the module docstring); ``recompute`` is ``none``,
    ``selective`` or ``full``. ``seq`` is the whole sequence; with context parallelism
    ``cp`` a device keeps ``seq / cp`` positions, and the all-gather exchange
    (``kv_exchange``) keeps the gathered keys and values of ``kv_hidden`` channels
    (default ``hidden``: no grouped-query attention) unless ``kv_kept`` is False (they are
    all-gathered again in the backward, ``TrainingParams.cp_kv_regather``).

    >>> s, b, h, a = 2048, 1, 12288, 96
    >>> activation_bytes_per_layer(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)
    True
    >>> activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * s * b * h
    True
    >>> no_cp = activation_bytes_per_layer(s, b, h, a, recompute="full")
    >>> activation_bytes_per_layer(s, b, h, a, recompute="full", cp=4) == no_cp / 4
    True
    """
    local = seq / cp  # positions this device holds
    sbh = local * microbatch * hidden
    if recompute == "full":
        return sbh * terms.checkpoint_bytes / (tp if sp else 1)
    attention = 0.0 if recompute == "selective" else terms.attention_bytes * heads * seq / hidden
    if sp:
        per = (terms.replicated_bytes + terms.split_bytes) / tp
    else:
        per = terms.replicated_bytes + terms.split_bytes / tp
    gathered = 0.0
    if cp > 1 and kv_exchange == "all_gather" and kv_kept:
        kv = hidden if kv_hidden is None else kv_hidden
        gathered = terms.gathered_kv_bytes * microbatch * (seq - local) * kv / tp
    return sbh * (per + attention / tp) + gathered


def reduce_buffer_bytes(
    unit_params: float, bucket_params: float, gradient_bytes: float, zero: int, replicas: int
) -> float:
    """Bytes of unsharded gradients a ZeRO-2/3 device holds until their reduce-scatter.

    ZeRO-2 and 3 keep only a ``1/replicas`` shard of the gradients (`StateBytes`), but the
    backward produces each gradient whole on every device: it lives until the reduce-scatter
    that shards it. PyTorch FSDP reduce-scatters one wrapped module (``unit_params``: a
    transformer layer, the usual wrapping) at a time; DeepSpeed fills a bucket of
    ``reduce_bucket_size`` elements (``bucket_params``, default 5e8, DeepSpeed's ZeRO
    configuration docs). The smaller of the two, at ``gradient_bytes`` each: a lower bound
    (one unit; an overlapped reduce-scatter of the previous unit may still hold its own,
    and DeepSpeed's ``overlap_comm`` keeps several buckets). None without sharded
    gradients (ZeRO 0/1 count the whole gradient buffer) or without a second replica.

    >>> reduce_buffer_bytes(4e8, 5e8, 2.0, zero=2, replicas=64)
    800000000.0
    >>> reduce_buffer_bytes(2e9, 5e8, 2.0, 3, 8), reduce_buffer_bytes(4e8, 5e8, 2.0, 1, 8)
    (1000000000.0, 0.0)
    """
    if zero < 2 or replicas == 1:
        return 0.0
    return min(unit_params, bucket_params) * gradient_bytes


# Korthikanti et al.'s counts for a GPT layer, bytes per token over h (the paper's section 4.1).
GPT_REPLICATED, GPT_SPLIT, GPT_ATTENTION = 10.0, 24.0, 5.0


def layer_counts(cfg: ModelConfig, gemm_input_bytes: float = 2.0) -> tuple[float, float, float]:
    """(replicated, split, attention-core) activation bytes of one layer of ``cfg``, per
    token over ``h`` (the last per token, head and key position over ``h``), counted as
    Korthikanti et al. 2022 count a GPT layer: what autograd keeps for the backward, every
    GEMM's input and every norm's and nonlinearity's input in 16 bits, dropout masks in one
    byte per element.

    Replicated (kept whole by tensor parallelism, ``h`` wide): the two norms' inputs
    (``2 + 2``), the inputs of the QKV and of the MLP's first GEMMs (the norms' outputs,
    ``2 + 2``) and, when ``cfg.dropout > 0``, the masks of the dropouts after the attention
    and the MLP (``1 + 1``): 10 for GPT, 8 without dropout. LayerNorm and RMSNorm both keep
    their input; their per-token fp32 statistics (``8/h`` and ``4/h``) are not counted, as in
    the paper, so the norm kind does not change the count.

    Split (divided by tensor parallelism), with ``n`` query heads, ``n_kv`` key/value heads
    of size ``d`` and MLP inner size ``f``: the rotated queries and keys and the values the
    attention reads (``2 n d + 2 n_kv d + 2 n_kv d``), the output projection's input
    (``2 n d``), q/k norms' inputs when ``cfg.qk_norm`` (``2 n d + 2 n_kv d``); the MLP:
    a GELU/ReLU MLP keeps the first GEMM's output (the nonlinearity's input) and the second
    GEMM's input (``4 f``), a SwiGLU MLP the gate and up outputs (the fused SwiGLU's input)
    and their product (the down GEMM's input, ``6 f``; eager PyTorch, which also keeps
    ``silu(gate)``, keeps ``8 f``). GPT (``n d = n_kv d = h``, ``f = 4h``): 24. Llama 3 405B
    (h 16384, 8 of 128 heads for K/V, f 53248): ``4 + 0.25 + 19.5 = 23.75``.

    Attention core (per ``a s / h``, ``a`` query heads): the softmax output (``2``, read by
    its own backward and by the product with V) and, with dropout, its mask and output
    (``1 + 2``): 5 for GPT, 2 without dropout (a fused attention keeps none of it).

    An ``mlp`` model's block (``act(x W1) W2``, no norm, attention or dropout) keeps
    ``(2, 4 f/h, 0)``.

    ``gemm_input_bytes=1`` counts FP8 training whose GEMMs keep the FP8 copies of their
    inputs (TransformerEngine, ``TrainingParams.fp8_saved_inputs``): the QKV and first MLP
    GEMMs' inputs ``1 + 1`` (replicated), the down projection's input ``f`` not ``2 f``,
    and the output projection's FP8 input ``n d`` beside the BF16 ``O`` the fused
    attention keeps for its own backward. Llama 3 405B: ``(6, 21.5, 2)``.

    >>> from explorer.models import load
    >>> layer_counts(load("gpt3-175b").replace(dropout=0.1))
    (10.0, 24.0, 5.0)
    >>> layer_counts(load("llama3-405b"))
    (8.0, 23.75, 2.0)
    >>> layer_counts(load("llama3-405b"), gemm_input_bytes=1.0)
    (6.0, 21.5, 2.0)
    """
    h, drop = cfg.hidden_size, cfg.dropout > 0
    if cfg.arch == "mlp":  # act(x @ w1) @ w2 blocks: fc1's input; act's and fc2's inputs
        return 2.0, 4.0 * cfg.ffn / h, 0.0
    g = gemm_input_bytes
    replicated = 4.0 + 2.0 * g + (2.0 if drop else 0.0)
    attention = 2.0 + (3.0 if drop else 0.0)
    split = inner_bytes_per_token(cfg) / h
    if g != 2.0 and not (cfg.is_moe or cfg.is_mla):  # FP8 copies of proj's and fc2's inputs
        split += (g * cfg.num_heads * cfg.dim_head - (2.0 - g) * cfg.ffn) / h
    return replicated, split, attention


def inner_bytes_per_token(cfg: ModelConfig, gemm_input_bytes: float = 2.0) -> float:
    """Bytes one token keeps inside one layer (the part tensor parallelism splits), by
    Korthikanti et al.'s rule (`layer_counts`' split term times ``h``); ``24 h`` for a
    multi-head attention layer with a 4h GELU MLP. MLA keeps its latents and per-head
    queries, keys and values; a MoE layer its router scores, the top-k copies of each token
    in and out of the experts, the experts' insides and the shared experts'.

    ``gemm_input_bytes=1`` counts FP8 training whose GEMMs keep the FP8 copies of their
    inputs (Transformer Engine's Linear and GroupedLinear), as `layer_counts` does for a
    dense layer: the latents' norm outputs (the up-projections' inputs), the routed copies
    into the experts, the experts' and shared experts' down-projection inputs in one byte,
    and the output projection's FP8 input beside the BF16 attention output.

    >>> from explorer.models import load
    >>> cfg = load("deepseek-v3")
    >>> inner_bytes_per_token(cfg), inner_bytes_per_token(cfg, gemm_input_bytes=1.0)
    (514176.0, 452736.0)
    """
    n, g = cfg.num_heads, gemm_input_bytes
    if cfg.is_mla:
        qk, v = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
        lora = (cfg.q_lora_rank or 0) + cfg.kv_lora_rank
        latents = (2 + g) * lora + 2 * cfg.qk_rope_head_dim
        o_copy = g * n * v if g < 2 else 0  # an FP8 GEMM keeps its own copy of O
        attention = 2 * n * (2 * qk + 2 * v) + latents + o_copy
    else:
        d = cfg.dim_head
        attention = 2 * (2 * n * d + 2 * cfg.kv_heads * d)  # Q, proj input; K, V
        if cfg.qk_norm:  # the norms' inputs: queries and keys before their RMSNorm
            attention += 2 * n * d + 2 * cfg.kv_heads * d
    gated = cfg.activation == "swiglu"
    # gate+up outputs and the product; fc1 output and act (the down GEMM's input: g)
    f_bytes = 4 + g if gated else 2 + g
    if not cfg.is_moe:
        return attention + f_bytes * cfg.ffn
    h, k = cfg.hidden_size, cfg.experts_top_k
    routed = k * ((2 + g) * h + f_bytes * cfg.moe_ffn)  # copies in, outputs, insides
    return attention + 8 * cfg.num_experts + routed + f_bytes * cfg.shared_ffn


def layer_terms(
    cfg: ModelConfig,
    terms: ActivationTerms = ActivationTerms(),
    split: bool = True,
    gemm_input_bytes: float = 2.0,
) -> ActivationTerms:
    """``terms`` (a GPT layer's, Korthikanti et al.) scaled to a layer of ``cfg`` by
    `layer_counts` over the GPT counts (10, 24, 5); ``embedding_dropout_bytes`` 0 without
    dropout. ``split=False`` leaves ``split_bytes`` as given (MoE and MLA layers: their
    split term is ``step_model/terms/dense.py``'s). ``gemm_input_bytes``: as in
    `layer_counts` (1 for FP8 GEMMs that keep their FP8 inputs). Unchanged when
    ``terms.per_architecture`` is False.

    >>> from explorer.models import load
    >>> t = layer_terms(load("llama3-405b"))
    >>> t.replicated_bytes, t.split_bytes, t.attention_bytes, t.embedding_dropout_bytes
    (8.0, 23.75, 2.0, 0.0)
    """
    if not terms.per_architecture:
        return terms
    return _scaled(cfg, terms, split, gemm_input_bytes)


@lru_cache(maxsize=256)  # the planner asks for the same layer ~50 000 times (thread-safe)
def _scaled(
    cfg: ModelConfig, terms: ActivationTerms, split: bool, gemm_input_bytes: float
) -> ActivationTerms:
    rep, spl, att = layer_counts(cfg, gemm_input_bytes)
    out = replace(
        terms, replicated_bytes=terms.replicated_bytes * rep / GPT_REPLICATED,
        attention_bytes=terms.attention_bytes * att / GPT_ATTENTION,
        embedding_dropout_bytes=terms.embedding_dropout_bytes if cfg.dropout > 0 else 0.0,
    )  # fmt: skip
    return replace(out, split_bytes=terms.split_bytes * spl / GPT_SPLIT) if split else out
