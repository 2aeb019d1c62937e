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

from ..errors import CalibrationError
from ..params import TrainingParams
from .measured import MeasuredRun

__all__ = ["params_to_dict", "params_from_dict", "calibration_to_json", "calibration_from_json"]

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


def calibration_from_json(text: str, cls, row_cls):
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise CalibrationError(
            f"a calibration file is not JSON ({e}); expected to_json()"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CalibrationError(
            f"not a calibration file (format {doc.get('format') if isinstance(doc, dict) else doc!r}); "
            "expected the output of Calibration.to_json()"
        )
    if doc.get("version") != VERSION:
        raise CalibrationError(
            f"calibration file version {doc.get('version')!r}; this version reads {VERSION}"
        )
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
    except (KeyError, TypeError) as e:
        raise CalibrationError(
            f"calibration file misses or mistypes {e}; expected to_json()"
        ) from None
