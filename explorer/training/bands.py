"""Prediction bands: how far a measured step is expected to land from the step model's
prediction, from the residuals of published runs kept for checking.

A band is the 10th to 90th percentile of ``measured / predicted`` over the ``check`` rows of
``datasets/published/`` (never the ``fit`` rows: a band measured on the rows a default was
fitted on would be too narrow) that ran on the same stack and the same chip family. Where a
stack and family have fewer than `MIN_ROWS` check rows, the stack's rows on every chip are
used; where the stack has too few, all check rows, with the band widened by `WIDEN` on each
side (in log space) and its basis saying so. ``bench/accuracy.py`` measures the residuals and
writes ``datasets/published/prediction_bands.json`` (`write_bands`); `band` reads it.

>>> b = PredictionBand(0.9, 1.2, 10, "10 check rows of megatron-core on hopper")
>>> b.around(2.0)
(1.8, 2.4)
>>> str(b)
'x0.90-x1.20 (10 check rows of megatron-core on hopper)'
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..hardware import Cluster, resolve
from ..models import datasets_dir
from . import stacks
from .errors import TrainingError
from .params import TrainingParams

__all__ = [
    "PredictionBand",
    "Residual",
    "MIN_ROWS",
    "WIDEN",
    "LOW_PERCENTILE",
    "HIGH_PERCENTILE",
    "chip_family",
    "band",
    "bands_table",
    "write_bands",
    "bands_path",
    "stack_of",
]

MIN_ROWS = 5  # check rows a (stack, family) band needs of its own
WIDEN = 1.5  # log-space widening of the pooled band used where a stack has too few rows
LOW_PERCENTILE, HIGH_PERCENTILE = 10.0, 90.0
ANY = "*"


@dataclass(frozen=True)
class PredictionBand:
    """``measured / predicted`` expected between ``low`` and ``high`` (the 10th and 90th
    percentile of the check rows in ``basis``; ``rows`` of them)."""

    low: float
    high: float
    rows: int
    basis: str

    def around(self, predicted: float) -> tuple[float, float]:
        """The range a measurement of ``predicted`` is expected in."""
        return predicted * self.low, predicted * self.high

    def as_dict(self) -> dict[str, object]:
        return {"low": self.low, "high": self.high, "rows": self.rows, "basis": self.basis}

    def __str__(self) -> str:
        return f"x{self.low:.2f}-x{self.high:.2f} ({self.basis})"


@dataclass(frozen=True)
class Residual:
    """One check row: its stack, hardware profile name and ``measured / predicted`` of the
    step time and (where the source published it) of the peak memory."""

    stack: str
    hardware: str
    step_ratio: float
    memory_ratio: float | None = None


def chip_family(hardware: str | Cluster) -> str:
    """The chip generation a hardware profile belongs to (``ampere``, ``hopper``,
    ``blackwell``, ``cdna3``, ``tpu-v5``, ``ascend``; otherwise the chip's own name):
    residuals pool within a family, as one kernel library and one efficiency hold there.

    >>> chip_family("h100-sxm"), chip_family("a100-80g")
    ('hopper', 'ampere')
    """
    name = (hardware if isinstance(hardware, Cluster) else resolve(hardware)).chip.name.upper()
    for family, marks in _FAMILIES:
        if any(m in name for m in marks):
            return family
    return name.lower()


_FAMILIES = (
    ("blackwell", ("B200", "B100", "GB200", "B300")),
    ("hopper", ("H100", "H200", "H800", "H20")),
    ("ampere", ("A100", "A800", "A40", "A30")),
    ("volta", ("V100",)),
    ("cdna3", ("MI300", "MI325")),
    ("tpu-v5", ("TPU V5",)),
    ("ascend", ("ASCEND", "910")),
)


#: Fields a run sets on top of its stack's preset that do not make it another stack: the
#: precision it trains in (FP8 runs are in the bands' rows of their stack).
RUN_FIELDS = ("precision", "fp8_weight_gather")


def stack_of(params: TrainingParams) -> str | None:
    """The name of the stack preset ``params`` are (``stacks.params(name)`` equal to them,
    up to `RUN_FIELDS`), or None for hand-set params: a run's band is its stack's when it
    ran a preset. Remembered per params (every estimate of a plan search asks)."""
    last = _LAST_STACK_OF
    if last is not None and last[0] is params:  # a plan's ~1,000 estimates share one params
        return last[1]
    try:
        hash(params)
    except TypeError:
        return None
    with _LOCK:
        if params in _STACK_OF:
            return _remember_last(params, _STACK_OF[params])
    own = _without_run_fields(params)
    # presets may coincide (megatron-lm-2021 and deepspeed are TrainingParams()): the
    # default stack, then the 2021 one, then the catalog order
    order = dict.fromkeys((stacks.DEFAULT_STACK, "megatron-lm-2021", *stacks.names()))
    name = next((n for n in order if n in stacks.names()
                 and _without_run_fields(stacks.params(n)) == own), None)  # fmt: skip
    with _LOCK:
        _STACK_OF[params] = name
        if len(_STACK_OF) > 256:
            _STACK_OF.pop(next(iter(_STACK_OF)))
    return _remember_last(params, name)


def _remember_last(params: TrainingParams, name: str | None) -> str | None:
    # comparing the params field by field (hashing them) took 9 us of each estimate
    global _LAST_STACK_OF
    _LAST_STACK_OF = (params, name)
    return name


def _without_run_fields(params: TrainingParams) -> TrainingParams:
    base = TrainingParams()
    return dataclasses.replace(params, **{f: getattr(base, f) for f in RUN_FIELDS})


_STACK_OF: dict = {}
_LAST_STACK_OF: tuple[TrainingParams, str | None] | None = None


def bands_path() -> Path:
    return datasets_dir() / "published" / "prediction_bands.json"


def _percentiles(ratios: list[float]) -> tuple[float, float]:
    a = np.asarray(ratios, dtype=float)
    return float(np.percentile(a, LOW_PERCENTILE)), float(np.percentile(a, HIGH_PERCENTILE))


def _entries(pairs: Iterable[tuple[str, str, float]]) -> dict[str, dict[str, object]]:
    """``stack|family`` -> {rows, low, high} for every group, every stack (``stack|*``) and
    all rows (``*|*``)."""
    groups: dict[str, list[float]] = {}
    for stack, family, r in pairs:
        for key in (f"{stack}|{family}", f"{stack}|{ANY}", f"{ANY}|{ANY}"):
            groups.setdefault(key, []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        lo, hi = _percentiles(rs)
        out[key] = {"rows": len(rs), "low": lo, "high": hi}
    return out


def bands_table(residuals: Iterable[Residual]) -> dict[str, object]:
    """The bands of ``residuals`` (check rows only) as `write_bands` stores them."""
    rs = list(residuals)
    for r in rs:
        for name, v in (("step_ratio", r.step_ratio), ("memory_ratio", r.memory_ratio)):
            if v is not None and not (isinstance(v, float | int) and math.isfinite(v) and v > 0):
                raise TrainingError(
                    f"Residual.{name}={v!r} for {r.stack} on {r.hardware}; expected a finite "
                    "ratio > 0 (measured / predicted)"
                )
    fam = {h: chip_family(h) for h in {r.hardware for r in rs}}
    return {
        "percentiles": [LOW_PERCENTILE, HIGH_PERCENTILE],
        "min_rows": MIN_ROWS,
        "widen": WIDEN,
        "step_time": _entries((r.stack, fam[r.hardware], r.step_ratio) for r in rs),
        "memory": _entries(
            (r.stack, fam[r.hardware], r.memory_ratio) for r in rs if r.memory_ratio is not None
        ),
    }


def write_bands(residuals: Iterable[Residual], source: str, path: Path | None = None) -> Path:
    """Store the bands of ``residuals`` (the check rows' residuals, measured by ``source``,
    e.g. ``"bench/accuracy.py at <commit>"``) for `band`."""
    table = bands_table(residuals)
    table["source"] = source
    path = path or bands_path()
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    with _LOCK:
        _CACHE.clear()
        _BANDS.clear()
    return path


_LOCK = threading.Lock()
_CACHE: dict[Path, dict] = {}
#: `band` by its arguments: every estimate of a plan search asks for two, and reading the
#: table took 8 us each (cleared with the tables by `write_bands`)
_BANDS: dict[tuple, PredictionBand | None] = {}


def _table(path: Path) -> dict | None:
    with _LOCK:
        if path not in _CACHE:
            try:
                _CACHE[path] = json.loads(path.read_text())
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as e:
                raise TrainingError(
                    f"{path}: the prediction bands cannot be read ({e}); rerun "
                    "bench/accuracy.py to write them again"
                ) from e
        return _CACHE[path]


def band(
    stack: str | None, hardware: str | Cluster, quantity: str = "step_time",
    path: Path | None = None,
) -> PredictionBand | None:  # fmt: skip
    """The band of ``quantity`` (``"step_time"`` or ``"memory"``) for runs of ``stack`` on
    ``hardware``; None where no check rows were measured at all (no bands file). A
    ``stack`` of None (hand-set `TrainingParams`) uses the band of all check rows, widened.
    """
    if path is None:  # bands_path() follows $EXPLORER_DATASETS: not memoized
        return _band(stack, hardware, quantity, path)
    key = (stack, hardware, quantity, path)
    found = _BANDS.get(key, _MISSING)
    if found is not _MISSING:
        return found
    result = _band(stack, hardware, quantity, path)
    with _LOCK:
        if len(_BANDS) > 256:
            _BANDS.clear()
        _BANDS[key] = result
    return result


_MISSING = object()


def _band(
    stack: str | None, hardware: str | Cluster, quantity: str, path: Path | None
) -> PredictionBand | None:
    if quantity not in ("step_time", "memory"):
        raise TrainingError(f"band quantity={quantity!r}; expected 'step_time' or 'memory'")
    table = _table(path or bands_path())
    if table is None or not table.get(quantity):
        return None
    entries: dict = table[quantity]
    family = chip_family(hardware)
    what = "step times" if quantity == "step_time" else "peak memories"
    min_rows = int(table.get("min_rows", MIN_ROWS))
    if stack is not None:
        for key, basis in (
            (f"{stack}|{family}", f"{{n}} check rows of {stack} on {family}; {what}"),
            (f"{stack}|{ANY}", f"{{n}} check rows of {stack} on every chip ({family}: fewer "
                               f"than {min_rows}); {what}"),
        ):  # fmt: skip
            e = entries.get(key)
            if e and e["rows"] >= min_rows:
                return PredictionBand(e["low"], e["high"], e["rows"], basis.format(n=e["rows"]))
    e = entries.get(f"{ANY}|{ANY}")
    if not e:
        return None
    w = float(table.get("widen", WIDEN))
    lo, hi = math.exp(math.log(e["low"]) * w), math.exp(math.log(e["high"]) * w)
    who = "hand-set TrainingParams" if stack is None else f"{stack} (too few of its own)"
    return PredictionBand(
        min(lo, e["low"]), max(hi, e["high"]), e["rows"],
        f"{e['rows']} check rows of every stack, widened x{w:g} in log space, for {who}; "
        f"{what}",
    )  # fmt: skip
