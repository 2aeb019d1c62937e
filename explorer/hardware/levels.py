"""Link levels of a cluster and the link a mesh axis gets on them (shared links included).

A cluster is a stack of `Level`\\ s, innermost first: the NVLink domain, the node (host PCIe,
when it is slower than NVLink), the rail or leaf switch, the spine, the datacenter. Each
level groups ``group_size`` chips; a group of one level is made of whole groups of the level
below (its *children*; the children of the first level are single chips).

Devices are numbered as a mesh numbers them (row-major over the axes in device order, the
innermost axis last), and group ``k`` of a level holds the ``group_size`` consecutive ids
from ``k * group_size``: the innermost axes fill an NVLink domain first.

The link of a collective (`axis_link`) is priced as rings, one per group of the collective,
each visiting its devices in id order (the groups `Mesh.groups` lists), all running at once:

1. **Levels used.** Each ring edge ``a -> b`` runs on the lowest level whose group holds both
   ``a`` and ``b``. The collective's latency is that of its highest-latency used level; an
   edge of a network level ``L >= 1`` also rides the network levels below it (its NIC, then
   a leaf uplink, ...), so the bandwidth is the lowest per-flow bandwidth over the used
   levels and the network levels under the highest one.
2. **Flows.** ``flows`` at a level = the most ring edges leaving one child group through that
   level's links (edges of that level for level 0, of that level or above for network
   levels), counting every group's ring and every ``concurrent`` collective's rings. A
   contiguous id block holds a contiguous stretch of each ring, so this is one edge per
   group crossing it: eight DP rings leaving a TP-8 node are eight flows.
3. **Shared links.** The flows leaving one child group share its links into the level:

   - ``aggregate = bandwidth_bytes_per_s * child_size / oversubscription`` (all its links,
     less what an oversubscribed switch layer cannot carry),
   - ``one_link = bandwidth_bytes_per_s * child_size / rails`` (a single flow uses one NIC
     or rail and cannot go faster than it),
   - ``per_flow = min(one_link * channels, aggregate / flows)``, where ``channels`` is 1
     unless ``spread_rails`` is asked (`Cluster.multi_rail_rings`, for the ring
     collectives), then how many rails one group of the collective spreads over: the
     fewest of its members in one child group (each member can feed its own NIC), at most
     ``rails``. NCCL
     builds one ring per channel and its rail-optimised rings leave a node through
     different NICs (NCCL ``src/graph/search.cc``: the rings are searched NIC by NIC), so a
     ring over 64 GPUs with 8 per node moves through all 8 NICs of each node (nccl-tests'
     bus bandwidth across DGX nodes is the node's NIC total, not one NIC's), while eight
     DP rings beside TP-8 have one member per node each and one NIC each.

   Eight DP rings leaving a TP-8 node with eight 25 GB/s NICs (``bandwidth`` 25e9 per chip,
   ``rails`` 8): ``min(25e9, 200e9 / 8) = 25e9`` each. Had the node four 50 GB/s NICs
   (``rails`` 4), one lone flow would get ``50e9`` and eight would get ``200e9 / 8 = 25e9``.

``bandwidth_bytes_per_s`` of a level is thus the per-chip, one-direction share when every
chip of a child group sends across the level at once; the two-level profiles in
``datasets/hardware`` (intra-node, inter-node) are the special case of one NVLink level and
one network level with one NIC per chip. They give the two-level numbers wherever each
group of an axis sits alike on the nodes; a group straddling two nodes (12 devices on 8-chip
nodes: pp=2 x dp=3 x tp=2 has the dp group (6, 8, 10)) is now priced at the network, its
slowest edge, where the two-level model read the axis's label ("intra").

Every level above the first is on the way out of a first-level group: an edge of level
``L`` also crosses levels ``1 .. L-1`` (with a host PCIe level between two NVLink islands
of a node, NIC traffic does cross PCIe); only the first level's links (NVLink) carry just
their own edges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from explorer.checks import is_int, is_number
from explorer.hardware.errors import HardwareError, MeshError
from explorer.memo import memoize

__all__ = ["AxisLink", "Level", "axis_link", "check_levels", "local_share"]


@dataclass(frozen=True)
class Level:
    """One link level of a cluster, in SI units.

    Args:
        name: a short name, e.g. ``"nvlink"``, ``"ib-leaf"``, ``"ib-spine"``.
        group_size: chips in one group of this level (an NVLink domain: 8; a scalable unit
            of 32 DGX nodes: 256).
        bandwidth_bytes_per_s: per chip, one direction, when every chip of a child group
            sends across this level at once (a node's NIC bandwidth over its chips), before
            oversubscription.
        latency_s: per-step latency (alpha) of a transfer across this level.
        rails: independent links (NICs, rails) one child group has into this level; a single
            flow uses one of them. 1 for NVLink (a chip's links act as one to NCCL).
        oversubscription: the switch layer's oversubscription ratio (1 = non-blocking); the
            aggregate bandwidth of a child group is divided by it.
        source: where the figures come from, or "assumption".

    >>> Level("ib-leaf", 256, 25e9, 10e-6, rails=8).one_link_bytes_per_s(8)
    25000000000.0
    """

    name: str
    group_size: int
    bandwidth_bytes_per_s: float
    latency_s: float
    rails: int = 1
    oversubscription: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise HardwareError(
                f"Level name {self.name!r} is not a non-empty string; name the level, "
                "e.g. 'nvlink' or 'ib-leaf'"
            )
        for field in ("group_size", "rails"):
            value = getattr(self, field)
            if not is_int(value, minimum=1, numpy=True):
                raise HardwareError(
                    f"Level {self.name!r}: {field}={value!r} is not a positive int; give the "
                    f"{'chips in one group' if field == 'group_size' else 'links per child group'}"
                    " as a whole number >= 1"
                )
        _check_real(self.name, "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, zero=False)
        _check_real(self.name, "latency_s", self.latency_s, zero=True)
        _check_real(self.name, "oversubscription", self.oversubscription, zero=False)
        if self.oversubscription < 1:
            raise HardwareError(
                f"Level {self.name!r}: oversubscription={self.oversubscription!r} is below 1; "
                "give downlink:uplink capacity as a ratio >= 1 (1 = non-blocking)"
            )
        if not isinstance(self.source, str):
            raise HardwareError(f"Level {self.name!r}: source={self.source!r} is not a string")

    def aggregate_bytes_per_s(self, child_size: int) -> float:
        """Bandwidth out of one child group of ``child_size`` chips into this level, all its
        links together, after oversubscription."""
        return self.bandwidth_bytes_per_s * child_size / self.oversubscription

    def one_link_bytes_per_s(self, child_size: int) -> float:
        """The most one flow out of a child group of ``child_size`` chips can use: one rail."""
        return self.bandwidth_bytes_per_s * child_size / self.rails

    def per_flow_bytes_per_s(self, child_size: int, flows: int, channels: int = 1) -> float:
        """``min(one link x channels, aggregate / flows)``: what each of ``flows``
        concurrent flows out of one child group gets, a flow spread over ``channels``
        rails (at most ``rails``; NCCL's rings, one per NIC).

        >>> Level("ib", 64, 25e9, 1e-5, rails=8).per_flow_bytes_per_s(8, 8)
        25000000000.0
        >>> Level("ib", 64, 25e9, 1e-5, rails=8).per_flow_bytes_per_s(8, 1, channels=8)
        200000000000.0
        """
        links = max(1, min(int(channels), self.rails))
        return min(self.one_link_bytes_per_s(child_size) * links,
                   self.aggregate_bytes_per_s(child_size) / max(flows, 1))  # fmt: skip

    def __str__(self) -> str:
        over = f", {self.oversubscription:g}:1 oversubscribed" if self.oversubscription > 1 else ""
        return (
            f"{self.name} ({self.group_size} chips, {self.bandwidth_bytes_per_s / 1e9:g} GB/s "
            f"per chip, {self.latency_s * 1e6:g} us, {self.rails} rail(s){over})"
        )


class AxisLink(NamedTuple):
    """The link a collective over some mesh axes gets: what `axis_link` returns.

    ``levels`` are the levels its ring edges use (innermost first) and ``flows`` the
    concurrent flows sharing each one's links out of a child group (same order).
    """

    bandwidth_bytes_per_s: float
    latency_s: float
    levels: tuple[str, ...]
    flows: tuple[int, ...]


def check_levels(levels: Sequence[Level], owner: str, capacity: int) -> tuple[Level, ...]:
    """Validate a level stack: Levels, innermost first, each group made of whole groups of
    the level below, distinct names, the last level holding all ``capacity`` chips."""
    levels = tuple(levels)
    if not levels:
        raise HardwareError(f"Cluster {owner!r}: levels is empty; give at least one Level")
    for level in levels:
        if not isinstance(level, Level):
            raise HardwareError(
                f"Cluster {owner!r}: levels holds {level!r}; expected Level objects"
            )
    names = [level.name for level in levels]
    for name in names:
        if names.count(name) > 1:
            raise HardwareError(
                f"Cluster {owner!r}: level name {name!r} appears twice; name each level once"
            )
    for inner, outer in zip(levels, levels[1:], strict=False):
        if outer.group_size <= inner.group_size or outer.group_size % inner.group_size:
            raise HardwareError(
                f"Cluster {owner!r}: level {outer.name!r} groups {outer.group_size} chips, "
                f"not a larger multiple of level {inner.name!r}'s {inner.group_size}; list "
                "levels innermost first, each made of whole groups of the one before"
            )
    if levels[-1].group_size < capacity:
        raise HardwareError(
            f"Cluster {owner!r}: the outermost level {levels[-1].name!r} groups "
            f"{levels[-1].group_size} chips but the cluster holds {capacity}; add an outer "
            "level (e.g. the spine or the datacenter) that spans every chip"
        )
    return levels


def axis_link(
    levels: Sequence[Level],
    axis_sizes: Iterable[tuple[str, int]],
    axes: str | Iterable[str],
    concurrent: Iterable[str | Iterable[str]] = (),
    spread_rails: bool = False,
) -> AxisLink:
    """The bandwidth, latency, levels and flows of a ring collective over ``axes``.

    Args:
        levels: the cluster's levels, innermost first (`Cluster.levels`).
        axis_sizes: ``(name, size)`` pairs in device order, outermost first (the innermost
            axis fills an NVLink domain first).
        axes: the axes the collective runs over.
        concurrent: axis sets of other collectives running at the same time; where their
            rings use the same level they share its links (their flows add up).
        spread_rails: a group with several members in one child group spreads over that
            many of its rails (NCCL's channels; see the module docstring); False: one rail.

    A group of one device has no ring: the innermost level's figures, no levels, no flows.
    See the module docstring for the formulas.

    >>> from explorer.hardware import load
    >>> lv = load("a100-80g").levels
    >>> axis_link(lv, (("dp", 4), ("tp", 8)), "dp")
    AxisLink(bandwidth_bytes_per_s=25000000000.0, latency_s=1e-05, levels=('inter-node',), flows=(8,))
    """
    pairs = tuple((str(name), int(size)) for name, size in axis_sizes)
    main = _axis_tuple(pairs, axes)
    others = tuple(_axis_tuple(pairs, c) for c in concurrent)
    return _axis_link(tuple(levels), pairs, main, others, bool(spread_rails))


@memoize(maxsize=65536, name="hardware.axis_link")
def _axis_link(
    levels: tuple[Level, ...],
    pairs: tuple[tuple[str, int], ...],
    axes: tuple[str, ...],
    concurrent: tuple[tuple[str, ...], ...],
    spread_rails: bool = False,
) -> AxisLink:
    source, edge_level = _ring_edges(levels, pairs, axes)
    if source.size == 0:
        return AxisLink(levels[0].bandwidth_bytes_per_s, 0.0, (), ())
    used = tuple(int(i) for i in np.unique(edge_level))
    others = [_ring_edges(levels, pairs, other) for other in concurrent]
    # An edge of network level L (L >= 1) also rides the network levels below it (a NIC,
    # then a leaf uplink, ...); level 0 (NVLink) carries only its own edges.
    path = sorted(set(used) | set(range(1, max(used) + 1)))
    bandwidth, latency, flows_at = math.inf, 0.0, {}
    for i in path:
        child = 1 if i == 0 else levels[i - 1].group_size
        flows = _flows(child, i, [(source, edge_level), *others])
        flows_at[i] = flows
        channels = _channels(child, i, source, edge_level) if i and spread_rails else 1
        bandwidth = min(bandwidth, levels[i].per_flow_bytes_per_s(child, flows, channels))
    for i in used:
        latency = max(latency, levels[i].latency_s)
    return AxisLink(
        bandwidth, latency, tuple(levels[i].name for i in used), tuple(flows_at[i] for i in used)
    )


def _axis_tuple(pairs: tuple[tuple[str, int], ...], axes: str | Iterable[str]) -> tuple[str, ...]:
    names = (axes,) if isinstance(axes, str) else tuple(axes)
    known = [name for name, _ in pairs]
    for name in names:
        if name not in known:
            raise MeshError(f"unknown mesh axis {name!r}; the axes are {', '.join(known)}")
    if len(set(names)) != len(names):
        raise MeshError(f"axes {names} name an axis more than once; name each axis once")
    return names


def _ring_edges(
    levels: tuple[Level, ...], pairs: tuple[tuple[str, int], ...], axes: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(source device, level) of every ring edge of every group of the collective over
    ``axes``; each group's ring visits its devices in id order."""
    names = [name for name, _ in pairs]
    shape = tuple(size for _, size in pairs)
    moved = [names.index(a) for a in axes]
    n = math.prod(shape[i] for i in moved)
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    kept = [i for i in range(len(shape)) if i not in moved]
    ids = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    rows = np.sort(np.transpose(ids, kept + moved).reshape(-1, n), axis=1)
    a, b = rows.ravel(), np.roll(rows, -1, axis=1).ravel()
    edge_level = np.full(a.size, len(levels) - 1, dtype=np.int64)
    for i in range(len(levels) - 1, -1, -1):  # outermost first: the lowest match wins
        g = levels[i].group_size
        edge_level[a // g == b // g] = i
    return a, edge_level


def _flows(child: int, level: int, edges: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """The most ring edges leaving one child group through ``level``'s links, all the
    collectives in ``edges`` together: edges of that level (level 0) or of it and above
    (network levels), counted by the child group of their source device."""
    counts = np.zeros(1, dtype=np.int64)
    for source, edge_level in edges:
        mask = edge_level == level if level == 0 else edge_level >= level
        if not mask.any():
            continue
        block = np.bincount(source[mask] // child)
        if block.size > counts.size:
            block[: counts.size] += counts
            counts = block
        else:
            counts[: block.size] += block
    return int(counts.max())


def local_share(
    levels: Sequence[Level], axis_sizes: Iterable[tuple[str, int]], axes: str | Iterable[str]
) -> tuple[int, int, int]:
    """``(n, g, top)`` of a collective over ``axes``: its group size ``n``, the fewest
    members ``g`` of one group inside one child group of ``top``, the highest level its
    ring edges use (``g = n`` when it stays inside one child group, ``top = 0``). An
    all-to-all sends ``(g - 1) / n`` of a device's buffer below ``top`` and ``(n - g) / n``
    across it.

    >>> from explorer.hardware import load
    >>> local_share(load("h100-sxm").levels, (("ep", 32),), "ep")
    (32, 8, 1)
    """
    pairs = tuple((str(name), int(size)) for name, size in axis_sizes)
    main = _axis_tuple(pairs, axes)
    levels = tuple(levels)
    source, edge_level = _ring_edges(levels, pairs, main)
    if source.size == 0:
        return 1, 1, 0
    n = math.prod(dict(pairs)[a] for a in main)
    top = int(edge_level.max())
    if top == 0:
        return n, n, 0
    child = levels[top - 1].group_size
    group = np.arange(source.size) // n
    _, counts = np.unique(group * (source.max() + 1) + source // child, return_counts=True)
    return n, int(counts.min()), top


def _channels(child: int, level: int, source: np.ndarray, edge_level: np.ndarray) -> int:
    """The rails one group of the collective can spread over at ``level``: in each child
    group it leaves, its members there (every member a source of one ring edge) over its
    ring edges leaving through ``level`` or above (one per group crossing); the fewest over
    the child groups it leaves."""
    leaving = edge_level >= level
    if not leaving.any():
        return 1
    members = np.bincount(source // child)
    out = np.bincount(source[leaving] // child, minlength=members.size)
    crossed = out > 0
    return max(1, int((members[crossed] // out[crossed]).min()))


def _check_real(owner: str, field: str, value: object, *, zero: bool) -> None:
    if not is_number(value, minimum=0, numpy=True) or (value == 0 and not zero):
        need = "non-negative" if zero else "positive"
        raise HardwareError(
            f"Level {owner!r}: {field}={value!r} is not a {need} finite number; give it in "
            "SI units (bytes/s, seconds)"
        )
