"""The model zoo: ``load(name)`` from ``datasets/models`` and ``from_hf_config(path)``."""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any

from ..jsonfile import as_path, read_json
from .config import ModelConfig, ModelConfigError
from .hf_config import from_hf_config, kind_of

__all__ = ["load", "load_file", "names", "from_hf_config", "datasets_dir"]


def datasets_dir() -> Path:
    """``datasets/`` of this checkout, or ``$EXPLORER_DATASETS`` when set."""
    env = os.environ.get("EXPLORER_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "datasets"


def _models_dir() -> Path:
    return datasets_dir() / "models"


# The architectures that published training runs use (``datasets/published/*.csv``: today's
# stacks' Llama 3.1, Nemotron, Qwen3, GPT-OSS, DeepSeek-V3 and Kimi K2 rows) live in
# ``datasets/models/runs/``: `load` finds them by name like any zoo model, but `names()` lists
# the curated zoo only, whose every model the golden tests pin (built graph, tensor-parallel
# candidates, the torch export); ``names(runs=True)`` lists both.
def _runs_dir() -> Path:
    return _models_dir() / "runs"


def names(runs: bool = False) -> tuple[str, ...]:
    """Every model in the zoo, sorted; with ``runs``, also the models of the published
    training runs (``datasets/models/runs/``).

    >>> "qwen3-235b-a22b" in names(runs=True), "qwen3-235b-a22b" in names()
    (True, False)
    """
    found = [p.stem for p in _models_dir().glob("*.json")]
    if runs:
        found += [p.stem for p in _runs_dir().glob("*.json")]
    return tuple(sorted(found))


def load(name: str | ModelConfig) -> ModelConfig:
    """The zoo's config for ``name``, or a model file when ``name`` is a path.

    A name with a folder in it or ending in ``.json`` is a file path (read by `load_file`,
    relative to the working directory); any other name is looked up in the zoo, and an
    unknown one lists the close matches. So ``load("dir/x.json")`` reads that file and
    ``load("/abs/stem")`` is refused rather than read as ``/abs/stem.json``.

    >>> load("llama2-7b").num_layers
    32
    """
    if isinstance(name, ModelConfig):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ModelConfigError(
            f"model name {name!r} is not a zoo name or a file path; give one of: "
            f"{', '.join(names())}"
        )
    if name.endswith(".json") or "/" in name or os.sep in name:
        if not name.endswith(".json"):
            raise ModelConfigError(
                f"model {name!r} is a path but not a .json file; give the model file's "
                f"full name (e.g. {name}.json) or a zoo name"
            )
        return load_file(name)
    path = _models_dir() / f"{name}.json"
    if not path.is_file():
        path = _runs_dir() / f"{name}.json"
    if not path.is_file():
        close = difflib.get_close_matches(name, names(runs=True), n=4, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ModelConfigError(
            f"unknown model {name!r}.{hint} Known models: {', '.join(names(runs=True))} "
            "(or give a path to a model .json file)"
        )
    return load_file(path)


_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
_REQUIRED = ("name", "arch", "hidden_size", "num_layers")
_PUBLISHED = {"params", "text", "source", "tolerance", "note"}


def load_file(path: str | Path) -> ModelConfig:
    """Read and validate one model JSON file; errors name the file and the field."""
    path = as_path(path, ModelConfigError, "model file")
    raw = read_json(path, ModelConfigError, "model file")
    if not isinstance(raw, dict):
        raise ModelConfigError(
            f"{path}: the top level is {kind_of(raw)}; expected a JSON object of model fields"
        )
    return _from_dict(raw, str(path))


def _from_dict(raw: dict[str, Any], where: str) -> ModelConfig:
    raw = {k: v for k, v in raw.items() if not k.startswith("_")}
    published = raw.pop("published", None)
    if published is not None:
        if not isinstance(published, dict) or "params" not in published:
            raise ModelConfigError(
                f"{where}: field 'published' must be an object with 'params', 'text', 'source'"
            )
        extra = sorted(set(published) - _PUBLISHED)
        if extra:
            raise ModelConfigError(
                f"{where}: unknown field 'published.{extra[0]}'; 'published' holds only "
                f"{', '.join(sorted(_PUBLISHED))}"
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
    try:
        return ModelConfig(**raw)
    except ModelConfigError as e:
        raise ModelConfigError(f"{where}: {e}") from None
