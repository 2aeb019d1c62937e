"""``load_kineto``: read PyTorch profiler (Kineto) Chrome-trace JSON, streamed.

A Kineto file is one JSON object: a header (``schemaVersion``, ``deviceProperties``,
``distributedInfo``) then ``traceEvents``, a list of events (``ph: "X"`` slices, ``"M"``
metadata, ``"s"``/``"f"`` flows, ``"i"`` instants), then a few trailing fields. It is read
once, incrementally (`explorer.traces.stream`: a chunk of text at a time, each event decoded
by the standard library's C decoder), so the file is never held whole. Only the slices the
analysis needs are kept: GPU kernels, copies and memsets, CPU ops and annotations, the step
markers, each appended to typed columns with its names, shapes and collective interned
(`explorer.traces.table`: 42 bytes a kernel and 25 an op on HTA's NCCL trace, where each
as a Python tuple took about 340, bench/traces.py); runtime launches keep only their correlation id and time, until each kernel has
its launch time.

Errors name the file and the event: malformed or truncated JSON (`TraceFormatError` with
the index of the last event read), a foreign file (no ``traceEvents``), an event without its
fields.

>>> import explorer as ex
>>> t = ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz"))
>>> r = t.ranks[0]
>>> r.rank, r.world_size, r.device, len(r.steps)
(0, 2, 'gpu', 3)
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from array import array
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..models import datasets_dir
from .classify import classify_name, collective_kind, dtype_name, nelems
from .errors import TraceFormatError, TracesError
from .events import Collective, KinetoTrace, ProcessGroup, RankTrace, Step
from .stream import StreamError, read_document
from .table import NONE_ID, ActivityColumns, LaunchTimes, ids64

__all__ = ["load_kineto", "load_rank", "vendored", "trace_files", "Progress"]

# progress(file, bytes read, bytes in the file, events read): called every PROGRESS_EVERY
# events and once at the end of each file.
Progress = Callable[[str, int, int, int], None]
PROGRESS_EVERY = 200_000

_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_CPU_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "cpu_instant_event"})
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"})
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NUM = (int, float)
_SHAPED = frozenset({"matmul", "attention", "norm", "communication"})
_COMM_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
              "Process Group Ranks", "Process Group Name")  # fmt: skip
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_SUFFIXES = (".json", ".json.gz")


def vendored(name: str = "") -> Path:
    """``datasets/traces/kineto/NAME``: the real traces vendored with the project
    (``datasets/traces/kineto/README.md`` names their source and licence)."""
    folder = datasets_dir() / "traces" / "kineto"
    return folder / name if name else folder


def trace_files(path) -> tuple[Path, ...]:
    """The trace files at ``path``: the file itself, or a folder's ``*.json`` and
    ``*.json.gz`` files whose names say ``rank`` or ``trace`` (``rank-0.json``,
    ``host_1234.pt.trace.json.gz``); when none does, all of them. Sorted by name."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TracesError(
            f"load_kineto({path!r}): expected a file or folder path (str or pathlib.Path)"
        )
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.name.endswith(_SUFFIXES) and f.is_file())
        named = [f for f in files if re.search(r"rank|trace", f.name, re.IGNORECASE)]
        if not files:
            raise TracesError(
                f"{p}: the folder holds no *.json or *.json.gz trace; point at a folder of "
                "PyTorch profiler traces (one per rank) or at one file"
            )
        return tuple(named or files)
    if not p.exists():
        raise TracesError(f"{p}: no such file or folder; give a PyTorch profiler trace path")
    return (p,)


def load_kineto(path, progress: Progress | None = None) -> KinetoTrace:
    """Read one PyTorch profiler trace file, or a folder of them (one per rank).

    Args:
        path: a ``.json`` / ``.json.gz`` file or a folder of them.
        progress: called as ``progress(file, bytes_read, file_bytes, events)`` while
            reading (every `PROGRESS_EVERY` events and at the end of each file).

    Raises:
        TraceFormatError: a malformed, truncated or foreign file (named, with the event).
        TracesError: no such path, or two files claim the same rank.
    """
    if progress is not None and not callable(progress):
        raise TracesError(f"progress={progress!r}; expected a callable or None")
    ranks = [load_rank(f, progress) for f in trace_files(path)]
    seen: dict[int, str] = {}
    for r in ranks:
        if r.rank is not None:
            if r.rank in seen:
                raise TracesError(
                    f"{r.path} and {seen[r.rank]} both hold rank {r.rank}; load the files of "
                    "one run (one per rank) together"
                )
            seen[r.rank] = r.path
    ranks.sort(key=lambda r: (r.rank is None, r.rank or 0, r.path))
    return KinetoTrace(tuple(ranks))


