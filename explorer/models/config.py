"""``ModelConfig``: the validated description of a model architecture."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, get_args

from ..checks import is_int, is_number
from ..errors import ExplorerError
from ..ir.dtype import DType

__all__ = [
    "MAX_LAYERS",
    "ModelConfig",
    "ModelConfigError",
    "Arch",
    "Norm",
    "Activation",
    "Position",
    "Attention",
]

#: Most layers a config may have. Building costs about 4 ms and 35 kB per layer (llama3-8b
#: with 1000 layers: 31,010 nodes in 4.1 s) and the pipeline partitioner holds a
#: layers x layers table, so 10**6 layers would need ~931 GiB; the zoo's deepest model has
#: 128. Raise it by assigning ``explorer.models.config.MAX_LAYERS``.
MAX_LAYERS = 4096

Arch = Literal["decoder", "encoder", "mlp"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["pre", "post"]
Activation = Literal["gelu", "swiglu", "relu"]
Position = Literal["learned", "rope", "alibi", "none"]
Attention = Literal["mha", "gqa", "mla"]


class ModelConfigError(ExplorerError, ValueError):
    """A model config is malformed; the message names the file or field and what is expected."""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one model, as read from ``datasets/models/NAME.json``.

    Args:
        name: short name, e.g. ``"gpt3-175b"``.
        arch: ``decoder`` (GPT, LLaMA, ...), ``encoder`` (BERT) or ``mlp``.
        hidden_size, num_layers, num_heads: h, l, a.
        num_kv_heads: key/value heads for grouped-query attention (default: num_heads).
        head_dim: per-head size (default: hidden_size // num_heads).
        ffn_hidden_size: inner size of the MLP (default: 4 * hidden_size).
        vocab_size: V (0 for an MLP).
        max_seq_len: positions of the learned position table; the default sequence.
        norm, norm_position: LayerNorm or RMSNorm, before (pre) or after (post) each block.
        activation: ``gelu``, ``relu`` or ``swiglu`` (gated, three matrices).
        position: learned table, rotary, ALiBi or none (rope/alibi add no parameters and
            their few FLOPs are not modelled).
        tied_embeddings: the output head reuses the token embedding.
        bias: linear layers and norms carry biases.
        num_experts, experts_top_k, capacity_factor: mixture of experts (0 = dense): routed
            experts, experts per token, slots per expert over the average load.
        attention: ``mha``/``gqa`` (None: by ``num_kv_heads``) or ``mla``, DeepSeek's
            multi-head latent attention with ``q_lora_rank`` (None: a full-rank query
            projection), ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim`` and
            ``v_head_dim`` (transformers' names; see `explorer.models.config_counts`).
        qkv_bias: biases on the q, k, v projections only (Qwen2); ``bias`` puts them on
            every linear layer and norm.
        qk_norm: an RMSNorm over ``head_dim`` on queries and keys (Qwen3).
        moe_intermediate_size: inner size of each routed expert (default: ``ffn``).
        num_shared_experts, shared_expert_size: experts every token passes through (DeepSeek,
            Qwen2-MoE), built as one gated MLP of ``shared_expert_size`` (default:
            ``num_shared_experts * moe_intermediate_size``).
        shared_expert_gate: a sigmoid gate ``[hidden, 1]`` on the shared expert (Qwen2-MoE).
        first_dense_layers: the first layers are dense MLPs of ``ffn`` (DeepSeek's
            ``first_k_dense_replace``); a slice with fewer layers is all dense.
        mtp_layers: DeepSeek-V3's multi-token-prediction modules after the head (each: two
            norms, a ``[2h, h]`` projection, one layer like the last, the final norm; the
            embedding and the output head shared). transformers does not build them, so
            ``from_hf_config`` leaves 0; DeepSeek-V3 trained with 1.
        embed_norm: a norm right after the embedding (BLOOM, BERT).
        type_vocab_size: token-type embeddings (BERT).
        query_layer: PanGu-alpha's top query layer (its queries come from a second
            position table).
        dropout: dropout probability (0 adds no dropout ops).
        dtype: parameter and activation dtype.
        published_params, published_params_text, source: the published parameter count,
            as printed, and where it comes from.
        param_tolerance: relative tolerance for our count against the published one when
            the publication rounds or disagrees with its own dims (explained in ``note``).
        note: free text kept with the file.
    """

    name: str
    arch: Arch
    hidden_size: int
    num_layers: int
    num_heads: int = 0
    num_kv_heads: int | None = None
    head_dim: int | None = None
    ffn_hidden_size: int | None = None
    vocab_size: int = 0
    max_seq_len: int = 2048
    norm: Norm = "layernorm"
    norm_position: NormPosition = "pre"
    activation: Activation = "gelu"
    position: Position = "learned"
    tied_embeddings: bool = True
    bias: bool = True
    num_experts: int = 0
    experts_top_k: int = 2
    capacity_factor: float = 1.0
    attention: Attention | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    shared_expert_size: int | None = None
    shared_expert_gate: bool = False
    first_dense_layers: int = 0
    mtp_layers: int = 0
    embed_norm: bool = False
    type_vocab_size: int = 0
    query_layer: bool = False
    dropout: float = 0.0
    dtype: str = "bf16"
    published_params: float | None = None
    published_params_text: str | None = None
    source: str = ""
    param_tolerance: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        _check_types(self, where)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in _LITERALS and v not in _LITERALS[f.name] and v is not None:
                raise ModelConfigError(
                    f"{where}: field {f.name!r} is {v!r}; expected one of "
                    f"{', '.join(repr(a) for a in _LITERALS[f.name])}"
                )
        pos_ints = ["hidden_size", "num_layers"]
        if self.arch != "mlp":
            pos_ints += ["num_heads", "vocab_size", "max_seq_len"]
        for k in pos_ints:
            v = getattr(self, k)
            if not is_int(v, minimum=1):
                raise ModelConfigError(f"{where}: field {k!r} is {v!r}; expected an int > 0")
        for k in ("num_kv_heads", "head_dim", "ffn_hidden_size", *_OPTIONAL_SIZES):
            v = getattr(self, k)
            if v is not None and not is_int(v, minimum=1):
                raise ModelConfigError(
                    f"{where}: field {k!r} is {v!r}; expected an int > 0 or null for the default"
                )
        if self.num_layers > MAX_LAYERS:
            raise ModelConfigError(
                f"{where}: num_layers={self.num_layers:,} is more than MAX_LAYERS={MAX_LAYERS:,} "
                "that can be built and planned in memory (a graph takes ~35 kB per layer, the "
                "pipeline partition a layers x layers table); model fewer identical layers, or "
                "raise explorer.models.config.MAX_LAYERS"
            )
        if self.arch != "mlp":
            if self.head_dim is None and self.hidden_size % self.num_heads and not self.is_mla:
                raise ModelConfigError(
                    f"{where}: num_heads={self.num_heads} does not divide "
                    f"hidden_size={self.hidden_size}; choose a divisor of the hidden size "
                    "or set head_dim explicitly"
                )
            if self.num_heads % self.kv_heads:
                raise ModelConfigError(
                    f"{where}: num_kv_heads={self.kv_heads} does not divide "
                    f"num_heads={self.num_heads}; grouped-query attention needs whole groups"
                )
        if self.num_experts < 0 or (
            self.num_experts and not 0 < self.experts_top_k <= self.num_experts
        ):
            raise ModelConfigError(
                f"{where}: experts_top_k={self.experts_top_k} with num_experts="
                f"{self.num_experts}; expected 0 < top_k <= num_experts"
            )
        check_extensions(self, where)
        if not 0.0 <= self.dropout < 1.0:
            raise ModelConfigError(f"{where}: dropout={self.dropout}; expected 0 <= p < 1")
        if not (math.isfinite(self.capacity_factor) and self.capacity_factor > 0):
            raise ModelConfigError(
                f"{where}: capacity_factor={self.capacity_factor!r}; expected a finite number > 0 "
                "(1.0 = exactly the average tokens per expert)"
            )
        if self.dtype == "fp8":
            raise ModelConfigError(
                f"{where}: field 'dtype' is 'fp8'; FP8 is a training choice, not a model "
                "dtype (FP8 training runs the GEMMs in FP8 and keeps weights, norms, softmax "
                "and activations in BF16): keep dtype='bf16' and pass "
                "TrainingParams(precision='fp8') (or stacks.params(name, precision='fp8')) "
                "to simulate / plan_training"
            )
        if self.dtype not in _FLOAT_DTYPES:
            raise ModelConfigError(
                f"{where}: field 'dtype' is {self.dtype!r}; expected one of "
                f"{', '.join(repr(d) for d in _FLOAT_DTYPES)} (parameters and activations are "
                "floating point)"
            )

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def attention_kind(self) -> str:
        """``mha``, ``gqa`` or ``mla`` (the field, or by ``num_kv_heads`` when unset)."""
        if self.attention is not None:
            return self.attention
        return "mha" if self.kv_heads == self.num_heads else "gqa"

    @property
    def moe_ffn(self) -> int:
        """Inner size of one routed expert."""
        return self.moe_intermediate_size or self.ffn

    @property
    def shared_ffn(self) -> int:
        """Inner size of the shared experts' one gated MLP (0: none)."""
        if not self.num_shared_experts:
            return 0
        return self.shared_expert_size or self.num_shared_experts * self.moe_ffn

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP: all of a dense model, the first ``first_dense_layers``
        of a mixture of experts."""
        return self.num_layers if not self.is_moe else min(self.first_dense_layers, self.num_layers)

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.dense_layers

    def layer_is_moe(self, i: int) -> bool:
        """Layer ``i`` (from 0) holds experts."""
        return self.is_moe and i >= self.first_dense_layers

    def num_params(self) -> int:
        """Parameters of the model, counted from the config (`config_counts.param_count`;
        equals ``build(cfg).num_params()`` and, for configs read from Hugging Face, the
        transformers model's ``sum(p.numel())``)."""
        # method facade: the counts read a ModelConfig, so config_counts stands above this module
        from .config_counts import param_count

        return param_count(self)

    def forward_flops(self, seq: int | None = None, batch: int = 1) -> int:
        """Forward matmul FLOPs of ``batch`` sequences of ``seq`` (default ``max_seq_len``),
        routed experts counted for the ``top_k`` experts of each token
        (`config_counts.forward_flops`)."""
        # method facade: the counts read a ModelConfig, so config_counts stands above this module
        from .config_counts import forward_flops

        return forward_flops(self, self.max_seq_len if seq is None else seq, batch)

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        if self.arch == "mlp":
            return f"{self.name}: mlp, {self.num_layers} blocks, hidden {self.hidden_size}"
        moe = f", {self.num_experts} experts top-{self.experts_top_k}" if self.is_moe else ""
        if self.is_moe and self.num_shared_experts:
            moe += f" + {self.num_shared_experts} shared"
        if self.is_moe and self.first_dense_layers:
            moe += f", first {self.dense_layers} dense"
        if self.is_mla:
            moe += f", MLA ranks q {self.q_lora_rank or 'full'} kv {self.kv_lora_rank}"
        return (
            f"{self.name}: {self.arch}, {self.num_layers} layers, hidden {self.hidden_size}, "
            f"{self.num_heads} heads ({'MLA' if self.is_mla else f'{self.kv_heads} kv'}), "
            f"ffn {self.ffn}, vocab "
            f"{self.vocab_size}{moe}"
        )


_LITERALS = {
    "arch": get_args(Arch),
    "norm": get_args(Norm),
    "norm_position": get_args(NormPosition),
    "activation": get_args(Activation),
    "position": get_args(Position),
    "attention": get_args(Attention),
}

_FLOAT_DTYPES = tuple(d.value for d in DType if d.is_float)

_MLA_SIZES = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_OPTIONAL_SIZES = ("q_lora_rank", *_MLA_SIZES, "moe_intermediate_size", "shared_expert_size")


def check_extensions(cfg: ModelConfig, where: str) -> None:
    """The attention kind and the mixture-of-experts extensions agree with each other."""
    if cfg.attention == "mla":
        missing = [k for k in _MLA_SIZES if getattr(cfg, k) is None]
        if missing:
            raise ModelConfigError(
                f"{where}: attention='mla' needs {', '.join(missing)}; give the ranks and head "
                "sizes (DeepSeek-V3: kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim "
                "64, v_head_dim 128, q_lora_rank 1536)"
            )
        if cfg.arch != "decoder" or cfg.bias or cfg.qkv_bias or cfg.qk_norm:
            raise ModelConfigError(
                f"{where}: attention='mla' is modelled for decoders without attention biases "
                "or q/k norms; set arch='decoder', bias=false, qkv_bias=false, qk_norm=false"
            )
        if cfg.num_kv_heads not in (None, cfg.num_heads):
            raise ModelConfigError(
                f"{where}: num_kv_heads={cfg.num_kv_heads} with attention='mla'; MLA expands "
                f"its latent to all {cfg.num_heads} heads, so leave num_kv_heads null"
            )
    else:
        extra = [k for k in ("q_lora_rank", *_MLA_SIZES) if getattr(cfg, k) is not None]
        if extra:
            raise ModelConfigError(
                f"{where}: {', '.join(extra)} set with attention={cfg.attention!r}; these are "
                "multi-head latent attention sizes: set attention='mla' or remove them"
            )
        if cfg.attention == "mha" and cfg.arch != "mlp" and cfg.kv_heads != cfg.num_heads:
            raise ModelConfigError(
                f"{where}: attention='mha' with num_kv_heads={cfg.num_kv_heads} != num_heads="
                f"{cfg.num_heads}; use attention='gqa' (or leave it null)"
            )
    if cfg.mtp_layers < 0 or (cfg.mtp_layers and cfg.arch != "decoder"):
        raise ModelConfigError(
            f"{where}: mtp_layers={cfg.mtp_layers}; expected an int >= 0, and 0 unless "
            "arch='decoder' (multi-token prediction follows a decoder's head)"
        )
    k = cfg.num_shared_experts
    if not is_int(k, minimum=0) or not is_int(cfg.first_dense_layers, minimum=0):
        raise ModelConfigError(
            f"{where}: num_shared_experts={k!r}, first_dense_layers={cfg.first_dense_layers!r}; "
            "expected ints >= 0"
        )
    moe_only = {
        "moe_intermediate_size": cfg.moe_intermediate_size is not None,
        "num_shared_experts": k > 0,
        "shared_expert_size": cfg.shared_expert_size is not None,
        "shared_expert_gate": cfg.shared_expert_gate,
        "first_dense_layers": cfg.first_dense_layers > 0,
    }
    given = [name for name, on in moe_only.items() if on]
    if given and not cfg.is_moe:
        raise ModelConfigError(
            f"{where}: {', '.join(given)} set on a dense model (num_experts=0); they describe a "
            "mixture of experts: set num_experts or remove them"
        )
    if (cfg.shared_expert_size is not None or cfg.shared_expert_gate) and not k:
        raise ModelConfigError(
            f"{where}: shared_expert_size/shared_expert_gate without shared experts; set "
            "num_shared_experts (Qwen2-MoE: 1)"
        )


def _check_types(cfg: ModelConfig, where: str) -> None:
    """Each field holds the type its annotation names (bools are not ints, numbers are
    finite); range checks follow in ``__post_init__``."""
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        kind = str(f.type)
        if v is None and "None" in kind:
            continue
        if kind.startswith("int"):
            ok = is_int(v)
            expected = "an integer"
        elif kind.startswith("float"):
            ok = is_number(v, numpy=True)
            expected = "a finite number"
        elif kind == "bool":
            ok, expected = isinstance(v, bool), "true or false"
        else:  # str and the Literal aliases
            ok, expected = isinstance(v, str), "a string"
        if not ok:
            null = " or null for the default" if "None" in kind else ""
            raise ModelConfigError(f"{where}: field {f.name!r} is {v!r}; expected {expected}{null}")
    if not cfg.name.strip():
        raise ModelConfigError(f"{where}: field 'name' is empty; give the model a short name")
