"""The Chrome trace-event JSON format (opens in Perfetto; PyTorch profiler traces import
too): ``to_chrome``/``from_chrome``, ``save_chrome``/``load_chrome``, and
``comparison_to_chrome`` (an eager run, a static run and the compilation as three processes
with flows between them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..checks import is_int
from .comparison import Comparison, flows
from .events import EventKind, Trace, TraceError, TraceEvent

__all__ = ["to_chrome", "from_chrome", "save_chrome", "load_chrome", "comparison_to_chrome"]


# --- Chrome trace-event JSON --------------------------------------------------------------

_PID = {"op": 1, "kernel": 2}


def to_chrome(trace: Trace) -> dict[str, Any]:
    """The Chrome trace-event JSON object (``ph: "X"`` complete events; opens in Perfetto)."""
    evs = []
    for e in trace.events:
        args: dict[str, Any] = {"flops": e.flops, "bytes_allocated": e.bytes_allocated}
        if e.shapes:
            args["shapes"] = [list(s) for s in e.shapes]
        if e.replaced:
            args["replaced"] = list(e.replaced)
        if e.live_bytes >= 0:
            args["live_bytes"] = e.live_bytes
        if e.detail:
            args["detail"] = e.detail
        evs.append({"name": e.name, "cat": e.kind, "ph": "X", "ts": e.start_us,
                    "dur": e.dur_us, "pid": _PID.get(e.kind, 0), "tid": 0, "args": args})  # fmt: skip
    return {"traceEvents": evs, "displayTimeUnit": "ms", "otherData": {"name": trace.name,
            "wall_us": trace.wall_us}}  # fmt: skip


def _kind_of(cat: str) -> EventKind:
    cat = (cat or "").lower()
    known = ("op", "kernel", "compile", "recompile", "bind", "graph_break", "cache_hit", "note")
    if cat in known:
        return cat  # type: ignore[return-value]
    if cat in ("cpu_op", "operator", "user_annotation"):
        return "op"
    if "kernel" in cat or cat in ("gpu_memcpy", "gpu_memset"):
        return "kernel"
    return "python"


def from_chrome(
    data: dict[str, Any] | list, name: str | None = None, where: str = "trace"
) -> Trace:
    """Read a Chrome trace (ours, or a PyTorch profiler ``export_chrome_trace`` file).

    Complete events (``ph: "X"``) and begin/end pairs (``B``/``E``) are read; PyTorch's
    ``cpu_op`` become ``op`` events with their ``Input Dims`` as shapes, GPU kernels
    become ``kernel`` events, Python function events become ``python`` events. Other phases
    (metadata, flows, counters) are skipped.

    Every time must be a finite number and every duration >= 0; a malformed trace raises
    ``TraceError`` naming ``where`` (the file), the event index and the field.
    """
    if isinstance(data, dict):
        if "traceEvents" not in data:
            raise TraceError(f"{where}: no 'traceEvents' key (keys: {sorted(map(str, data))[:8]}); "
                             "a Chrome trace is an object with a 'traceEvents' list")  # fmt: skip
        raw, other = data["traceEvents"], data.get("otherData", {})
        if not isinstance(other, dict):
            raise TraceError(f"{where}: 'otherData' is {type(other).__name__}; expected an object")
    else:
        raw, other = data, {}
    if not isinstance(raw, list):
        raise TraceError(f"{where}: the events are {type(raw).__name__}; a Chrome trace is a list "
                         "of events or an object with a 'traceEvents' list")  # fmt: skip
    out: list[TraceEvent] = []
    open_: dict[tuple, list[tuple[int, dict]]] = {}
    for i, ev in enumerate(raw):
        at = f"{where}: event {i}"
        if not isinstance(ev, dict):
            raise TraceError(f"{at} is {type(ev).__name__} ({_short(ev)}); expected an object")
        ph = ev.get("ph")
        if ph == "B":
            _time(ev, "ts", at)
            key = (_key(ev.get("pid")), _key(ev.get("tid")), _key(ev.get("name")))
            open_.setdefault(key, []).append((i, ev))
            continue
        if ph == "E":
            end = _time(ev, "ts", at)
            key = (_key(ev.get("pid")), _key(ev.get("tid")), _key(ev.get("name")))
            stack = open_.get(key)
            if not stack:
                continue
            j, b = stack.pop()
            dur = end - _time(b, "ts", f"{where}: event {j}")
            if dur < 0:
                raise TraceError(f"{at}: 'E' at ts={end} ends before its 'B' (event {j}) at "
                                 f"ts={end - dur}; check the file's event order")  # fmt: skip
            ev, at = dict(b, dur=dur), f"{where}: events {j}-{i}"
        elif ph != "X":
            continue
        out.append(_event(ev, at))
    out.sort(key=lambda e: e.start_us)
    label = other.get("name", "imported") if name is None else name
    wall = _time(other, "wall_us", f"{where}: otherData", default=0.0)
    if wall < 0:
        raise TraceError(f"{where}: otherData wall_us={wall}; expected a time >= 0 in us")
    return Trace(tuple(out), str(label), wall)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _key(v: Any) -> Any:
    return v if isinstance(v, str | int | float | bool | None) else repr(v)


def _time(ev: dict, field_: str, at: str, default: float | None = None) -> float:
    """``ev[field_]`` as a finite float (numbers or numeric strings, as some exporters write)."""
    if field_ not in ev and default is not None:
        return default
    v = ev.get(field_)
    ok = isinstance(v, int | float | str) and not isinstance(v, bool)
    try:
        x = float(v) if ok else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        raise TraceError(f"{at}: {field_}={_short(v)}; expected a finite number of microseconds")
    return x


def _count(args: dict, field_: str, at: str, default: int, low: int) -> int:
    v = args.get(field_, default)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if not is_int(v, minimum=low):
        raise TraceError(f"{at}: args.{field_}={_short(v)}; expected a whole number >= {low}")
    return v


def _shapes(args: dict, at: str) -> tuple[tuple[int, ...], ...]:
    key = "shapes" if "shapes" in args else "Input Dims"
    shapes = args.get(key) or ()
    if not isinstance(shapes, list | tuple):
        raise TraceError(f"{at}: args.{key}={_short(shapes)}; expected a list of shapes")
    out = []
    for s in shapes:
        if isinstance(s, list | tuple) and any(isinstance(d, list | tuple) for d in s):
            continue  # a tensor list's dims (PyTorch): no single shape
        good = isinstance(s, list | tuple) and all(is_int(d, minimum=0) for d in s)
        if not good:
            raise TraceError(f"{at}: args.{key} holds {_short(s)}; expected a list of "
                             "whole numbers >= 0 per shape")  # fmt: skip
        out.append(tuple(s))
    return tuple(out)


def _event(ev: dict, at: str) -> TraceEvent:
    start = _time(ev, "ts", at, default=0.0)
    dur = _time(ev, "dur", at, default=0.0)
    if dur < 0:
        raise TraceError(f"{at}: dur={dur}; a duration must be >= 0 microseconds")
    args = ev.get("args")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise TraceError(f"{at}: args={_short(args)}; expected an object")
    replaced = args.get("replaced", ())
    if not isinstance(replaced, list | tuple) or not all(isinstance(r, str) for r in replaced):
        raise TraceError(f"{at}: args.replaced={_short(replaced)}; expected a list of op names")
    cat = ev.get("cat", "")
    return TraceEvent(
        name=str(ev.get("name", "")), kind=_kind_of(cat if isinstance(cat, str) else ""),
        start_us=start, dur_us=dur, shapes=_shapes(args, at),
        bytes_allocated=_count(args, "bytes_allocated", at, 0, 0),
        flops=_count(args, "flops", at, 0, 0), live_bytes=_count(args, "live_bytes", at, -1, -1),
        replaced=tuple(replaced), detail=str(args.get("detail", "")),
    )  # fmt: skip


def save_chrome(trace: Trace, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(to_chrome(trace)))
    return path


def load_chrome(path: str | Path) -> Trace:
    """Read a Chrome trace file; a missing path, a directory, bytes that are not UTF-8,
    malformed or too deeply nested JSON and malformed events raise ``TraceError`` naming it."""
    if not isinstance(path, str | Path):
        raise TraceError(f"path={_short(path)}; expected a file path (str or pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path}: is a directory; expected a Chrome trace (a JSON file)")
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: cannot read the trace: no such file") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot read the trace ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: byte {err.start} is not UTF-8; a Chrome trace is UTF-8 "
                         "JSON text") from None  # fmt: skip
    try:
        data = json.loads(text)
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply to read; a Chrome trace nests a "
                         "few levels") from None  # fmt: skip
    except ValueError as err:
        raise TraceError(f"{path}: not valid JSON ({err}); check the file") from None
    return from_chrome(data, name=path.stem, where=str(path))


# --- one Chrome trace for a comparison ----------------------------------------------------

_PROCESSES = ((1, "eager run"), (2, "static run (@jit)"), (3, "compilation (first call)"))


def comparison_to_chrome(cmp: Comparison) -> dict[str, Any]:
    """The eager run, the static run and the compilation as three named processes, each
    from time 0, with a flow arrow (``ph: s``/``f``) from every eager op to the kernel that
    did its work. Open the file at ui.perfetto.dev (Open trace file)."""
    evs: list[dict[str, Any]] = []
    for pid, name in _PROCESSES:
        evs.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": name}})  # fmt: skip
        evs.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                    "args": {"sort_index": pid}})  # fmt: skip
    compiles = [e for e in cmp.static.events if e.kind in ("compile", "recompile")]
    groups = ((1, cmp.eager.compute_events), (2, cmp.static.compute_events), (3, compiles))
    for pid, events in groups:
        t0 = min((e.start_us for e in events), default=0.0)
        for e in events:
            one = to_chrome(Trace((e,), "one"))["traceEvents"][0]
            evs.append(dict(one, pid=pid, ts=e.start_us - t0))
    te = min((e.start_us for e in cmp.eager.compute_events), default=0.0)
    ts = min((e.start_us for e in cmp.static.compute_events), default=0.0)
    for i, f in enumerate(flows(cmp)):
        common = {"name": "absorbed by", "cat": "flow", "id": i + 1, "tid": 0}
        evs.append(dict(common, ph="s", pid=1, ts=f.eager.start_us - te + f.eager.dur_us / 2))
        evs.append(
            dict(common, ph="f", bp="e", pid=2, ts=f.kernel.start_us - ts + f.kernel.dur_us / 2)
        )
    return {"traceEvents": evs, "displayTimeUnit": "ms",
            "otherData": {"name": f"{cmp.eager.name} vs {cmp.static.name}"}}  # fmt: skip
