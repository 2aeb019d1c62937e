"""Predicted collectives next to XLA's: matches, extras and misses.

A predicted `explorer.sharding.Collective` matches an observed `HloCollective` when the
kind, the mesh axes and the bytes each device sends are equal; each observed collective
matches at most one predicted one (first come, first served, in program order).

A predicted collective left over may still be *split*: XLA sent its buffer as the elements
of one tuple collective of the same kind and axes whose bytes add up to it (our
cross-entropy all-reduces the exp-sum and the picked logit stacked; XLA as a pair).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..hardware import CollectiveKind, Mesh
from ..ir import Graph, format_bytes
from ..sharding import Collective, Layout, Strategy, make_collective, redistribute
from .hlo import HloCollective

__all__ = ["Comparison", "compare", "predicted_collectives", "predicted_gradient_collectives"]


def predicted_collectives(graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]
                          ) -> tuple[Collective, ...]:  # fmt: skip
    """The forward's collectives as the planner charges them, in graph order: each op's
    internal collectives, one redistribution per (producer, needed layout), and the
    reduction of partial outputs (the same count as `explorer.sharding.predicted_bytes`)."""
    out: list[Collective] = []
    seen: set[tuple[str, Layout]] = set()
    for n in graph.nodes:
        s = assignment[n.name]
        for a, want in zip(n.inputs, s.in_layouts, strict=True):
            have = assignment[a].out_layout
            if have != want and (a, want) not in seen:
                seen.add((a, want))
                plan = redistribute(have, want, graph.node(a).type, mesh)
                out += [_tag(c, f"{a}->{n.name}") for c in plan.steps]
        out += [_tag(c, n.name) for c in s.collectives]
    for o in graph.outputs:
        have = assignment[o].out_layout
        if have.partial and (o, Layout(have.dims)) not in seen:
            plan = redistribute(have, Layout(have.dims), graph.node(o).type, mesh)
            out += [_tag(c, f"{o}->output") for c in plan.steps]
    return tuple(out)


def predicted_gradient_collectives(graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]
                                   ) -> tuple[Collective, ...]:  # fmt: skip
    """How every parameter gradient is completed, per way the parameter is used.

    Each use (consumer, layout it reads the parameter in) contributes a gradient that is a
    partial sum over the mesh axes the consumer splits other letters on (batch, sequence):
    one all-reduce of the local block. Where a use reads the parameter split on axes its
    own layout does not split (the vocabulary-parallel head reading a replicated table),
    the reduced block is then all-gathered over those axes. An embedding also inherits the
    axes its output is broadcast over (a position table added to every sequence of a
    dp-split batch). Uses with the same layout and axes are summed locally first.
    """
    out = []
    for p in graph.parameters:
        own = assignment[p.name].out_layout
        uses: dict[tuple[Layout, tuple[str, ...]], None] = {}
        for c in graph.consumers(p.name):
            node = graph.node(c)
            for pos, a in enumerate(node.inputs):
                if a != p.name:
                    continue
                lay = assignment[c].in_layouts[pos]
                partial = _strategy_axes(assignment[c]) - set(lay.axes)
                if node.op == "embedding" and pos == 1:
                    partial |= _broadcast_axes(graph, assignment, c)
                uses[lay, _ordered(mesh, partial)] = None
        for lay, partial in uses:
            if partial:
                out.append(make_collective(CollectiveKind.ALL_REDUCE,
                                           _local_bytes(p.type, lay, mesh), partial, mesh,
                                           p.name))  # fmt: skip
            gather = _ordered(mesh, set(lay.axes) - set(own.axes))
            if gather:
                out.append(make_collective(CollectiveKind.ALL_GATHER,
                                           _local_bytes(p.type, own, mesh), gather, mesh,
                                           p.name))  # fmt: skip
    return tuple(out)


def _strategy_axes(s: Strategy) -> set[str]:
    return {a for _, axes in s.dim_axes for a in axes}


def _ordered(mesh: Mesh, axes: set[str]) -> tuple[str, ...]:
    return tuple(a for a in mesh.axis_names if a in axes and mesh.axis_size(a) > 1)


def _local_bytes(ttype, lay: Layout, mesh: Mesh) -> int:
    size = ttype.dtype.itemsize
    for d in lay.local_shape(ttype.shape, mesh):
        size *= d
    return size


def _broadcast_axes(graph: Graph, assignment: Mapping[str, Strategy], name: str) -> set[str]:
    """Axes the users of ``name`` split letters that ``name`` does not have."""
    axes: set[str] = set()
    for c in graph.consumers(name):
        for pos, a in enumerate(graph.node(c).inputs):
            if a == name:
                axes |= _strategy_axes(assignment[c]) - set(assignment[c].in_layouts[pos].axes)
    return axes - set(assignment[name].out_layout.axes)


def _tag(c: Collective, tensor: str) -> Collective:
    import dataclasses

    return dataclasses.replace(c, tensor=tensor)


@dataclass(frozen=True)
class Comparison:
    """Predicted vs observed collectives.

    Attributes:
        matches: (predicted, observed) pairs equal in kind, axes and bytes per device.
        misses: predicted collectives XLA did not insert.
        extras: collectives XLA inserted that the plan does not predict.
        split: (predicted, observed tuple elements) that add up to it (see the module).
    """

    matches: tuple[tuple[Collective, HloCollective], ...]
    misses: tuple[Collective, ...]
    extras: tuple[HloCollective, ...]
    split: tuple[tuple[Collective, tuple[HloCollective, ...]], ...] = ()

    @property
    def ok(self) -> bool:
        """Every predicted collective found (whole or split) and nothing else inserted."""
        return not self.misses and not self.extras

    @property
    def exact(self) -> bool:
        """`ok`, and every collective matched one to one (none split)."""
        return self.ok and not self.split

    @property
    def predicted_bytes(self) -> float:
        return (sum(c.bytes_per_device for c, _ in self.matches)
                + sum(c.bytes_per_device for c in self.misses)
                + sum(c.bytes_per_device for c, _ in self.split))  # fmt: skip

    @property
    def observed_bytes(self) -> float:
        return (sum(o.bytes_per_device for _, o in self.matches)
                + sum(o.bytes_per_device for o in self.extras)
                + sum(o.bytes_per_device for _, os in self.split for o in os))  # fmt: skip

    def rows(self) -> list[dict[str, object]]:
        """One dict per line of `table` (status, kind, axes, bytes, tensor, HLO)."""
        rows = []
        for p, o in self.matches:
            rows.append(_row("match", p.kind, p.axes, p.bytes_per_device, p.tensor, o))
        for p, os in self.split:
            for o in os:
                rows.append(_row("split", p.kind, p.axes, o.bytes_per_device, p.tensor, o))
        for p in self.misses:
            rows.append(_row("miss", p.kind, p.axes, p.bytes_per_device, p.tensor, None))
        for o in self.extras:
            rows.append(_row("extra", o.kind, o.axes, o.bytes_per_device, "", o))
        return rows

    def table(self) -> str:
        """A fixed-width table, one collective per line."""
        head = f"{'status':<6} {'kind':<14} {'axes':<7} {'bytes/dev':>10}  {'tensor':<38} XLA"
        lines = [head, "-" * len(head)]
        for r in self.rows():
            lines.append(f"{r['status']:<6} {r['kind']:<14} {r['axes']:<7} "
                         f"{format_bytes(r['bytes_per_device']):>10}  {r['tensor']:<38} "
                         f"{r['xla']}")  # fmt: skip
        lines.append(f"{len(self.matches)} matches, {len(self.split)} split, "
                     f"{len(self.misses)} misses, "
                     f"{len(self.extras)} extras; predicted {format_bytes(self.predicted_bytes)}"
                     f"/device, XLA {format_bytes(self.observed_bytes)}/device")  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _row(status, kind, axes, nbytes, tensor, o: HloCollective | None) -> dict[str, object]:
    return {
        "status": status, "kind": kind.value,
        "axes": ",".join(axes) if axes is not None else "?", "bytes_per_device": nbytes,
        "tensor": tensor, "xla": "" if o is None else f"{o.hlo_kind} %{o.instruction}"
        + (f"[{o.index}]" if o.index is not None else ""),
    }  # fmt: skip


def compare(predicted: Sequence[Collective], observed: Sequence[HloCollective]) -> Comparison:
    """Match predicted and observed collectives by (kind, axes, bytes per device).

    >>> compare((), ()).ok
    True
    """
    pending = list(observed)
    matches, misses = [], []
    for p in predicted:
        for i, o in enumerate(pending):
            if (o.kind is p.kind and o.axes == tuple(p.axes)
                    and abs(o.bytes_per_device - p.bytes_per_device) < 1e-6):  # fmt: skip
                matches.append((p, o))
                del pending[i]
                break
        else:
            misses.append(p)
    split = []
    for p in list(misses):
        parts = _split_parts(p, pending)
        if parts:
            split.append((p, parts))
            misses.remove(p)
            pending = [o for o in pending if all(o is not q for q in parts)]
    extras = [o for o in pending if o.bytes_per_device > 0]
    return Comparison(tuple(matches), tuple(misses), tuple(extras), tuple(split))


def _split_parts(p: Collective, pending: list[HloCollective]) -> tuple[HloCollective, ...]:
    """The elements of one pending tuple collective (same kind and axes) summing to ``p``."""
    by_instr: dict[str, list[HloCollective]] = {}
    for o in pending:
        if o.index is not None and o.kind is p.kind and o.axes == tuple(p.axes):
            by_instr.setdefault(o.instruction, []).append(o)
    for parts in by_instr.values():
        if abs(sum(o.bytes_per_device for o in parts) - p.bytes_per_device) < 1e-6:
            return tuple(parts)
    return ()
