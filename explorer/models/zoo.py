"""The model zoo: ``load(name)`` from ``datasets/models`` and ``from_hf_config(path)``."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any

from .config import ModelConfig, ModelConfigError

__all__ = ["load", "load_file", "names", "from_hf_config", "datasets_dir"]


def datasets_dir() -> Path:
    """``datasets/`` of this checkout, or ``$EXPLORER_DATASETS`` when set."""
    env = os.environ.get("EXPLORER_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "datasets"


def _models_dir() -> Path:
    return datasets_dir() / "models"


def names() -> tuple[str, ...]:
    """Every model in the zoo, sorted."""
    return tuple(sorted(p.stem for p in _models_dir().glob("*.json")))


def load(name: str) -> ModelConfig:
    """The zoo's config for ``name``; an unknown name lists the close matches.

    >>> load("llama2-7b").num_layers
    32
    """
    if isinstance(name, ModelConfig):
        return name
    path = _models_dir() / f"{name}.json"
    if not path.is_file():
        close = difflib.get_close_matches(str(name), names(), n=4, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ModelConfigError(f"unknown model {name!r}.{hint} Known models: {', '.join(names())}")
    return load_file(path)


_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
_REQUIRED = ("name", "arch", "hidden_size", "num_layers")


def load_file(path: str | Path) -> ModelConfig:
    """Read and validate one model JSON file; errors name the file and the field."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no such model file") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path}: expected a JSON object of model fields")
    return _from_dict(raw, str(path))


def _from_dict(raw: dict[str, Any], where: str) -> ModelConfig:
    raw = {k: v for k, v in raw.items() if not k.startswith("_")}
    published = raw.pop("published", None)
    if published is not None:
        if not isinstance(published, dict) or "params" not in published:
            raise ModelConfigError(
                f"{where}: field 'published' must be an object with 'params', 'text', 'source'"
            )
        raw["published_params"] = published.get("params")
        raw["published_params_text"] = published.get("text")
        raw["source"] = published.get("source", "")
        if "tolerance" in published:
            raw["param_tolerance"] = published["tolerance"]
        raw["note"] = published.get("note", "")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModelConfigError(f"{where}: unknown field {unknown[0]!r}{hint}")
    for k in _REQUIRED:
        if k not in raw:
            raise ModelConfigError(f"{where}: field {k!r} is missing; it is required")
    for k, v in raw.items():
        t = _FIELDS[k].type
        if (
            "int" in t
            and "float" not in t
            and v is not None
            and (isinstance(v, bool) or not isinstance(v, int))
        ):
            raise ModelConfigError(f"{where}: field {k!r} is {v!r}; expected an integer")
        if t == "bool" and not isinstance(v, bool):
            raise ModelConfigError(f"{where}: field {k!r} is {v!r}; expected true or false")
    try:
        return ModelConfig(**raw)
    except ModelConfigError as e:
        raise ModelConfigError(f"{where}: {e}") from None


def from_hf_config(path: str | Path, name: str | None = None) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (LLaMA/Mistral/Mixtral, GPT-2, BERT field names).

    >>> # cfg = from_hf_config("Meta-Llama-3-8B/config.json")
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no such config file") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    name = name or raw.get("_name_or_path") or path.parent.name or path.stem
    mtype = raw.get("model_type", "")

    def need(*keys):
        for k in keys:
            if k in raw:
                return raw[k]
        raise ModelConfigError(
            f"{path}: field {' or '.join(repr(k) for k in keys)} is missing; "
            f"a {mtype or 'transformer'} config.json needs it"
        )

    if "n_embd" in raw or mtype == "gpt2":
        fields = dict(
            arch="decoder", hidden_size=need("n_embd"), num_layers=need("n_layer"),
            num_heads=need("n_head"), ffn_hidden_size=raw.get("n_inner"),
            vocab_size=need("vocab_size"), max_seq_len=need("n_positions", "n_ctx"),
            activation="gelu", norm="layernorm", position="learned", tied_embeddings=True,
            bias=True,
        )  # fmt: skip
    elif mtype == "bert":
        fields = dict(
            arch="encoder", hidden_size=need("hidden_size"),
            num_layers=need("num_hidden_layers"), num_heads=need("num_attention_heads"),
            ffn_hidden_size=need("intermediate_size"), vocab_size=need("vocab_size"),
            max_seq_len=need("max_position_embeddings"), norm_position="post",
            type_vocab_size=raw.get("type_vocab_size", 2), embed_norm=True,
            activation="gelu", position="learned",
        )  # fmt: skip
    else:  # LLaMA-style names (llama, mistral, mixtral, qwen2, ...)
        act = raw.get("hidden_act", "silu")
        fields = dict(
            arch="decoder", hidden_size=need("hidden_size"),
            num_layers=need("num_hidden_layers"), num_heads=need("num_attention_heads"),
            num_kv_heads=raw.get("num_key_value_heads"), head_dim=raw.get("head_dim"),
            ffn_hidden_size=need("intermediate_size"), vocab_size=need("vocab_size"),
            max_seq_len=raw.get("max_position_embeddings", 4096),
            norm="rmsnorm", activation="swiglu" if act in ("silu", "swish") else "gelu",
            position="rope", tied_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bias=bool(raw.get("attention_bias", False)),
            num_experts=raw.get("num_local_experts", 0),
            experts_top_k=raw.get("num_experts_per_tok", 2),
        )  # fmt: skip
    return _from_dict({"name": str(name), **fields}, str(path))