class _Counting(io.RawIOBase):
    """A raw binary stream that counts the bytes read (progress through a .gz too)."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        got = self.f.readinto(b)
        self.n += got or 0
        return got


def load_rank(path, progress: Progress | None = None) -> RankTrace:
    """Read one trace file (see `load_kineto`)."""
    path = Path(path)
    size = path.stat().st_size
    reader = _Reader(path)
    with open(path, "rb") as raw:
        counter = _Counting(raw)
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        binary = (
            gzip.GzipFile(fileobj=io.BufferedReader(counter)) if gz else io.BufferedReader(counter)
        )
        text = io.TextIOWrapper(binary, encoding="utf-8")
        tick = None
        if progress is not None:
            tick = lambda n: progress(str(path), counter.n, size, n)  # noqa: E731
        try:
            head = read_document(text, reader.add, progress=tick, every=PROGRESS_EVERY)
        except StreamError as e:
            last = f" ({reader.last!r})" if e.events else ""
            raise TraceFormatError(
                f"{path}: malformed or truncated JSON after event #{e.events - 1}{last}: {e}; "
                "expected a PyTorch profiler trace (Chrome trace JSON, plain or .gz): "
                "re-export it or check the copy"
            ) from None
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
            raise TraceFormatError(
                f"{path}: cannot read it after event #{reader.count - 1} ({e}); expected a "
                "PyTorch profiler trace (Chrome trace JSON, plain or .gz)"
            ) from None
    if head.get("traceEvents", 0) is None:
        keys = sorted(k for k in head if k != "traceEvents")
        raise TraceFormatError(
            f"{path}: no 'traceEvents' list; this is not a PyTorch profiler (Kineto) trace "
            f"(top-level keys: {', '.join(keys) or 'none'})"
        )
    dist = head.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        raise TraceFormatError(f"{path}: distributedInfo is {dist!r}, not an object")
    if progress is not None:
        progress(str(path), size, size, reader.count)
    return reader.build(head, dist)


def _rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


class _Reader:
    """Accumulates one file's events into columns (`explorer.traces.table`); `build` links
    kernels to their ops and launches and freezes the columns sorted by start time."""

    def __init__(self, path: Path):
        self.path = path
        self.count = 0
        self.last = ""
        self.kernels = ActivityColumns()
        self.ops = ActivityColumns(share=self.kernels)
        self.kernel_comm: dict[int, dict] = {}  # kernel row -> its NCCL arguments
        self.launch_ids, self.launch_ts = array("q"), array("d")
        self.steps: list[tuple[int, float, float, object]] = []
        self.backend_dtypes: set[str] = set()
        self.category_of: dict[str, str | None] = {}

    def fail(self, i: int, ev: object, why: str) -> TraceFormatError:
        name = ev.get("name") if isinstance(ev, dict) else None
        return TraceFormatError(
            f"{self.path}: event #{i} ({name!r}) {why}; a Chrome trace event is an object "
            "with 'ph', and an 'X' slice has numeric 'ts' and 'dur'"
        )

    def add(self, ev: object) -> None:
        i = self.count
        self.count = i + 1
        if type(ev) is not dict or "ph" not in ev:
            raise self.fail(i, ev, "has no 'ph' field")
        if ev["ph"] != "X":
            return
        name = ev.get("name")
        self.last = name
        ts, dur = ev.get("ts"), ev.get("dur")
        if type(ts) not in _NUM or type(dur) not in _NUM or dur < 0:
            raise self.fail(i, ev, f"has ts={ts!r}, dur={dur!r}")
        if type(name) is not str:
            raise self.fail(i, ev, "has no name")
        args = ev.get("args") or {}
        if type(args) is not dict:
            raise self.fail(i, ev, f"has args={args!r}, not an object")
        cat = ev.get("cat") or ""
        if cat in _RUNTIME_CATS:
            c = args.get("correlation")
            if type(c) is int:
                self.launch_ids.append(c)
                self.launch_ts.append(float(ts))
            return
        tid = ev.get("tid", 0)
        if cat in _GPU_CATS:
            stream = args.get("stream", tid)
            row = self.kernels.append(name, cat, float(ts), float(dur), tid=tid, stream=stream,
                                      correlation=args.get("correlation"),
                                      external_id=args.get("External id"))  # fmt: skip
            if name[:4].lower() in ("nccl", "rccl"):
                self.kernel_comm[row] = {k: args[k] for k in _COMM_ARGS if k in args}
            return
        if cat not in _CPU_CATS:
            return
        if name.startswith("ProfilerStep#"):
            m = _STEP.match(name)
            if m:
                self.steps.append((int(m.group(1)), float(ts), float(dur), tid))
        category = self.category_of.get(name, False)
        if category is False:
            category = self.category_of[name] = classify_name(name)
        coll = _op_collective(name, args) if category == "communication" else None
        if name.startswith("gloo:") and name[5:] not in ("broadcast", "barrier"):
            types = args.get("Input type") or []
            dt = dtype_name(types[0]) if types else None
            if dt is not None:
                self.backend_dtypes.add(dt)
        # shapes only where they say something: a matmul's, an attention's, a norm's
        shapes = _shapes(args) if category in _SHAPED else ()
        self.ops.append(name, cat, float(ts), float(dur), tid=tid,
                        external_id=args.get("External id"), category=category,
                        shapes=shapes, collective=coll)  # fmt: skip

    def _link_kernels(self) -> dict[str, np.ndarray]:
        """The kernels' columns with the op that launched each (the first op with its
        External id, in file order: its name, shapes and collective), its category and its
        launch time. Full-width temporaries are made one column at a time."""
        k, o = self.kernels.arrays(), self.ops.arrays()
        n = len(k["ts"])
        o_ext = ids64(o["external_id"])
        o_rows = np.flatnonzero(o_ext != NONE_ID)
        exts, first = np.unique(o_ext[o_rows], return_index=True)
        o_rows = o_rows[first]
        del o_ext, first
        k_ext = ids64(k["external_id"])
        hit = np.zeros(n, bool)
        op_row = np.zeros(n, np.intp)
        if len(exts) and n:
            j = np.minimum(np.searchsorted(exts, k_ext), len(exts) - 1)
            hit = (k_ext != NONE_ID) & (exts[j] == k_ext)
            op_row = np.where(hit, o_rows[j], 0)
            del j
        del k_ext, exts, o_rows
        linked = hit.any()
        k["op"] = np.where(hit, o["name"][op_row], 0) if linked else np.zeros(n, np.int32)
        k["shapes"] = np.where(hit, o["shapes"][op_row], 0) if linked else np.zeros(n, np.int32)
        # one category per (kernel name, cat, op): a trace repeats a few thousand of them
        strings, cats = self.kernels.strings.values, self.kernels.categories
        ns = len(strings)
        category = np.zeros(n, np.int32)
        if n:
            key = (k["name"].astype(np.int64) * ns + k["cat"]) * ns + k["op"]
            if ns**3 >= 2**62:  # too many names for one int64 key: a 2-D unique instead
                key = np.stack([k["name"], k["cat"], k["op"]], axis=1).astype(np.int64)
            uniq, inverse = np.unique(key, axis=0 if key.ndim == 2 else None,
                                      return_inverse=True)  # fmt: skip
            del key
            codes = []
            for u in uniq.tolist():
                name, cat, op = u if isinstance(u, list) else (u // ns // ns, u // ns % ns, u % ns)
                name, op = strings[name], strings[op]
                c = "memcpy" if strings[cat] != "kernel" else (
                    classify_name(name) or (classify_name(op) if op else None) or "other"
                )  # fmt: skip
                codes.append(cats.code(c))
            category = np.asarray(codes, np.int32)[inverse.reshape(-1)]
            del inverse
        coll = np.zeros(n, np.int32)
        op_colls = self.ops.collectives.values
        for row, comm in self.kernel_comm.items():
            op_coll = op_colls[o["collective"][op_row[row]]] if hit[row] else None
            c = _kernel_collective(strings[k["name"][row]], comm, op_coll)
            coll[row] = self.kernels.collectives.code(c)
            category[row] = cats.code("communication")
        k["category"], k["collective"] = category, coll
        launches = LaunchTimes.of(np.frombuffer(self.launch_ids, np.int64),
                                  np.frombuffer(self.launch_ts, np.float64))  # fmt: skip
        self.launch_ids = self.launch_ts = None
        k["launched"] = launches.lookup(ids64(k["correlation"]))
        return k

    def build(self, head: dict, dist: dict) -> RankTrace:
        kernels = self.kernels.freeze(self._link_kernels())
        pool = self.ops.collectives
        pool.values = _fill_collectives(pool.values, dist, self.backend_dtypes)
        o = self.ops.arrays()
        ops = self.ops.freeze(o)
        steps = sorted({s[0]: s for s in self.steps}.values())
        main_tid = steps[0][3] if steps else _busiest_thread(o, self.ops.tids.values)
        self.kernels = self.ops = None
        groups = tuple(
            ProcessGroup(
                str(g.get("pg_name", "")),
                str(g.get("pg_desc", "")),
                tuple(int(x) for x in g.get("ranks", ())),
                str(g.get("backend_config", "")),
            )  # fmt: skip
            for g in dist.get("pg_config", ()) or ()
            if isinstance(g, dict)
        )
        rank = dist.get("rank")
        rank = rank if isinstance(rank, int) else _rank_from_name(self.path)
        world = dist.get("world_size")
        meta = tuple(sorted((k, v) for k, v in head.items()
                            if isinstance(v, (str, int, float)) and not isinstance(v, bool)))  # fmt: skip
        return RankTrace(
            path=str(self.path), rank=rank, world_size=world if isinstance(world, int) else None,
            backend=str(dist.get("backend", "")), groups=groups,
            device="gpu" if len(kernels) else "cpu", kernels=kernels, ops=ops,
            steps=tuple(Step(n, ts, dur) for n, ts, dur, _ in steps), main_tid=main_tid,
            events=self.count, meta=meta, launches=LaunchTimes(kernels=kernels),
        )  # fmt: skip


def _fill_collectives(colls: list, dist: dict, backend_dtypes: set) -> list:
    """c10d ops record neither their process group nor, for a tensor list, their dtype:
    the group is the trace's only one (``pg_config`` with one distinct rank set); the dtype
    is the one the backend's own slices (``gloo:all_reduce`` with its ``Input type``) all
    show, when there is one (gloo runs FSDP's reduce-scatter as an all-reduce, so the
    slices of every kind count). ``colls``: the ops' collectives (None for an op without)."""
    sets = {tuple(g.get("ranks", ())) for g in dist.get("pg_config", ()) or ()
            if isinstance(g, dict)}  # fmt: skip
    ranks = tuple(int(x) for x in next(iter(sets))) if len(sets) == 1 else None
    dtype = next(iter(backend_dtypes)) if len(backend_dtypes) == 1 else None
    out = []
    for c in colls:
        if c is not None and (c.group_ranks is None or c.dtype is None):
            same = ranks is not None and c.group_size in (None, len(ranks))
            gr = c.group_ranks if c.group_ranks is not None else (ranks if same else None)
            fill = dtype if c.kind not in ("broadcast", "barrier") else None
            c = replace(c, dtype=c.dtype or fill, group_ranks=gr,
                        group_size=c.group_size or (len(gr) if gr else None))  # fmt: skip
        out.append(c)
    return out


