"""Activities stored by column: `ActivityTable`, the compact form a trace's kernels and ops
are kept in, and `ActivityColumns`, the appendable form `load_kineto` fills while it reads.

A trace of a GB holds millions of kernels and ops. As Python objects (one `Activity` named
tuple with two floats and a few ints each) they took about 340 bytes apiece
(bench/traces.py); by column they take 8 bytes per time and launch time, 4 per id
(correlation, External id, stream), 1 or 2 per interned field (name, category, thread, op,
shapes, collective) and nothing for a field that is one value in the whole column (an op's
stream, launch and correlation): 42 bytes a kernel and 25 an op on HTA's NCCL trace. Reading
appends to `array.array` columns (no object per event survives the event), compacted every
`SEGMENT` rows; `ActivityColumns.freeze` turns them into numpy arrays sorted by start time.
An `ActivityTable` is a read-only sequence of `Activity`: indexing and iterating make the
named tuples on the fly, a slab of rows at a time.

>>> from explorer.traces.events import Activity
>>> cols = ActivityColumns()
>>> cols.append("gemm", "kernel", 5.0, 2.0, tid=7, stream=7, correlation=1, category="matmul")
0
>>> cols.append("add", "kernel", 1.0, 1.0, tid=7, stream=7, category="elementwise")
1
>>> t = cols.freeze()
>>> [(a.name, a.ts, a.correlation, a.launched) for a in t]
[('add', 1.0, None, None), ('gemm', 5.0, 1, None)]
>>> t[1] == Activity("gemm", "kernel", 5.0, 2.0, 7, 7, 1, None, "matmul")
True
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from .errors import NoLaunchError, RowError, TracesError
from .events import Activity

__all__ = ["ActivityTable", "ActivityColumns", "LaunchTimes", "NONE_ID", "Pool", "ids64"]

NONE_ID = -(2**63)  # an absent integer id (stream, correlation, external id)
_SLAB = 1 << 15  # rows made into named tuples at a time while iterating
SEGMENT = 1 << 16  # rows appended into typed arrays before they are compacted
_FLOATS = ("ts", "dur", "launched")
_IDS = ("stream", "correlation", "external_id")
_CODES = ("name", "cat", "tid", "category", "op", "shapes", "collective")


class Pool:
    """Values interned to small integer codes (a trace repeats a few thousand names, shapes
    and threads millions of times)."""

    def __init__(self, first: tuple = ()):
        self.values: list = list(first)
        self.codes: dict = {v: i for i, v in enumerate(self.values)}

    def code(self, value) -> int:
        try:
            c = self.codes.get(value)
        except TypeError:  # an unhashable value (a tid written as an object): its own code
            self.values.append(value)
            return len(self.values) - 1
        if c is None:
            c = self.codes[value] = len(self.values)
            self.values.append(value)
        return c


def _id(x) -> int:
    return x if type(x) is int and x != NONE_ID else NONE_ID


class ActivityColumns:
    """Activities appended one at a time into typed columns, with interned values; `freeze`
    sorts them by start time into an `ActivityTable`. ``share``: columns whose string,
    thread, category and shape pools these use too (a file's kernels carry the names and
    shapes of the ops that launched them); collectives are each table's own."""

    def __init__(self, share: ActivityColumns | None = None):
        if share is None:
            self.strings = Pool(("",))  # names, "cat" values and ops
            self.tids, self.categories, self.shapes = Pool(), Pool((None,)), Pool(((),))
        else:
            self.strings, self.tids = share.strings, share.tids
            self.categories, self.shapes = share.categories, share.shapes
        self.collectives = Pool((None,))
        self.segments: list[dict[str, np.ndarray]] = []  # compacted, in append order
        self.done = 0  # rows in the segments
        self._open()

    def _open(self) -> None:
        self.f = {k: array("d") for k in _FLOATS}
        self.i = {k: array("q") for k in _IDS}
        self.c = {k: array("i") for k in _CODES}

    def _flush(self) -> None:
        """Move the rows appended since the last flush into a compacted segment."""
        n = len(self.f["ts"])
        if n == 0:
            return
        seg = {k: _compact(k, np.array(v, np.float64)) for k, v in self.f.items()}
        seg.update({k: _compact(k, np.array(v, np.int64)) for k, v in self.i.items()})
        seg.update({k: _compact(k, np.array(v, np.int32)) for k, v in self.c.items()})
        self.segments.append(seg)
        self.done += n
        self._open()

    def __len__(self) -> int:
        return self.done + len(self.f["ts"])

    def append(self, name: str, cat: str, ts: float, dur: float, *, tid=0, stream=None,
               correlation=None, external_id=None, category=None, op="", shapes=(),
               collective=None, launched=None) -> int:  # fmt: skip
        """Append one activity; returns its row (in append order)."""
        f, i, c, s = self.f, self.i, self.c, self.strings
        n = len(f["ts"])
        if n >= SEGMENT:  # typed arrays take 76 bytes a row; a compacted segment about 30
            self._flush()
            f, i, c, n = self.f, self.i, self.c, 0
        f["ts"].append(ts)
        f["dur"].append(dur)
        f["launched"].append(np.nan if launched is None else launched)
        i["stream"].append(_id(stream))
        i["correlation"].append(_id(correlation))
        i["external_id"].append(_id(external_id))
        c["name"].append(s.code(name))
        c["cat"].append(s.code(cat))
        c["tid"].append(self.tids.code(tid))
        c["category"].append(self.categories.code(category))
        c["op"].append(s.code(op))
        c["shapes"].append(self.shapes.code(shapes))
        c["collective"].append(self.collectives.code(collective))
        return self.done + n

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays, in append order, each in its compact type (ids in
        int32 or int64: `ids64` reads them as int64 with `NONE_ID`). The segments are joined
        one column at a time (and kept joined)."""
        self._flush()
        segs = self.segments
        if len(segs) != 1:
            out = {}
            for k in (*_FLOATS, *_IDS, *_CODES):
                parts = [seg.pop(k) for seg in segs]
                out[k] = _concat(k, parts) if parts else np.zeros(0, _EMPTY[k])
                del parts
            self.segments = segs = [out]
        return dict(segs[0])

    def freeze(self, cols: dict[str, np.ndarray] | None = None) -> ActivityTable:
        """An `ActivityTable` of ``cols`` (default: `arrays`), rows sorted by start time
        (stable: equal starts keep their append order); each column is narrowed as it is
        moved (`_compact`), so the peak holds one column twice, not the table. The columns
        are spent: append nothing after."""
        cols = self.arrays() if cols is None else dict(cols)
        self.f = self.i = self.c = self.segments = None  # ``cols`` holds the only references
        ts = cols["ts"]
        order = None if bool(np.all(ts[1:] >= ts[:-1])) else np.argsort(ts, kind="stable")
        del ts
        out = {}
        for k in list(cols):
            v = cols.pop(k)
            out[k] = _compact(k, v if order is None else v[order])
            del v
        pools = {
            "name": tuple(self.strings.values), "cat": tuple(self.strings.values),
            "tid": tuple(self.tids.values), "category": tuple(self.categories.values),
            "op": tuple(self.strings.values), "shapes": tuple(self.shapes.values),
            "collective": tuple(self.collectives.values),
        }  # fmt: skip
        return ActivityTable(out, pools)


_I32 = np.iinfo(np.int32)
_EMPTY = {**{k: np.float64 for k in _FLOATS}, **{k: np.int64 for k in _IDS},
          **{k: np.int32 for k in _CODES}}  # fmt: skip


def ids64(v: np.ndarray) -> np.ndarray:
    """An id column as int64, `NONE_ID` where absent."""
    if v.dtype == np.int64:
        return v
    return np.where(v == _none_of(v), NONE_ID, v.astype(np.int64))


def _concat(name: str, parts: list[np.ndarray]) -> np.ndarray:
    """Compacted segments of one column joined, then compacted again."""
    if name in _IDS and len({p.dtype for p in parts}) > 1:
        parts = [ids64(p) for p in parts]
    return _compact(name, np.concatenate(parts)) if len(parts) > 1 else parts[0]


def _compact(name: str, v: np.ndarray) -> np.ndarray:
    """A column in the fewest bytes that hold it exactly: a column of one value as a
    read-only broadcast (no bytes per row: an op has no stream, launch or correlation),
    interned codes in the smallest unsigned type, ids in int32 (its minimum standing for
    `NONE_ID`) when they fit."""
    if len(v) == 0:
        return v
    first = v[:1]
    if name in _FLOATS:
        same = bool(np.all(np.isnan(v))) if np.isnan(first[0]) else bool(np.all(v == first[0]))
    else:
        same = bool(np.all(v == first[0]))
    if same:
        return np.broadcast_to(first.copy(), v.shape)
    if name in _IDS:
        if v.dtype != np.int64:  # already narrowed
            return v
        real = v[v != NONE_ID]
        if len(real) and _I32.min < real.min() and real.max() <= _I32.max:
            return np.where(v == NONE_ID, _I32.min, v).astype(np.int32)
        return v
    if name in _CODES:
        return v.astype(np.min_scalar_type(int(v.max())))
    return v


def _none_of(v: np.ndarray) -> int:
    """The value that stands for an absent id in an id column of ``v``'s type."""
    return NONE_ID if v.dtype == np.int64 else int(np.iinfo(v.dtype).min)


