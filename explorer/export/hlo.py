"""Read the collectives XLA's SPMD partitioner inserted from compiled HLO text.

Each collective becomes an `HloCollective`: its kind, the mesh axes of its replica groups,
the buffer ``size_bytes`` in our convention (all-gather: gathered output; reduce-scatter:
input; others: the buffer) and the bytes each device sends, priced by the same
`explorer.hardware.Mesh.collective_bytes` the planner charges.

Two rewrites make XLA's output comparable to a plan:

- an all-reduce whose every user slices its result down to one group member's piece (a
  ``dynamic-slice``, alone or inside a fusion) is a reduce-scatter: XLA's CPU backend
  emits reduce-scatter that way;
- a tuple all-reduce (XLA combines gradient reductions) yields one collective per element;
- an async pair (``all-gather-start`` / ``-done``) counts once, at its start.

Replica groups come in three textual forms, all read here; ids index the flattened device
list of the mesh the program was compiled for:

================================================ ==========================================
``{{0,1,2,3},{4,5,6,7}}``                         explicit lists
``[2,4]<=[8]``, ``[4,2]<=[2,4]T(1,0)``            iota: reshape, transpose, regroup
``mesh['axis_0'=2,'axis_1'=4] {'axis_1'}``        mesh form: the named axes vary in a group
================================================ ==========================================

>>> from explorer.hardware import Mesh
>>> mesh = Mesh({"dp": 2, "tp": 4})
>>> parse_replica_groups("[4,2]<=[2,4]T(1,0)", 8)
((0, 4), (1, 5), (2, 6), (3, 7))
>>> groups_to_axes(parse_replica_groups("[2,4]<=[8]", 8), mesh)
('tp',)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from ..hardware import CollectiveKind, Mesh, bytes_sent_per_device
from .errors import ExportError

__all__ = [
    "HloCollective",
    "collectives",
    "parse_replica_groups",
    "groups_to_axes",
    "ELEMENT_BYTES",
]

# HLO element types and their sizes in bytes
ELEMENT_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
    "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
}  # fmt: skip

_KINDS = {
    "all-reduce": CollectiveKind.ALL_REDUCE,
    "all-gather": CollectiveKind.ALL_GATHER,
    "reduce-scatter": CollectiveKind.REDUCE_SCATTER,
    "all-to-all": CollectiveKind.ALL_TO_ALL,
    "collective-permute": CollectiveKind.SEND_RECV,
}


@dataclass(frozen=True)
class HloCollective:
    """One collective XLA inserted (one element of a tuple collective).

    Args:
        kind: our `CollectiveKind` (an all-reduce sliced by its users is a reduce-scatter).
        axes: the mesh axes whose devices form each replica group (mesh order); ``None``
            when the groups match no set of axes.
        size_bytes, bytes_per_device: as in `explorer.sharding.Collective`.
        dtype, shape: the element type and shape of the buffer ``size_bytes`` counts.
        groups: the replica groups as device-id tuples.
        instruction: the HLO instruction name; ``index`` the tuple element (None: no tuple).
        hlo_kind: the HLO opcode (``all-reduce`` for an emitted reduce-scatter).
    """

    kind: CollectiveKind
    axes: tuple[str, ...] | None
    size_bytes: float
    bytes_per_device: float
    dtype: str
    shape: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    instruction: str
    index: int | None = None
    hlo_kind: str = ""

    def __str__(self) -> str:
        axes = ",".join(self.axes) if self.axes is not None else "?"
        shape = ",".join(map(str, self.shape))
        return f"{self.kind.value}({axes}) {self.dtype}[{shape}] %{self.instruction}"


# --- replica groups ------------------------------------------------------------------------

_IOTA = re.compile(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")
_MESH = re.compile(
    r"^mesh\[(.*?)\](?:<=\[([\d,]+)\](?:T\(([\d,]+)\))?)?"
    r"(?:,\s*device_ids=\((.*)\))?\s*\{(.*)\}$"
)


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def _iota(dims: list[int], perm: list[int] | None) -> np.ndarray:
    ids = np.arange(math.prod(dims)).reshape(dims)
    return ids.transpose(perm) if perm else ids


def parse_replica_groups(text: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """Device-id groups from any of the three textual forms, sorted; ``{}`` is every device.

    >>> parse_replica_groups("{{0,2},{1,3}}", 4)
    ((0, 2), (1, 3))
    >>> parse_replica_groups("mesh['axis_0'=2,'axis_1'=4,'axis_2'=1] {'axis_0'}", 8)
    ((0, 4), (1, 5), (2, 6), (3, 7))
    """
    text = text.strip()
    if text in ("{}", "{{}}", ""):
        return (tuple(range(num_devices)),)
    m = _IOTA.match(text)
    if m:
        shape = _ints(m.group(1))
        ids = _iota(_ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None)
        return _sorted_groups(ids.reshape(shape))
    m = _MESH.match(text)
    if m:
        axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", m.group(1))
        names = [a for a, _ in axes]
        sizes = [int(n) for _, n in axes]
        if m.group(2):
            ids = _iota(_ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None)
        elif m.group(4):
            ids = _device_ids(m.group(4))
        else:
            ids = np.arange(math.prod(sizes))
        ids = ids.reshape(sizes)
        chosen = re.findall(r"'([^']+)'", m.group(5))
        if any(c not in names for c in chosen) or ":" in m.group(5):
            raise ExportError(f"cannot read replica groups {text!r}: sub-axes are not supported")
        moved = [names.index(c) for c in chosen]
        kept = [i for i in range(len(names)) if i not in moved]
        width = math.prod(sizes[i] for i in moved)
        return _sorted_groups(ids.transpose(kept + moved).reshape(-1, width))
    if text.startswith("{{") or text.startswith("{"):
        groups = re.findall(r"\{([\d,\s]*)\}", text[1:-1] if text.startswith("{{") else text)
        return tuple(sorted(tuple(sorted(_ints(g))) for g in groups if g.strip()))
    raise ExportError(
        f"cannot read replica groups {text!r}; expected {{{{0,1}},{{2,3}}}}, [2,2]<=[4] or "
        "mesh['a'=2,...] {'a'}"
    )


def _device_ids(text: str) -> np.ndarray:
    """``[2,4]T(1,0)`` (an iota reshaped and transposed) or an explicit ``3,1,2,0``."""
    text = text.strip()
    m = re.match(r"^\[([\d,]+)\](?:T\(([\d,]+)\))?$", text)
    if m:
        return _iota(_ints(m.group(1)), _ints(m.group(2)) if m.group(2) else None)
    return np.array(_ints(text))


def _sorted_groups(arr: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(sorted(tuple(sorted(int(d) for d in row)) for row in arr))


def groups_to_axes(groups: tuple[tuple[int, ...], ...], mesh: Mesh) -> tuple[str, ...] | None:
    """The mesh axes (mesh order) whose groups are exactly ``groups``; None if no set is.

    Axes of size 1 never appear. Groups of one device map to ``()``.
    """
    target = tuple(sorted(tuple(sorted(g)) for g in groups))
    if all(len(g) == 1 for g in target):
        return ()
    names = [a for a in mesh.axis_names if mesh.axis_size(a) > 1]
    for r in range(1, len(names) + 1):
        for axes in combinations(names, r):
            if mesh.groups(axes) == target:
                return axes
    return None


# --- HLO text ---------------------------------------------------------------------------

_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\([^=]*?\)|[\w]+\[[\d,]*\](?:\{[^}]*\})?)"
    r"\s+(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<attrs>.*)$"
)
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_COMP = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?:\(.*\))?\s*->.*\{\s*$")


@dataclass(frozen=True)
class _Instr:
    name: str
    types: tuple[tuple[str, tuple[int, ...]], ...]
    op: str
    operands: tuple[str, ...]
    attrs: str
    computation: str
    args: str  # the raw text inside the parentheses (a parameter's index)


def _parse(text: str) -> dict[str, list[_Instr]]:
    """Computation name -> its instructions, in order."""
    comps: dict[str, list[_Instr]] = {}
    current = ""
    text = re.sub(r"/\*.*?\*/", "", text)  # tuple index comments: /*index=5*/
    for line in text.splitlines():
        if line.rstrip().endswith("{") and "=" not in line.split("->")[0].split("(")[0]:
            m = _COMP.match(line)
            if m:
                current = m.group("name")
                comps[current] = []
                continue
        m = _INSTR.match(line)
        if not m:
            continue
        types = tuple((dt, tuple(_ints(dims))) for dt, dims in _ARRAY.findall(m.group("type")))
        operands = tuple(re.findall(r"%([\w.\-]+)", m.group("operands")))
        ins = _Instr(m.group("name"), types, m.group("op"), operands, m.group("attrs"), current,
                     m.group("operands"))  # fmt: skip
        comps.setdefault(current, []).append(ins)
    return comps


def _attr(attrs: str, key: str) -> str | None:
    """The value of ``key=`` in an attribute list, balancing braces and brackets."""
    i = attrs.find(key + "=")
    if i < 0:
        return None
    j = i + len(key) + 1
    depth, k = 0, j
    while k < len(attrs):
        c = attrs[k]
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == "," and depth == 0:
            break
        k += 1
    value = attrs[j:k].strip()
    if value.startswith("mesh[") and not value.endswith("}"):
        # the mesh form may go on with ", device_ids=(...)" before its " {'axis'}"
        m = re.match(r"\s*(,\s*device_ids=\([^)]*(?:\([^)]*\))?[^)]*\))?\s*(\{[^}]*\})", attrs[k:])
        if m:
            value += (m.group(1) or "") + " " + m.group(2)
    return value


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    if dtype not in ELEMENT_BYTES:
        raise ExportError(f"unknown HLO element type {dtype!r}; add it to ELEMENT_BYTES")
    return math.prod(shape) * ELEMENT_BYTES[dtype]


def _users(comps: dict[str, list[_Instr]], instr: _Instr) -> list[_Instr]:
    return [u for u in comps[instr.computation] if instr.name in u.operands]


def _slices_param(comps, fusion: _Instr, pos: int, elements: int) -> bool:
    """Does the fused computation of ``fusion`` dynamic-slice its operand ``pos`` (possibly
    through bitcasts/copies) down to ``elements`` elements?"""
    called = _attr(fusion.attrs, "calls")
    if not called:
        return False
    body = comps.get(called.lstrip("%"), [])
    frontier = {i.name for i in body if i.op == "parameter" and i.args.strip() == str(pos)}
    for i in body:  # body is in definition order: follow layout-only ops
        if i.op in ("bitcast", "copy", "reshape", "transpose") and set(i.operands) & frontier:
            frontier.add(i.name)
    for i in body:
        if i.op == "dynamic-slice" and i.operands and i.operands[0] in frontier:
            return math.prod(i.types[0][1]) == elements
    return False


def _is_scattered(comps, ar: _Instr, group_size: int) -> bool:
    """Every user of the all-reduce keeps only 1/group_size of it through a dynamic-slice."""
    if len(ar.types) != 1 or group_size <= 1:
        return False
    elements = math.prod(ar.types[0][1]) // group_size
    users = _users(comps, ar)
    if not users:
        return False
    for u in users:
        if u.op == "dynamic-slice" and u.operands[0] == ar.name:
            if math.prod(u.types[0][1]) != elements:
                return False
        elif u.op == "fusion":
            if not _slices_param(comps, u, u.operands.index(ar.name), elements):
                return False
        else:
            return False
    return True


def collectives(hlo_text: str, mesh: Mesh) -> tuple[HloCollective, ...]:
    """Every collective in compiled HLO text, in program order (tuples split by element).

    ``mesh``: our mesh with the same shape and device order as the JAX mesh compiled for.
    """
    comps = _parse(hlo_text)
    out: list[HloCollective] = []
    for comp in comps.values():
        for ins in comp:
            op = ins.op.removesuffix("-start")
            if op not in _KINDS or ins.op.endswith("-done"):
                continue
            kind = _KINDS[op]
            rg = _attr(ins.attrs, "replica_groups")
            if op == "collective-permute":
                groups: tuple[tuple[int, ...], ...] = ()
                axes: tuple[str, ...] | None = None
            else:
                groups = parse_replica_groups(rg or "{}", mesh.size)
                axes = groups_to_axes(groups, mesh)
            n = len(groups[0]) if groups else 2
            elems = list(ins.types)
            if ins.op.endswith("-start") and len(elems) > 1 and op != "all-reduce":
                elems = elems[len(elems) // 2 :]  # async start returns (inputs, outputs)
            if kind is CollectiveKind.ALL_REDUCE and _is_scattered(comps, ins, n):
                kind = CollectiveKind.REDUCE_SCATTER
            for idx, (dtype, shape) in enumerate(elems):
                if kind is CollectiveKind.REDUCE_SCATTER and op == "reduce-scatter":
                    shape = tuple(d * (n if k == _scatter_dim(ins) else 1)
                                  for k, d in enumerate(shape))  # fmt: skip
                size = float(_nbytes(dtype, shape))
                # groups matching no axes (or a permute) are priced by their size alone
                sent = (mesh.collective_bytes(kind, size, axes) if axes
                        else bytes_sent_per_device(kind, size, n))  # fmt: skip
                out.append(HloCollective(
                    kind=kind, axes=axes, size_bytes=size, bytes_per_device=float(sent),
                    dtype=dtype, shape=shape, groups=groups, instruction=ins.name,
                    index=idx if len(elems) > 1 else None, hlo_kind=op,
                ))  # fmt: skip
    return tuple(out)


def _scatter_dim(ins: _Instr) -> int:
    d = _attr(ins.attrs, "dimensions")
    return _ints(d.strip("{}"))[0] if d else 0
