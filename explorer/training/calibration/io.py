"""JSON for `Calibration`: the fitted `TrainingParams`, the fit and its table.

`TrainingParams` is written field by field (nested dataclasses as objects, tuples as
lists) and read back against the fields of a default `TrainingParams`, so a file from a
version with fewer knobs loads with the defaults for the new ones, and an unknown key is
refused with its name.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from ...checks import is_number
from ...jsonfile import as_path, read_json
from ..errors import CalibrationError
from ..params import TrainingParams
from .knobs import float_fields
from .measured import MeasuredRun

__all__ = [
    "params_to_dict", "params_from_dict", "calibration_to_json", "calibration_from_json",
    "read_calibration", "write_calibration",
]  # fmt: skip

FORMAT = "parallel-explorer calibration"
VERSION = 1


def params_to_dict(params: object) -> dict[str, object]:
    """A dataclass (e.g. `TrainingParams`) as plain JSON values."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            out[f.name] = params_to_dict(v)
        elif isinstance(v, tuple):
            out[f.name] = list(v)
        elif isinstance(v, float) and math.isinf(v):
            out[f.name] = "inf"
        else:
            out[f.name] = v
    return out


def params_from_dict(d: dict, template: object | None = None) -> object:
    """Inverse of `params_to_dict`, typed by ``template`` (default `TrainingParams()`)."""
    template = TrainingParams() if template is None else template
    if not isinstance(d, dict):
        raise CalibrationError(
            f"{type(template).__name__} record {d!r} is not an object; expected the output "
            "of params_to_dict"
        )
    names = {f.name for f in dataclasses.fields(template)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise CalibrationError(
            f"{type(template).__name__} has no field {unknown[0]!r}; expected among "
            f"{', '.join(sorted(names))}"
        )
    changes = {}
    for k, v in d.items():
        cur = getattr(template, k)
        if dataclasses.is_dataclass(cur) and not isinstance(cur, type):
            v = params_from_dict(v, cur)
        elif isinstance(cur, tuple):
            v = tuple(v)
        elif v == "inf":
            v = math.inf
        changes[k] = v
    return dataclasses.replace(template, **changes)


def calibration_to_json(cal) -> str:
    doc = {
        "format": FORMAT, "version": VERSION, "evaluator": cal.evaluator,
        "params": params_to_dict(cal.params), "base": params_to_dict(cal.base),
        "fit": list(cal.fit), "start": list(cal.start), "values": list(cal.values),
        "bounds": [list(b) for b in cal.bounds], "loo_error": cal.loo_error,
        "rms_log_error": cal.rms_log_error, "evaluations": cal.evaluations,
        "seconds": cal.seconds, "table": [r.as_dict() for r in cal.table],
        "exact": cal.exact, "rounds": cal.rounds, "redecided": list(cal.redecided),
        "retime_gap": cal.retime_gap,
    }  # fmt: skip
    return json.dumps(doc, indent=1)


def write_calibration(cal, path: Any) -> None:
    """Write ``cal.to_json()`` to ``path``; a path that cannot be written is named."""
    p = as_path(path, CalibrationError, "calibration")
    try:
        p.write_text(calibration_to_json(cal))
    except OSError as e:
        raise CalibrationError(
            f"cannot write the calibration to {p} ({e.strerror or e}); pass a writable file path"
        ) from None


def read_calibration(path: Any, cls, row_cls):
    """The calibration in ``path``, read by the project's JSON reader (a missing file, a
    directory, bytes that are not UTF-8, nesting too deep: each named) and checked."""
    doc = read_json(as_path(path, CalibrationError, "calibration"), CalibrationError,
                    "calibration file")  # fmt: skip
    return _calibration_from_doc(doc, cls, row_cls)


def calibration_from_json(text: str, cls, row_cls):
    if not isinstance(text, str | bytes):
        raise CalibrationError(
            f"Calibration.from_json takes the text of to_json(), not {type(text).__name__}"
        )
    try:
        doc = json.loads(text)
    except (TypeError, ValueError, RecursionError) as e:
        raise CalibrationError(
            f"a calibration file is not JSON ({str(e)[:200]}); expected to_json()"
        ) from None
    return _calibration_from_doc(doc, cls, row_cls)


def _finite(v: object, minimum: float | None = None, above: float | None = None) -> bool:
    return is_number(v, minimum=minimum, above=above, numpy=True)


def _check_doc(doc: dict) -> None:
    """What a later print or prediction would trip on: the fitted knobs by name, one value,
    start and bound per knob, finite numbers, the rows' roles and step times."""
    fit = doc.get("fit")
    known = set(float_fields())
    if not isinstance(fit, list) or not all(isinstance(f, str) for f in fit):
        raise CalibrationError(f"calibration file: fit={fit!r}; expected a list of knob names")
    unknown = [f for f in fit if f not in known]
    if unknown:
        raise CalibrationError(
            f"calibration file fits {unknown[0]!r}, which is not a float knob of "
            f"TrainingParams; expected among {', '.join(sorted(known))}"
        )
    for key in ("start", "values"):
        v = doc.get(key)
        if not isinstance(v, list) or len(v) != len(fit) or not all(_finite(x) for x in v):
            raise CalibrationError(
                f"calibration file: {key}={v!r}; expected {len(fit)} finite numbers, one per "
                "fitted knob"
            )
    bounds = doc.get("bounds")
    if not isinstance(bounds, list) or len(bounds) != len(fit) or not all(
        isinstance(b, list) and len(b) == 2 and _finite(b[0]) and _finite(b[1]) and b[0] <= b[1]
        for b in bounds
    ):  # fmt: skip
        raise CalibrationError(
            f"calibration file: bounds={bounds!r}; expected one [low, high] per fitted knob"
        )
    table = doc.get("table")
    if not isinstance(table, list):
        raise CalibrationError(f"calibration file: table={table!r}; expected a list of rows")
    for i, r in enumerate(table):
        if not isinstance(r, dict):
            raise CalibrationError(f"calibration file: table[{i}]={r!r}; expected an object")
        if r.get("role") not in ("fit", "check"):
            raise CalibrationError(
                f"calibration file: table[{i}] has role {r.get('role')!r}; expected 'fit' or "
                "'check'"
            )
        for key in ("measured_s", "before_s", "after_s"):
            if not _finite(r.get(key), above=0):
                raise CalibrationError(
                    f"calibration file: table[{i}].{key}={r.get(key)!r}; expected a finite "
                    "time > 0 in seconds"
                )
        if r.get("loo_s") is not None and not _finite(r["loo_s"], above=0):
            raise CalibrationError(
                f"calibration file: table[{i}].loo_s={r['loo_s']!r}; expected a time > 0 or null"
            )


def _calibration_from_doc(doc: Any, cls, row_cls):
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CalibrationError(
            f"not a calibration file (format {doc.get('format') if isinstance(doc, dict) else doc!r}); "
            "expected the output of Calibration.to_json()"
        )
    if doc.get("version") != VERSION:
        raise CalibrationError(
            f"calibration file version {doc.get('version')!r}; this version reads {VERSION}"
        )
    _check_doc(doc)
    try:
        rows = tuple(
            row_cls(
                MeasuredRun.from_dict(r["run"]),
                r["role"],
                r["measured_s"],
                r["before_s"],
                r["after_s"],
                r["loo_s"],
                r["fits_memory"],
                tuple(tuple(c) for c in r.get("categories", ())),
            )  # fmt: skip
            for r in doc["table"]
        )
        return cls(
            params=params_from_dict(doc["params"]), base=params_from_dict(doc["base"]),
            fit=tuple(doc["fit"]), start=tuple(doc["start"]), values=tuple(doc["values"]),
            bounds=tuple(tuple(b) for b in doc["bounds"]), table=rows,
            loo_error=doc["loo_error"], evaluator=doc["evaluator"],
            rms_log_error=doc["rms_log_error"], evaluations=doc["evaluations"],
            seconds=doc["seconds"],
            # files written before re-timing have none of these: the exact path's values
            exact=doc.get("exact", True), rounds=doc.get("rounds", 1),
            redecided=tuple(doc.get("redecided", ())), retime_gap=doc.get("retime_gap", 0.0),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise CalibrationError(
            f"calibration file misses or mistypes {e}; expected to_json()"
        ) from None