class ActivityTable(Sequence):
    """A read-only, columnar sequence of `Activity` (see the module doc).

    ``column(name)`` gives a field as a numpy array without making any tuple: ``ts``, ``dur``,
    ``launched`` (NaN where unknown) as float64; ``stream``, ``correlation``, ``external_id``
    as int64 (`NONE_ID` where absent); the interned fields as codes into ``pool(name)``.
    """

    def __init__(self, cols: dict[str, np.ndarray], pools: dict[str, tuple]):
        self._cols, self._pools = cols, pools
        self._n = len(cols["ts"])

    @classmethod
    def of(cls, activities) -> ActivityTable:
        """A table of the given activities (in their order; they are re-sorted by start)."""
        cols = ActivityColumns()
        for a in activities:
            a = Activity(*a)
            cols.append(a.name, a.cat, a.ts, a.dur, tid=a.tid, stream=a.stream,
                        correlation=a.correlation, external_id=a.external_id,
                        category=a.category, op=a.op, shapes=a.shapes,
                        collective=a.collective, launched=a.launched)  # fmt: skip
        return cols.freeze()

    def __len__(self) -> int:
        return self._n

    def column(self, name: str) -> np.ndarray:
        v = self._cols[name]
        return ids64(v) if name in _IDS else v

    def pool(self, name: str) -> tuple:
        return self._pools[name]

    def rows(self, index) -> ActivityTable:
        """The rows at ``index`` (integer positions, in the given order) as a table."""
        index = np.asarray(index, dtype=np.intp)
        cols = {k: np.broadcast_to(v[:1], index.shape) if v.strides[0] == 0 and len(v)
                else v[index] for k, v in self._cols.items()}  # fmt: skip
        return ActivityTable(cols, self._pools)

    def nbytes(self) -> int:
        """Bytes held by the columns (the pools are shared and small)."""
        return sum(v.nbytes if v.strides[0] else v.itemsize for v in self._cols.values())

    def _rows(self, lo: int, hi: int) -> Iterator[Activity]:
        cols, pools = self._cols, self._pools
        names, cats = pools["name"], pools["cat"]
        get = {k: cols[k][lo:hi].tolist() for k in cols}
        name = [names[c] for c in get["name"]]
        cat = [cats[c] for c in get["cat"]]
        tid = [pools["tid"][c] for c in get["tid"]]
        category = [pools["category"][c] for c in get["category"]]
        op = [names[c] for c in get["op"]]
        shapes = [pools["shapes"][c] for c in get["shapes"]]
        coll = [pools["collective"][c] for c in get["collective"]]
        ids = [[None if x == none else x for x in get[k]]
               for k, none in ((k, _none_of(cols[k])) for k in _IDS)]  # fmt: skip
        launched = [None if x != x else x for x in get["launched"]]
        return map(Activity._make, zip(name, cat, get["ts"], get["dur"], tid, *ids, category,
                                       op, shapes, coll, launched, strict=True))  # fmt: skip

    def __iter__(self) -> Iterator[Activity]:
        for lo in range(0, self._n, _SLAB):
            yield from self._rows(lo, min(lo + _SLAB, self._n))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.rows(np.arange(self._n)[i])
        if not isinstance(i, (int, np.integer)):
            raise TracesError(f"ActivityTable[{i!r}]: rows are indexed by an int or a slice")
        j = int(i) + self._n if i < 0 else int(i)
        if not 0 <= j < self._n:
            raise RowError(f"ActivityTable[{i}]: the table holds {self._n} activities")
        return next(self._rows(j, j + 1))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"<ActivityTable: {self._n} activities, {self.nbytes():,} bytes>"


