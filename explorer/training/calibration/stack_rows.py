"""The cells of today's stack files: ``datasets/published/*.csv`` with `STACK_COLUMNS`
(torchtitan, Megatron-Core, NeMo, Megatron-Bridge, NeMo AutoModel and MaxText runs; the
columns and the fit/check rule are in ``datasets/published/README.md``).

Data, not code paths: `AC_MODES` (the source's words for activation checkpointing -> the
simulator's recomputation policy), `STACK_NAMES` (the stacks the files name; which preset
models each is `explorer.training.stacks`' table, used by `stack_params`).
`published.published_runs` turns
the rows into `MeasuredRun` values; the helpers here parse one cell each and raise
`CalibrationError` naming the file, the row (its line in the file) and the column.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import get_args

from ...errors import ExplorerError
from ...models import ModelConfig
from ..config import RecomputePolicy
from ..errors import CalibrationError
from ..params import TrainingParams

try:  # another room of training, written alongside this loader (issue 24)
    from .. import stacks as _STACKS
except ImportError:  # a version without stack presets predicts with the defaults
    _STACKS = None

__all__ = [
    "AC_MODES",
    "STACK_NAMES",
    "cell_int",
    "cell_float",
    "cell_choice",
    "parse_knobs",
    "recompute_of",
    "per_layer_count",
    "stack_params",
    "precision_supported",
    "with_precision",
]

# ``ac_mode`` in the source's words (the part before any parenthesis) -> the recomputation
# policy and why. ``not stated`` leaves it to the planner (as an empty ``recompute`` does).
AC_MODES: dict[str, tuple[RecomputePolicy | None, str]] = {
    "none": ("none", "no activation checkpointing"),
    "full": ("full", "every block checkpointed"),
    "selective": (
        "selective",
        "torchtitan's per-op selective checkpointing: 'selective', which recomputes what "
        "TrainingParams.selective_recompute says ('op' in the torchtitan preset: the matmul "
        "outputs torchtitan does not save; 'attention' elsewhere)",
    ),
    "selective-op": (
        "selective",
        "torchtitan's per-op selective checkpointing: 'selective', which recomputes what "
        "TrainingParams.selective_recompute says ('op' in the torchtitan preset: the matmul "
        "outputs torchtitan does not save; 'attention' elsewhere)",
    ),
    "selective-layer": (
        "per_layer",
        "full checkpointing of every second block (torchtitan's default "
        "selective_ac_option '2') read as 'per_layer' with half of each stage's layers",
    ),
    "custom": (
        "selective",
        "MaxText's remat_policy=custom: the tensors the row's remat_saved knob names are "
        "saved, the rest of the layer's forward recomputed ('selective' with "
        "selective_recompute='op' at stacks.named_remat_fractions of the layer)",
    ),
    "not stated": (None, "not published: the planner's choice within the row's layout"),
}

# The CSVs' ``stack`` column (datasets/published/README.md); `explorer.training.stacks`
# maps each to the preset that models it (``FRAMEWORK_STACKS``).
STACK_NAMES: tuple[str, ...] = (
    "torchtitan", "megatron-core", "nemo", "megatron-bridge", "nemo-automodel", "maxtext",
)  # fmt: skip


def _where(path: str, row: dict[str, str], key: str) -> str:
    return f"{path}, row {row.get('_line', '?')}, column {key!r}"


def cell_int(path: str, row: dict[str, str], key: str, minimum: int = 1) -> int | None:
    """The int in ``row[key]`` (None when empty); text that is not an int >= ``minimum``
    raises `CalibrationError` naming the file, row and column."""
    v = row[key].strip()
    if not v:
        return None
    try:
        n = int(v)
    except ValueError:
        n = None
    if n is None or n < minimum:
        raise CalibrationError(
            f"{_where(path, row, key)}: {v!r} is not an int >= {minimum}; write a whole "
            "number, or leave the cell empty when the source does not give it"
        )
    return n


def cell_float(path: str, row: dict[str, str], key: str) -> float | None:
    """The finite number > 0 in ``row[key]`` (None when empty), else `CalibrationError`."""
    v = row[key].strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise CalibrationError(
            f"{_where(path, row, key)}: {v!r} is not a finite number > 0; write the published "
            "value, or leave the cell empty"
        )
    return x


def cell_choice(path: str, row: dict[str, str], key: str, choices: tuple[str, ...]) -> str:
    """``row[key]`` when it is one of ``choices``, else `CalibrationError`."""
    v = row[key].strip()
    if v not in choices:
        raise CalibrationError(
            f"{_where(path, row, key)}: {v!r} is not one of {', '.join(map(repr, choices))}"
        )
    return v


def parse_knobs(path: str, row: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``knobs`` (``key=value; key=value``) as (key, value) pairs in the file's order."""
    out = []
    for part in row["knobs"].split(";"):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise CalibrationError(
                f"{_where(path, row, 'knobs')}: {part.strip()!r} is not key=value; write the "
                "stack's settings as 'key=value; key=value'"
            )
        out.append((key.strip(), value.strip()))
    return tuple(out)


