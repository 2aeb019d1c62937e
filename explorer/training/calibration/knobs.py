"""The knobs `calibrate` fits: float fields of `TrainingParams` named by path
(``"cost.compute_efficiency"``) or, when unambiguous, by their last part, their values,
and their search ranges (declared, default or given, checked against the values the
field accepts)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ...checks import is_number
from ...errors import ExplorerError
from ..errors import CalibrationError
from ..params import TrainingParams

__all__ = [
    "float_fields",
    "default_fit",
    "get_value",
    "with_values",
    "resolve_fit",
    "default_bounds",
    "fit_bounds",
    "EFFICIENCY_BOUNDS",
    "FRACTION_BOUNDS",
    "DECADE",
]

# Default search range for a knob in (0, 1] (an efficiency): a kernel or link reaching
# under 5% of its peak is not a calibration issue but a bug in the run.
EFFICIENCY_BOUNDS = (0.05, 1.0)
# Fractions and overlaps may be 0.
FRACTION_BOUNDS = (0.0, 1.0)
# Any other positive knob: a decade either side of its start.
DECADE = 10.0


def float_fields(params: TrainingParams | None = None) -> tuple[str, ...]:
    """Paths of every float field of ``params`` (nested dataclasses walked), in order.

    >>> "cost.compute_efficiency" in float_fields()
    True
    """
    params = params or TrainingParams()
    out: list[str] = []
    stack = [("", params)]
    while stack:
        prefix, obj = stack.pop(0)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            path = prefix + f.name
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                stack.append((path + ".", v))
            elif isinstance(v, float) and not isinstance(v, bool):
                out.append(path)
    return tuple(out)


def _is_efficiency(path: str) -> bool:
    return path.rsplit(".", 1)[-1].endswith("_efficiency")


def _is_fraction(path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    return leaf.endswith(("_fraction", "_overlap")) or "overlap" in leaf


def default_fit(params: TrainingParams | None = None) -> tuple[str, ...]:
    """The knobs `calibrate` considers when ``fit`` is not given: every float field with
    ``efficiency`` in its name (fractions of a peak: matmul, HBM, links, fused attention)
    or ``overlap`` (fractions of communication hidden behind compute): how close a
    cluster gets to the ideal. `calibrate` then keeps those that change the runs'
    predicted times."""
    keys = ("efficiency", "overlap")
    return tuple(p for p in float_fields(params) if any(k in p.rsplit(".", 1)[-1] for k in keys))


def get_value(params: TrainingParams, path: str) -> float:
    obj: object = params
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def with_values(params: TrainingParams, values: dict[str, float]) -> TrainingParams:
    """``params`` with the fields at the given paths replaced (nested dataclasses rebuilt,
    so each level validates its new value)."""

    def put(obj, parts, v):
        if len(parts) == 1:
            return dataclasses.replace(obj, **{parts[0]: v})
        child = getattr(obj, parts[0])
        return dataclasses.replace(obj, **{parts[0]: put(child, parts[1:], v)})

    for path, v in values.items():
        params = put(params, path.split("."), float(v))
    return params


def resolve_fit(fit: Sequence[str] | None, params: TrainingParams) -> tuple[str, ...]:
    """Full paths of the requested knobs; raises `CalibrationError` naming an unknown or
    ambiguous one and listing the float fields there are."""
    if fit is None:
        names = default_fit(params)
        if not names:
            raise CalibrationError(
                "TrainingParams has no *_efficiency field to fit by default; name the "
                f"fields to fit with fit=(...), among {', '.join(float_fields(params))}"
            )
        return names
    if isinstance(fit, str) or not isinstance(fit, Sequence) or not fit:
        raise CalibrationError(
            f"fit={fit!r}; expected a non-empty tuple of TrainingParams field names, e.g. "
            "('compute_efficiency', 'bandwidth_efficiency')"
        )
    known = float_fields(params)
    out = []
    for name in fit:
        if not isinstance(name, str):
            raise CalibrationError(f"fit entry {name!r} is not a field name (a str)")
        hits = [p for p in known if p == name or p.rsplit(".", 1)[-1] == name]
        if len(hits) != 1:
            why = "is ambiguous" if hits else "is not a float field of TrainingParams"
            raise CalibrationError(f"fit name {name!r} {why}; expected one of {', '.join(known)}")
        if hits[0] in out:
            raise CalibrationError(f"fit names {hits[0]!r} twice; name each field once")
        out.append(hits[0])
    return tuple(out)


def _field(params: TrainingParams, path: str) -> dataclasses.Field:
    obj: object = params
    parts = path.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    return next(f for f in dataclasses.fields(obj) if f.name == parts[-1])


def default_bounds(path: str, start: float, params: TrainingParams | None = None):
    """The search range of a knob when ``bounds`` does not give one: the field's own
    declared range (``kernels.knob`` metadata) when it has one, with efficiencies kept
    at or above 5%; else (0.05, 1) for an efficiency, (0, 1) for a fraction or overlap,
    a decade either side of a positive start."""
    declared = None
    if params is not None:
        declared = _field(params, path).metadata.get("range")
    if declared is not None:
        lo, hi = (float(x) for x in declared)
        if "efficiency" in path.rsplit(".", 1)[-1]:
            lo = max(lo, EFFICIENCY_BOUNDS[0])
        return (lo, hi)
    if _is_efficiency(path):
        return EFFICIENCY_BOUNDS
    if _is_fraction(path):
        return FRACTION_BOUNDS
    if start > 0:
        return (start / DECADE, start * DECADE)
    raise CalibrationError(
        f"{path} starts at {start!r}, so it has no natural scale; give its range with "
        f"bounds={{'{path}': (low, high)}}"
    )


def fit_bounds(names, bounds, params) -> list[tuple[float, float]]:
    """The range of each fitted knob: ``bounds``'s (checked: a range of valid values, for a
    fitted knob) or `default_bounds`."""
    if bounds is not None and not isinstance(bounds, Mapping):
        raise CalibrationError(
            f"bounds={bounds!r}; expected a dict {{field name: (low, high)}} or None"
        )
    given = dict(bounds or {})
    full: dict[str, tuple[float, float]] = {}
    for key, b in given.items():
        (path,) = resolve_fit((key,), params)
        ok = isinstance(b, (tuple, list)) and len(b) == 2
        if not (ok and all(is_number(x) for x in b)) or not b[0] < b[1]:
            raise CalibrationError(
                f"bounds[{key!r}]={b!r}; expected (low, high) with finite low < high"
            )
        if path not in names:
            raise CalibrationError(
                f"bounds name {key!r} but it is not fitted ({', '.join(names)}); add it to "
                "fit or drop its bounds"
            )
        full[path] = (float(b[0]), float(b[1]))
        _check_range(key, path, full[path], params)
    return [full.get(n) or default_bounds(n, get_value(params, n), params) for n in names]


def _check_range(key: str, path: str, bounds: tuple[float, float], params) -> None:
    """Both ends of a given range must be values the field accepts (an efficiency in
    (0, 1], a fraction in [0, 1], a knob's declared range)."""
    declared = _field(params, path).metadata.get("range")
    for end in bounds:
        try:
            with_values(params, {path: end})
        except ExplorerError as e:
            what = f" (declared range {tuple(declared)})" if declared is not None else ""
            raise CalibrationError(
                f"bounds[{key!r}]={bounds!r}: {path}={end!r} is not a valid value{what}: {e}; "
                "give bounds inside the field's valid range"
            ) from None