class LaunchTimes(Mapping):
    """Correlation id -> CPU launch time (us) of the runtime calls (``cudaLaunchKernel``),
    held as two sorted arrays; ``LaunchTimes(kernels=table)`` reads them from the kernels'
    own ``correlation`` and ``launched`` columns when first asked (a trace keeps no second
    copy)."""

    def __init__(self, ids: np.ndarray | None = None, times: np.ndarray | None = None, *,
                 kernels: ActivityTable | None = None):  # fmt: skip
        self._ids, self._times, self._kernels = ids, times, kernels
        if ids is None and kernels is None:
            self._ids, self._times = np.zeros(0, np.int64), np.zeros(0)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._ids is None:
            corr, at = self._kernels.column("correlation"), self._kernels.column("launched")
            ok = (corr != NONE_ID) & ~np.isnan(at)
            got = LaunchTimes.of(corr[ok], at[ok])
            self._ids, self._times, self._kernels = got._ids, got._times, None
        return self._ids, self._times

    @classmethod
    def of(cls, ids: np.ndarray, times: np.ndarray) -> LaunchTimes:
        """From the calls in trace order; a repeated id keeps its last time (as a dict)."""
        rev_ids, rev_times = ids[::-1], times[::-1]
        keep, first = np.unique(rev_ids, return_index=True)
        return cls(keep, rev_times[first])

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The launch time of each id, NaN where none."""
        keys, times = self._arrays()
        out = np.full(len(ids), np.nan)
        if len(keys) == 0:
            return out
        j = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        hit = keys[j] == ids
        out[hit] = times[j[hit]]
        return out

    def __getitem__(self, key) -> float:
        keys, times = self._arrays()
        if type(key) is int and len(keys):
            j = int(np.searchsorted(keys, key))
            if j < len(keys) and keys[j] == key:
                return float(times[j])
        raise NoLaunchError(f"no kernel of the trace was launched with correlation id {key!r}")

    def __iter__(self):
        return iter(self._arrays()[0].tolist())

    def __len__(self) -> int:
        return len(self._arrays()[0])
