"""``from_hf``: any Hugging Face architecture, from its ``config.json``, traced into the IR.

The config goes to transformers, which builds its own model class on the meta device (no
weights, no memory), and `from_torch` traces that model. So every architecture
transformers defines comes in exactly as transformers runs it, without a reader per
architecture. Needs the ``hf`` extra (transformers and torch); without it,
`from_hf_config` reads the few model types it reproduces exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..checks import is_int
from ..ir import DType
from .hf_config import read_hf_config
from .torch_import import LeafHandler, TorchImportError, TracedGraph, from_torch
from .torch_import.repeat import repeat_layer

__all__ = ["from_hf", "hf_model", "DEFAULT_SEQ_CAP"]

#: Sequence length when ``seq`` is not given: the config's context length, at most this
#: (a 128k context traces the same ops, only with larger numbers; pass ``seq`` for more).
DEFAULT_SEQ_CAP = 4096

_SEQ_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx", "seq_length")
_DTYPE_FIELDS = ("dtype", "torch_dtype")
_TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def from_hf(
    config: str | Path | Mapping[str, Any] | Any, *, batch: int = 1, seq: int | None = None,
    dtype: str | None = None, attn_implementation: str = "eager",
    leaves: Mapping[str, LeafHandler] | None = None, name: str | None = None,
    labels: bool = False, reuse_layers: bool = True,
) -> TracedGraph:  # fmt: skip
    """Trace the transformers model of a ``config.json`` (a file, a folder holding one, a
    dict, or a transformers ``PretrainedConfig``) on the meta device.

    The class is the config's ``architectures[0]`` when transformers has it, else
    ``AutoModelForCausalLM`` (``AutoModel`` for types without a causal-LM head). Attention
    is eager by default so its FLOPs appear as contractions (PyTorch's sdpa is mapped too).

    Args:
        config: the config.
        batch, seq: the traced input shape (``seq`` default: the config's context length,
            at most `DEFAULT_SEQ_CAP`; images use the config's ``image_size``).
        dtype: parameter and activation type (default: the config's ``dtype`` /
            ``torch_dtype``, else bf16).
        attn_implementation: passed to transformers (``"eager"`` or ``"sdpa"``).
        leaves: module class name -> `LeafHandler` (whole modules as first-class ops).
        name: the graph's name (default: ``_name_or_path``, the folder, or the model type).
        labels: also feed ``labels`` (the token ids) so that the model's own loss is traced,
            as in a training step (language models only).
        reuse_layers: for model types whose decoder layers are all alike, or alike in a
            repeating pattern of layer types (`REPEATABLE`), trace the first few layers and
            copy the last one (the last period of the pattern) for the rest (`repeat_layer`
            checks the last traced layers equal those before them, else the whole model
            is traced).

    Raises:
        TorchImportError: transformers is missing (install the ``hf`` extra), the config is
            unreadable or names an unknown model type, or tracing fails.

    >>> g = from_hf({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
    ...              "vocab_size": 128, "n_positions": 32})
    >>> g.num_params(), g.report.exact, g.parameters[0].name
    (110336, True, 'transformer.wte.weight')
    """
    for key, v in (("batch", batch), ("seq", seq)):
        if v is not None and not is_int(v, minimum=1):
            raise TorchImportError(f"{key}={v!r}; expected an int > 0")
    if reuse_layers:
        short = _short_config(config)
        if short is not None:
            small, total, prefix, period = short
            g = from_hf(small, batch=batch, seq=seq, dtype=dtype,
                        attn_implementation=attn_implementation, leaves=leaves, name=name,
                        labels=labels, reuse_layers=False)  # fmt: skip
            full = repeat_layer(g, prefix, total, period)
            if full is not None:
                return full
    model, cfg, where = hf_model(config, dtype=dtype, attn_implementation=attn_implementation)
    import torch

    if (
        getattr(cfg, "model_type", "") in ("vit", "deit", "beit", "dinov2")
        or hasattr(cfg, "image_size")
        and not hasattr(cfg, "vocab_size")
    ):
        size = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
        args: tuple = ((batch, cfg.num_channels, size, size),)
        kwargs: dict[str, Any] = {}
        input_dtype = _dtype_of(cfg, dtype)
    else:
        if seq is None:
            ctx = next((getattr(cfg, f) for f in _SEQ_FIELDS
                        if isinstance(getattr(cfg, f, None), int)), DEFAULT_SEQ_CAP)  # fmt: skip
            seq = min(ctx, DEFAULT_SEQ_CAP)
        args = ((batch, seq),)
        kwargs = {"use_cache": False} if _takes(model, "use_cache") else {}
        if getattr(cfg, "is_encoder_decoder", False):
            kwargs["decoder_input_ids"] = torch.zeros((batch, seq), dtype=torch.long,
                                                      device="meta")  # fmt: skip
        input_dtype = "int64"
        if labels:
            if not _takes(model, "labels"):
                raise TorchImportError(
                    f"labels=True: {type(model).__name__}.forward takes no labels; trace it "
                    "without the loss"
                )
            kwargs["labels"] = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    label = name or getattr(cfg, "_name_or_path", "") or where or cfg.model_type
    with _grouped_mm_fallback():
        return from_torch(model, args, kwargs, name=label, leaves=leaves,
                          input_dtype=input_dtype)  # fmt: skip


_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _grouped_mm_fallback():
    """While tracing, transformers' experts use its ``grouped_mm_fallback`` op: on the meta
    device it would pick ``torch._grouped_mm``, whose meta check refuses expert sizes that
    are not 16-byte aligned (DeepSeek-V2's 1407). Both map to the same ``grouped_mm``."""
    try:
        from transformers.integrations import moe
    except ImportError:
        yield
        return
    with _PATCH_LOCK:
        saved = getattr(moe, "_can_use_grouped_mm", None)
        if saved is not None:
            moe._can_use_grouped_mm = lambda *a, **k: False
        try:
            yield
        finally:
            if saved is not None:
                moe._can_use_grouped_mm = saved


#: Model types whose decoder layers are all the same module computing the same thing, or
#: the same things in the repeating pattern of their ``layer_types`` (Gemma 2 and 3's local
#: and global attention), given the per-layer fields checked in `_short_config` -> the path
#: of their layers.
REPEATABLE: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys((
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3",
        "starcoder2", "olmo2", "stablelm", "cohere", "deepseek_v2", "deepseek_v3", "gemma",
        "phi", "phimoe", "gemma2", "gemma3_text",
    ), "model.layers."),
    "gpt_neox": "gpt_neox.layers.", "gptj": "transformer.h.", "falcon": "transformer.h.",
    "mpt": "transformer.blocks.",
})  # fmt: skip
#: Layers traced before copying: the first distinct ones (DeepSeek's dense layers), one
#: more, and this many periods of the layer types to compare.
_TRACED_ALIKE = 2


def _short_config(config: Any) -> tuple[dict[str, Any], int, str, int] | None:
    """(the config with only the first few layers, the full layer count, the layers' path,
    the period of their types), or None when the layers may differ (MoE steps, layer types
    without a pattern that repeats within the layers) or the config is not a plain dict or
    file."""
    try:
        import transformers
    except ImportError:
        return None
    if isinstance(config, transformers.PretrainedConfig):
        raw = config.to_dict()
    elif isinstance(config, Mapping):
        raw = dict(config)
    else:
        try:
            cfg, _ = _config(config, transformers)
        except TorchImportError:
            return None
        raw = cfg.to_dict()
    mtype = raw.get("model_type")
    if mtype not in REPEATABLE or mtype not in transformers.CONFIG_MAPPING:
        return None
    # the layer count under the config's own name (GPT-J's n_layer, MPT's n_layers) and/or
    # the standard one, which transformers maps to it (and which wins when both are given)
    own = getattr(transformers.CONFIG_MAPPING[mtype], "attribute_map", {}).get(
        "num_hidden_layers", "num_hidden_layers")  # fmt: skip
    fields = [f for f in ("num_hidden_layers", own) if f in raw]
    total = raw[fields[0]] if fields else None
    if not is_int(total, minimum=1):
        return None
    first = raw.get("first_k_dense_replace") or 0
    if not isinstance(first, int) or raw.get("mlp_only_layers") or (
        raw.get("decoder_sparse_step") not in (None, 1)
    ):  # fmt: skip
        return None
    types = raw.get("layer_types")
    period = 1
    if isinstance(types, list):
        if len(types) != total:
            return None
        rest = types[first:]  # the layer types' shortest repeating pattern after those
        period = next((p for p in range(1, len(rest) + 1)
                       if all(t == rest[i % p] for i, t in enumerate(rest))), 1)  # fmt: skip
    keep = first + 1 + _TRACED_ALIKE * period
    if total <= keep + 1:
        return None
    small = {**raw, **dict.fromkeys(fields, keep)}
    if isinstance(types, list):
        small["layer_types"] = types[:keep]
    return small, total, REPEATABLE[mtype], period


def hf_model(
    config: str | Path | Mapping[str, Any] | Any, *, dtype: str | None = None,
    attn_implementation: str = "eager",
) -> tuple[Any, Any, str]:  # fmt: skip
    """(model on the meta device, its transformers config, where the config came from)."""
    try:
        import torch
        import transformers
    except ImportError:
        raise TorchImportError(
            "from_hf needs transformers and torch: install the 'hf' extra (pip install "
            "'parallel-explorer[hf]'); without them explorer.models.from_hf_config reads "
            "GPT-2, BERT, LLaMA, Mistral and Mixtral configs"
        ) from None
    cfg, where = _config(config, transformers)
    dt = _dtype_of(cfg, dtype)
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    cls = _model_class(cfg, transformers)
    try:
        with torch.device("meta"):
            model = cls._from_config(cfg, attn_implementation=attn_implementation, dtype=tdt)
    except Exception as e:  # transformers raises many kinds for configs it cannot build
        raise TorchImportError(
            f"{where or 'config'}: transformers could not build {cls.__name__} from this config "
            f"({type(e).__name__}: {str(e)[:300]}); check the config's fields"
        ) from None
    return model, cfg, where


def _config(config: Any, transformers: Any) -> tuple[Any, str]:
    if isinstance(config, transformers.PretrainedConfig):
        return config, getattr(config, "_name_or_path", "") or config.model_type
    raw, where, _folder = read_hf_config(config, TorchImportError)
    where = "" if isinstance(config, Mapping) else where
    mtype = raw.get("model_type")
    mapping = transformers.CONFIG_MAPPING
    if not isinstance(mtype, str) or mtype not in mapping:
        if mtype is None:
            raise TorchImportError(
                f"{where or 'config'}: no model_type field; a Hugging Face config.json names "
                'its architecture there (e.g. "model_type": "llama"): add it'
            )
        raise TorchImportError(
            f"{where or 'config'}: model_type {mtype!r} is not a transformers "
            f"{transformers.__version__} model type; known types include "
            f"{', '.join(sorted(mapping.keys())[:40])}, ..."
        )
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        cfg = mapping[mtype].from_dict(fields)
    except Exception as e:
        raise TorchImportError(
            f"{where or 'config'}: transformers refused this {mtype} config "
            f"({type(e).__name__}: {str(e)[:300]})"
        ) from None
    if where:
        where_name = Path(where).resolve().parent.name
        cfg._name_or_path = raw.get("_name_or_path") or where_name
    return cfg, where


def _model_class(cfg: Any, transformers: Any) -> Any:
    for arch in getattr(cfg, "architectures", None) or ():
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        mapping = auto._model_mapping
        if type(cfg) in mapping:
            return mapping[type(cfg)]
    raise TorchImportError(
        f"model_type {cfg.model_type!r} has no causal-LM or base model class in transformers "
        f"{transformers.__version__}; pass a config with 'architectures'"
    )


def _dtype_of(cfg: Any, dtype: str | None) -> str:
    if dtype is not None:
        dt = DType.parse(dtype).value
    else:
        raw = next((getattr(cfg, f, None) for f in _DTYPE_FIELDS if getattr(cfg, f, None)), None)
        dt = _TORCH_DTYPES.get(str(raw).replace("torch.", ""), "bf16") if raw else "bf16"
    if dt not in ("fp32", "bf16", "fp16"):
        raise TorchImportError(f"dtype={dt!r}; from_hf builds models in fp32, bf16 or fp16")
    return dt


def _takes(model: Any, arg: str) -> bool:
    import inspect

    try:
        return arg in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def with_ignored(graph: TracedGraph, ignored: tuple[str, ...]) -> TracedGraph:
    """The same graph with ``ignored`` config fields listed on its report."""
    report = dataclasses.replace(graph.report, ignored_fields=ignored)
    return TracedGraph(graph.nodes, graph.outputs, graph.name, report=report)