def recompute_of(path: str, row: dict[str, str]) -> tuple[RecomputePolicy | None, str]:
    """(policy, why) of a row: its ``recompute`` cell when given, else its ``ac_mode``
    (`AC_MODES`); None when neither says. ``per_layer`` (torchtitan's every-second-block
    checkpointing) takes half of each stage's layers (`per_layer_count`)."""
    given = cell_choice(path, row, "recompute", ("", *get_args(RecomputePolicy)))
    if given:
        return given, "recompute as published"  # type: ignore[return-value]
    words = row["ac_mode"].strip().split(" (")[0].strip()
    if words not in AC_MODES:
        raise CalibrationError(
            f"{_where(path, row, 'ac_mode')}: {row['ac_mode']!r} is not a known activation "
            f"checkpointing mode; expected one of {', '.join(map(repr, AC_MODES))} (optionally "
            "followed by a parenthesis)"
        )
    policy, why = AC_MODES[words]
    return policy, f"ac_mode {row['ac_mode']!r}: {why}"


def per_layer_count(layers: int, pp: int) -> int:
    """Fully recomputed layers per stage when every second block is checkpointed."""
    return max(1, layers // pp // 2)


# ----- the stack presets and precision (explorer.training.stacks, when it exists) ----------
def stack_params(
    stack: str, dataset: str = "", precision: str = "bf16", knobs: tuple[tuple[str, str], ...] = (),
    cfg: ModelConfig | None = None, seq: int = 0,
) -> tuple[TrainingParams, str]:  # fmt: skip
    """The `TrainingParams` a row of ``stack`` is predicted with, and which ones: where
    `explorer.training.stacks` exists, its ``row_params`` (the preset that models the stack,
    with the row's precision and the switches its ``knobs`` name: async TP, FP8 all-gather,
    torch.compile); else the default `TrainingParams` (said so in the second value).

    >>> stack_params("torchtitan")[1].startswith(("stack preset", "default"))
    True
    """
    if stack not in STACK_NAMES:
        raise CalibrationError(
            f"stack={stack!r} is not a known stack; expected one of "
            f"{', '.join(map(repr, STACK_NAMES))} (datasets/published/README.md)"
        )
    module = _STACKS
    if module is None or not hasattr(module, "row_params"):
        return TrainingParams(), "default TrainingParams (no explorer.training.stacks yet)"
    text = "; ".join(f"{k}={v}" for k, v in knobs)
    try:
        params = module.row_params(dataset, stack, precision, text, cfg, seq)
    except ExplorerError as e:
        raise CalibrationError(f"stack={stack!r}, dataset={dataset!r}: {e}") from None
    preset = module.FRAMEWORK_STACKS.get(stack, "?")
    return params, f"stack preset {preset!r} (+ the row's precision and knobs)"


def precision_supported() -> bool:
    """Whether `TrainingParams` has a ``precision`` field (FP8 GEMMs as a training choice)."""
    return "precision" in {f.name for f in fields(TrainingParams)}


def with_precision(params: TrainingParams, precision: str) -> TrainingParams:
    """``params`` with the row's precision; BF16 leaves ``params`` as they are where no
    ``precision`` field exists, FP8 there raises (`published_runs` skips such rows)."""
    if precision_supported():
        return params.replace(precision=precision)
    if precision != "bf16":
        raise CalibrationError(
            f"precision={precision!r}: TrainingParams has no precision field in this version, "
            "so FP8 GEMMs cannot be modelled; predict BF16 runs only"
        )
    return params