def _busiest_thread(ops: dict[str, np.ndarray], tids: list) -> int | str | None:
    if len(ops["tid"]) == 0:
        return None
    return tids[int(np.argmax(np.bincount(ops["tid"], weights=ops["dur"])))]


def _shapes(args: dict) -> tuple:
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return ()
    return tuple(_freeze(d) for d in dims)


def _freeze(x):
    return tuple(_freeze(v) for v in x) if isinstance(x, list) else x


def _ranks(text: object) -> tuple[int, ...] | None:
    if isinstance(text, list):
        vals = text
    elif isinstance(text, str) and text.strip().startswith("["):
        vals = [v for v in re.split(r"[\s,\[\]]+", text) if v]
    else:
        return None
    try:
        return tuple(int(v) for v in vals)
    except (TypeError, ValueError):
        return None


def _int(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _from_comm_args(kind: str | None, args: dict) -> Collective | None:
    """A collective from Kineto's communication arguments (``Collective name``, ``In msg
    nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Ranks``)."""
    name = args.get("Collective name")
    if not isinstance(name, str):
        return None
    kind = collective_kind(name) or kind or name
    n_in, n_out = _int(args.get("In msg nelems")), _int(args.get("Out msg nelems"))
    n = n_out if kind == "all-gather" else n_in
    return Collective(
        kind, n, dtype_name(args.get("dtype")), _int(args.get("Group size")),
        _ranks(args.get("Process Group Ranks")),
        str(args["Process Group Name"]) if "Process Group Name" in args else None,
    )  # fmt: skip


# c10d op -> which argument of "Input Dims" holds the buffer in the planner's convention.
_C10D_ARG = {"all-gather": 0, "reduce-scatter": 1, "all-to-all": 1}


def _op_collective(name: str, args: dict) -> Collective | None:
    """The collective of a CPU op: Kineto's comm arguments (``record_param_comms``, NCCL
    ops), or a ``c10d::`` op's kind from its name and size from its ``Input Dims``."""
    from_args = _from_comm_args(None, args)
    if from_args is not None:
        return from_args
    if not name.startswith("c10d::"):
        return None
    kind = collective_kind(name[6:])
    if kind is None:  # c10d::wait, c10d::barrier-like plumbing without a buffer
        return None
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    j = _C10D_ARG.get(kind, 0)
    n = nelems(dims[j]) if j < len(dims) else None
    dt = dtype_name(types[j]) if j < len(types) else None
    return Collective(kind, n, dt)


def _kernel_collective(name: str, args: dict, op_coll: Collective | None) -> Collective:
    """A GPU kernel's collective: its own comm arguments, else the collective of the op that
    launched it, else (NCCL kernels without either) the kind and dtype in its name."""
    kind = collective_kind(name)
    return (
        _from_comm_args(kind, args)
        or op_coll
        or Collective(kind or "other", None, dtype_name(name.split("(")[0].rsplit("_", 1)[-1]))
    )
