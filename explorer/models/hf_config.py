"""``from_hf_config``: a ``ModelConfig`` from a Hugging Face ``config.json``, read exactly.

Only the model types whose layers our builders reproduce exactly are read (``SUPPORTED``);
any other ``model_type`` is refused, naming these, instead of being read as LLaMA. Every
field read is type-checked under its Hugging Face name, and every error names the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..checks import is_int
from ..jsonfile import as_path, read_json
from .config import ModelConfig, ModelConfigError
from .config_hf_moe import HARMLESS_MOE, READERS, SUPPORTED_MOE

__all__ = ["SUPPORTED", "METADATA", "HARMLESS", "ARCHITECTURE", "from_hf_config"]

#: ``model_type`` -> what it is read as. Other types (gpt_neox, t5, mamba, qwen2, ...) have
#: layers our builders do not reproduce (parallel residuals, encoder-decoder, state spaces,
#: q/k/v-only biases), so they are refused rather than approximated.
SUPPORTED = {
    "llama": "decoder, RMSNorm, rotary, SwiGLU",
    "mistral": "decoder, RMSNorm, rotary, SwiGLU",
    "mixtral": "decoder, RMSNorm, rotary, SwiGLU mixture of experts",
    "gpt2": "decoder, LayerNorm, learned positions, GELU/ReLU MLP",
    "bert": "encoder, post-LayerNorm, learned positions, GELU/ReLU MLP",
    **SUPPORTED_MOE,
}
_GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python")


def from_hf_config(
    path: str | Path | Mapping[str, Any], name: str | None = None, *, strict: bool = True
) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (a file, a folder holding one, or its dict).

    Every field is accounted for: the fields the reader uses, metadata that changes no
    layer (`METADATA`: token ids, dtype, dropout, init, norm epsilons, rotary base and
    scaling, which add no parameters and whose FLOPs are not modelled), and the harmless
    fields of each type (`HARMLESS`: Mistral's ``sliding_window`` masks keys but the dense
    causal attention is what eager transformers computes and what the builders count).
    A field that changes the architecture and is not read (`ARCHITECTURE`, e.g.
    ``num_key_value_heads`` in a GPT-2 config, experts in a LLaMA config) is refused,
    suggesting ``from_hf``. Any other field is refused unless ``strict=False``, which
    ignores it and lists it in the result's ``note``.

    Args:
        path: ``config.json``, the model folder that contains it, or the parsed dict.
        name: the config's name (default: ``_name_or_path``, else the folder's name).
        strict: refuse fields this reader does not know (default); False lists them in
            ``ModelConfig.note`` and goes on.

    Raises:
        ModelConfigError: the file is missing, unreadable or not an object; its
            ``model_type`` is not in ``SUPPORTED``; a field is missing, ill-typed,
            changes the architecture unread, or is unknown (with ``strict``).

    >>> cfg = from_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2,
    ...                       "n_head": 4, "vocab_size": 100, "n_positions": 32})
    >>> cfg.arch, cfg.activation, cfg.num_layers
    ('decoder', 'gelu', 2)
    """
    raw, where, folder = read_hf_config(path, ModelConfigError)
    fields = _Fields(raw, where)
    mtype = fields.model_type()
    if name is None:
        name = fields.optional("_name_or_path", str, None) or folder or mtype
    if not isinstance(name, str) or not name.strip():
        raise ModelConfigError(f"{where}: name={name!r}; expected a non-empty string")
    read = {"gpt2": _gpt2, "bert": _bert, **READERS}.get(mtype, _llama)
    values = read(fields, mtype)
    ignored = fields.unread(mtype, strict)
    if ignored:
        values["note"] = f"from_hf_config ignored unknown fields: {', '.join(ignored)}"
    try:
        return ModelConfig(name=name, **values)
    except ModelConfigError as e:
        raise ModelConfigError(f"{where}: {e}") from None


#: Fields that change no layer of the model (tokenizer ids, dtype, training options,
#: initialisation, norm epsilons, rotary base and scaling: no parameters, FLOPs not modelled).
METADATA = frozenset({
    "_name_or_path", "model_type", "architectures", "torch_dtype", "dtype",
    "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "cls_token_id", "unk_token_id", "mask_token_id", "decoder_start_token_id", "use_cache",
    "initializer_range", "initializer_factor", "layer_norm_eps", "layer_norm_epsilon",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "pretraining_tp",
    "attention_dropout", "hidden_dropout", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop",
    "classifier_dropout", "output_attentions", "output_hidden_states", "return_dict",
    "torchscript", "tokenizer_class", "task_specific_params", "id2label", "label2id",
    "problem_type", "gradient_checkpointing", "use_return_dict", "tie_encoder_decoder",
    "chunk_size_feed_forward", "finetuning_task", "prefix", "bad_words_ids", "max_length",
    "min_length", "do_sample", "num_beams", "temperature", "top_k", "top_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "early_stopping",
    "num_return_sequences", "pruned_heads", "quantization_config", "n_ctx",
})  # fmt: skip

#: Per model type: fields that are safe to leave unread (see `from_hf_config`).
HARMLESS = {
    "gpt2": frozenset({"summary_type", "summary_use_proj", "summary_activation",
                       "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
                       "reorder_and_upcast_attn"}),
    "bert": frozenset({"gradient_checkpointing"}),
    "llama": frozenset(),
    "mistral": frozenset({"sliding_window"}),
    "mixtral": frozenset({"sliding_window", "router_aux_loss_coef", "output_router_logits",
                          "router_jitter_noise"}),
    **HARMLESS_MOE,
}  # fmt: skip

#: Fields that change the architecture when set: refused unless read (the message suggests
#: from_hf, which traces the transformers model instead).
ARCHITECTURE = frozenset({
    "num_key_value_heads", "head_dim", "attention_bias", "mlp_bias", "num_local_experts",
    "num_experts", "n_routed_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
    "n_shared_experts", "q_lora_rank", "kv_lora_rank", "partial_rotary_factor", "rotary_dim",
    "rotary_pct", "use_parallel_residual", "parallel_attn", "qk_layernorm", "use_qk_norm",
    "layer_types", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
    "multi_query", "new_decoder_architecture", "alibi", "add_cross_attention", "is_decoder",
    "is_encoder_decoder", "scale_attn_by_inverse_layer_idx", "position_embedding_type",
    "sliding_window", "use_sliding_window", "num_experts_per_tok", "embedding_multiplier",
    "logits_scaling", "residual_multiplier", "attention_multiplier",
})  # fmt: skip
# values of an ARCHITECTURE field that keep the plain architecture
_NO_OP = (None, False, 0, "absolute")


def _gpt2(f: _Fields, mtype: str) -> dict[str, Any]:
    return dict(
        arch="decoder", hidden_size=f.positive("n_embd"), num_layers=f.positive("n_layer"),
        num_heads=f.positive("n_head"), ffn_hidden_size=f.positive_or_none("n_inner"),
        vocab_size=f.positive("vocab_size"), max_seq_len=f.positive("n_positions", "n_ctx"),
        activation=f.activation("activation_function", "gelu_new", gated=False),
        norm="layernorm", position="learned",
        tied_embeddings=f.optional("tie_word_embeddings", bool, True), bias=True,
    )  # fmt: skip


def _bert(f: _Fields, mtype: str) -> dict[str, Any]:
    return dict(
        arch="encoder", hidden_size=f.positive("hidden_size"),
        num_layers=f.positive("num_hidden_layers"), num_heads=f.positive("num_attention_heads"),
        ffn_hidden_size=f.positive("intermediate_size"), vocab_size=f.positive("vocab_size"),
        max_seq_len=f.positive("max_position_embeddings"), norm_position="post",
        type_vocab_size=f.optional("type_vocab_size", int, 2), embed_norm=True,
        activation=f.activation("hidden_act", "gelu", gated=False), position="learned",
    )  # fmt: skip


def _llama(f: _Fields, mtype: str) -> dict[str, Any]:
    if f.optional("mlp_bias", bool, False):
        raise ModelConfigError(
            f"{f.where}: field 'mlp_bias' is true; the builders give MLP biases only together "
            "with attention biases (attention_bias), so this config cannot be read exactly"
        )
    moe = {}
    if mtype == "mixtral":
        moe = dict(num_experts=f.positive("num_local_experts"),
                   experts_top_k=f.optional("num_experts_per_tok", int, 2))  # fmt: skip
    return dict(
        arch="decoder", hidden_size=f.positive("hidden_size"),
        num_layers=f.positive("num_hidden_layers"), num_heads=f.positive("num_attention_heads"),
        num_kv_heads=f.positive_or_none("num_key_value_heads"),
        head_dim=f.positive_or_none("head_dim"),
        ffn_hidden_size=f.positive("intermediate_size"), vocab_size=f.positive("vocab_size"),
        max_seq_len=f.optional("max_position_embeddings", int, 4096), norm="rmsnorm",
        activation=f.activation("hidden_act", "silu", gated=True), position="rope",
        tied_embeddings=f.optional("tie_word_embeddings", bool, False),
        bias=f.optional("attention_bias", bool, False), **moe,
    )  # fmt: skip


def read_hf_config(
    path: str | Path | Mapping[str, Any], error: type[Exception]
) -> tuple[dict[str, Any], str, str]:
    """``(fields, where, folder)`` of a ``config.json`` given as a file, the model folder
    holding one, or its parsed dict; ``where`` names it in messages (the file, or "Hugging
    Face config"), ``folder`` is the model folder's name ("" for a dict). Errors are
    ``error`` naming the file (the hand readers' ModelConfigError, the importer's
    TorchImportError)."""
    if isinstance(path, Mapping):
        raw, where, folder = dict(path), "Hugging Face config", ""
    else:
        file = as_path(path, error, "Hugging Face config")
        if file.is_dir():
            if not (file / "config.json").is_file():
                raise error(
                    f"{file}: is a folder without a config.json; give the config.json file "
                    "or the model folder that holds it"
                )
            file = file / "config.json"
        raw = read_json(file, error, "Hugging Face config")
        where, folder = str(file), file.resolve().parent.name
    if not isinstance(raw, dict):
        raise error(f"{where}: the top level is {kind_of(raw)}; a config.json holds a JSON object")
    return raw, where, folder


class _Fields:
    """Typed access to a config's fields; errors name the file and the Hugging Face key."""

    def __init__(self, raw: dict[str, Any], where: str) -> None:
        self.raw, self.where = raw, where
        self.read: set[str] = set()

    def unread(self, mtype: str, strict: bool) -> tuple[str, ...]:
        """Fields neither read nor known to be harmless: refuse those that change the
        architecture; refuse the rest when ``strict``, else return them (sorted)."""
        rest = sorted(set(self.raw) - self.read - METADATA - HARMLESS.get(mtype, frozenset()))
        for key in rest:
            if key in ARCHITECTURE and self.raw[key] not in _NO_OP:
                raise ModelConfigError(
                    f"{self.where}: field {key!r} is {self.raw[key]!r}; it changes the "
                    f"architecture and the {mtype} reader does not model it. Trace the "
                    "transformers model instead: explorer.models.from_hf(config) (extra 'hf')"
                )
        unknown = [k for k in rest if k not in ARCHITECTURE]
        if unknown and strict:
            raise ModelConfigError(
                f"{self.where}: unknown field {unknown[0]!r} in a {mtype} config"
                + (f" (also {', '.join(map(repr, unknown[1:4]))})" if len(unknown) > 1 else "")
                + "; it may change the model. Pass strict=False to ignore unknown fields "
                "(they are listed in the result's note), or trace the model with "
                "explorer.models.from_hf"
            )
        return tuple(unknown)

    def fail(self, key: str, value: Any, expected: str) -> NoReturn:
        raise ModelConfigError(f"{self.where}: field {key!r} is {value!r}; expected {expected}")

    def model_type(self) -> str:
        mtype = self.raw.get("model_type")
        if mtype is None and "n_embd" in self.raw:
            return "gpt2"  # GPT-2 configs written before model_type existed
        if not isinstance(mtype, str) or mtype not in SUPPORTED:
            got = "missing" if mtype is None else f"{mtype!r}"
            raise ModelConfigError(
                f"{self.where}: model_type {got} is not supported; supported model types: "
                f"{', '.join(SUPPORTED)} (others are not read exactly; trace the model with "
                "explorer.models.from_hf instead, which needs the 'hf' extra: pip install "
                "'parallel-explorer[hf]')"
            )
        return mtype

    def optional(self, key: str, kind: type, default: Any) -> Any:
        self.read.add(key)
        if key not in self.raw:
            return default
        value = self.raw[key]
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not ok:
            names = {bool: "true or false", int: "an integer", str: "a string"}
            self.fail(key, value, names[kind])
        if kind is int and value <= 0:
            self.fail(key, value, "an integer > 0")
        return value

    def positive(self, *keys: str) -> int:
        self.read.update(keys)
        for key in keys:
            if key in self.raw:
                value = self.raw[key]
                if not is_int(value, minimum=1):
                    self.fail(key, value, "an integer > 0")
                return value
        raise ModelConfigError(
            f"{self.where}: field {' or '.join(repr(k) for k in keys)} is missing; "
            f"a {self.raw.get('model_type') or 'gpt2'} config.json needs it"
        )

    def positive_or_none(self, key: str) -> int | None:
        self.read.add(key)
        value = self.raw.get(key)
        if value is not None and not is_int(value, minimum=1):
            self.fail(key, value, "an integer > 0 or null")
        return value

    def activation(self, key: str, default: str, *, gated: bool) -> str:
        self.read.add(key)
        act = self.raw.get(key, default)
        if gated:  # LLaMA-family MLPs are act(gate(x)) * up(x): only SiLU is modelled
            if act in ("silu", "swish"):
                return "swiglu"
            self.fail(key, act, "'silu' (the gated MLP is modelled as SwiGLU only)")
        if act in _GELU:
            return "gelu"
        if act == "relu":
            return "relu"
        return self.fail(key, act, f"one of {', '.join(map(repr, _GELU))} or 'relu'")


def kind_of(value: Any) -> str:
    kinds = {list: "a list", type(None): "null", str: "a string", bool: "a boolean"}
    return kinds.get(type(value), "a number")
