"""`Mesh`: named device axes with sizes, each mapped to an intra- or inter-node link and to
the cluster's link levels its rings cross (`explorer.hardware.levels`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.checks import is_int
from explorer.hardware.catalog import resolve
from explorer.hardware.cluster import LINK_LEVELS, Cluster, LinkLevel
from explorer.hardware.collectives import (
    ALGORITHMS,
    Algorithm,
    CollectiveKind,
    bytes_sent_per_device,
    hierarchical_time,
    ring_time,
    tree_time,
)
from explorer.hardware.errors import HardwareError, MeshError
from explorer.hardware.levels import AxisLink, local_share

__all__ = ["MAX_DEVICES", "REST_OF_NODE", "Mesh"]

#: Most devices a mesh may hold. Meshes materialise their device ids (8 bytes each, more for
#: groups), so 10**12 devices would need terabytes; the largest clusters hold ~10**5 chips.
#: Raise it by assigning ``explorer.hardware.mesh.MAX_DEVICES``.
MAX_DEVICES = 2**20

#: The padding axis of `Mesh.device_order` (not a mesh axis: the node's other chips).
REST_OF_NODE = "_rest_of_node"

AxesSpec = Mapping[str, int] | Iterable[tuple[str, int]]


@dataclass(frozen=True, init=False)
class Mesh:
    """A logical device mesh: named axes, row-major device ids, and a link level per axis.

    Device ``d`` sits at ``coords(d)`` = ``np.unravel_index(d, shape)``; node ``k`` holds the
    ``chips_per_node`` consecutive ids from ``k * chips_per_node``. Hence by default the
    innermost (last) axes stay inside a node: walking the axes from last to first, an axis
    is ``"intra"`` while the product of its size and the sizes after it is at most
    ``chips_per_node``, and ``"inter"`` from then on.

    Args:
        axes: ``{"dp": 4, "tp": 8}`` or ``(("dp", 4), ("tp", 8))``; order is kept.
        hardware: a profile name (``"a100-80g"``), a `Cluster`, or None for a purely logical
            mesh (link, bandwidth and time queries then raise). A mesh larger than the
            profile gets it `Cluster.extended` (its outermost level repeats); ``hardware``
            is then the extended cluster, and ``str(mesh)`` says so.
        links: per-axis overrides, ``{"dp": "intra"}``; axes not named keep their default.

    >>> mesh = Mesh({"dp": 4, "tp": 8}, hardware="a100-80g")
    >>> print(mesh)
    Mesh(dp=4 [inter], tp=8 [intra]) on a100-80g
    >>> mesh.groups(("dp",))[0]
    (0, 8, 16, 24)
    """

    axes: tuple[tuple[str, int], ...]
    hardware: Cluster | None
    links: tuple[tuple[str, LinkLevel], ...]

    def __init__(
        self,
        axes: AxesSpec,
        hardware: str | Cluster | None = None,
        links: Mapping[str, LinkLevel] | Iterable[tuple[str, LinkLevel]] | None = None,
    ) -> None:
        pairs = _check_axes(axes)
        cluster = None if hardware is None else resolve(hardware)
        size = math.prod(size for _, size in pairs)
        if size > MAX_DEVICES:
            raise MeshError(
                f"mesh {_describe(pairs)} has {size:,} devices, more than MAX_DEVICES="
                f"{MAX_DEVICES:,}; shrink an axis, or raise explorer.hardware.mesh.MAX_DEVICES "
                "(the device ids take 8 bytes each)"
            )
        if cluster is not None and size > cluster.capacity:
            # the profile's size is not a ceiling: its outermost level repeats
            # (Cluster.extended); mesh.hardware then says it was extended
            try:
                cluster = cluster.extended(size)
            except HardwareError as e:
                raise MeshError(
                    f"mesh {_describe(pairs)} has {size} devices but {cluster.name} holds at "
                    f"most {cluster.capacity} ({cluster.max_nodes} nodes x "
                    f"{cluster.chips_per_node} chips) and cannot be extended ({e}); shrink an "
                    "axis or use a profile with an inter-node level"
                ) from None
        placed = _place(pairs, cluster, _check_links(pairs, links))
        object.__setattr__(self, "axes", pairs)
        object.__setattr__(self, "hardware", cluster)
        object.__setattr__(self, "links", placed)
        # (kind, axes, algorithm, concurrent) -> how the collective's seconds follow from its
        # size (`_link_plan`): not a field (equality, hash and repr ignore it)
        object.__setattr__(self, "_link_plans", {})

    # ----- shape -------------------------------------------------------------------------
    @property
    def axis_names(self) -> tuple[str, ...]:
        """Axis names in the order given."""
        return tuple(name for name, _ in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Axis sizes in the order given."""
        return tuple(size for _, size in self.axes)

    @property
    def size(self) -> int:
        """Number of devices: the product of the axis sizes."""
        return math.prod(self.shape)

    def axis_size(self, name: str) -> int:
        """Size of axis ``name``.

        >>> Mesh({"dp": 2, "tp": 4}).axis_size("tp")
        4
        """
        for n, size in self.axes:  # planners call this in their inner loops: no allocation
            if n == name:
                return size
        return self.shape[self._index(name)]  # raises the error naming the axis

    @property
    def devices(self) -> np.ndarray:
        """Read-only int array of shape `shape` holding device ids ``0..size-1`` row-major.

        >>> Mesh({"dp": 2, "tp": 2}).devices.tolist()
        [[0, 1], [2, 3]]
        """
        ids = np.arange(self.size, dtype=np.int64).reshape(self.shape)
        ids.flags.writeable = False
        return ids

    def coords(self, device: int) -> tuple[int, ...]:
        """Coordinates of ``device`` along each axis.

        >>> Mesh({"dp": 2, "tp": 4}).coords(6)
        (1, 2)
        """
        if not is_int(device, minimum=0, maximum=self.size - 1, numpy=True):
            raise MeshError(
                f"device {device!r} is not in mesh {self}; ids run from 0 to {self.size - 1}"
            )
        return tuple(int(c) for c in np.unravel_index(int(device), self.shape))

    def groups(self, axes: str | Iterable[str]) -> tuple[tuple[int, ...], ...]:
        """The device groups that communicate along ``axes`` (all other coordinates fixed).

        Each group is sorted and groups are ordered by their first device.

        >>> Mesh({"dp": 2, "tp": 4}).groups(("dp",))
        ((0, 4), (1, 5), (2, 6), (3, 7))
        """
        names = self._check_axis_names(axes)
        moved = [self._index(name) for name in names]
        kept = [i for i in range(len(self.axes)) if i not in moved]
        width = math.prod(self.shape[i] for i in moved)
        rows = np.transpose(self.devices, kept + moved).reshape(-1, width)
        return tuple(sorted(tuple(sorted(int(d) for d in row)) for row in rows))

    # ----- links -------------------------------------------------------------------------
    def link(self, axis: str) -> LinkLevel:
        """``"intra"`` or ``"inter"``: the link that carries traffic along ``axis``.

        >>> Mesh({"dp": 4, "tp": 8}, hardware="a100-80g").link("dp")
        'inter'
        """
        self._index(axis)
        for name, level in self.links:
            if name == axis:
                return level
        raise MeshError(
            f"axis {axis!r} of {self} has no link level: the mesh has no hardware. "
            f"Pass hardware=... (one of explorer.hardware.names()) or links={{{axis!r}: ...}}"
        )

    def bandwidth(self, axis: str) -> float:
        """Per-device one-way bandwidth (bytes/s) a ring along ``axis`` gets: its slowest
        level, shared by the rings of the other groups (`axis_link`).

        >>> Mesh({"dp": 4, "tp": 8}, hardware="a100-80g").bandwidth("tp")
        300000000000.0
        """
        if self.axis_size(axis) == 1:
            return self._cluster("bandwidth").bandwidth(self.link(axis))
        return self.axis_link((axis,)).bandwidth_bytes_per_s

    def latency(self, axis: str) -> float:
        """Per-step latency (s) of a ring along ``axis`` (its highest-latency level)."""
        if self.axis_size(axis) == 1:
            return self._cluster("latency").latency(self.link(axis))
        return self.axis_link((axis,)).latency_s

    @property
    def device_order(self) -> tuple[tuple[str, int], ...]:
        """The axes in the order device ids run on the hardware, outermost first.

        With the default placement this is `axes`: the mesh's devices packed densely onto
        nodes, row-major. When ``links`` moved an axis off its default level, the mesh is
        read as a slice of a larger job: the ``"inter"`` axes come first, then a padding
        axis `REST_OF_NODE` standing for the node's other chips (other replicas, running the
        same collectives), then the ``"intra"`` axes, so that every step along an inter axis
        changes node and the intra axes stay in one.

        >>> Mesh({"dp": 4, "tp": 8}, "a100-80g").device_order
        (('dp', 4), ('tp', 8))
        >>> Mesh({"dp": 4, "tp": 2}, "a100-80g", links={"dp": "inter"}).device_order
        (('dp', 4), ('_rest_of_node', 4), ('tp', 2))
        """
        cluster = self._cluster("device_order")
        levels = dict(self.links)
        if levels == dict(_place(self.axes, cluster, {})):
            return self.axes
        inter = tuple(p for p in self.axes if levels[p[0]] == "inter")
        intra = tuple(p for p in self.axes if levels[p[0]] != "inter")
        rest = -(-cluster.chips_per_node // math.prod(size for _, size in intra))
        pad = ((REST_OF_NODE, rest),) if inter and rest > 1 else ()
        return inter + pad + intra

    def axis_link(
        self, axes: str | Iterable[str], concurrent: Iterable[str | Iterable[str]] = ()
    ) -> AxisLink:
        """The link of a ring over ``axes`` on the cluster's levels: bandwidth (bytes/s),
        latency (s), the levels its edges use and the flows sharing each level's links.

        ``concurrent`` names the axis sets of collectives running at the same time (their
        flows share the levels both use). See `Cluster.axis_bandwidth`.

        >>> Mesh({"dp": 4, "tp": 8}, hardware="a100-80g").axis_link("dp").levels
        ('inter-node',)
        """
        names = self._check_axis_names(axes)
        others = tuple(self._check_axis_names(c) for c in concurrent)
        return self._cluster("axis_link").axis_bandwidth(self.device_order, names, others)

    def levels(self, axes: str | Iterable[str]) -> tuple[str, ...]:
        """Names of the link levels a ring over ``axes`` crosses, innermost first (``()``
        for a group of one device).

        >>> Mesh({"dp": 4, "tp": 8}, hardware="a100-80g").levels("tp")
        ('intra-node',)
        """
        return self.axis_link(axes).levels

    def level_summary(self) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
        """``(axis, size, levels crossed)`` per axis, in axis order; for views and reports.

        >>> Mesh({"dp": 4, "tp": 8}, hardware="a100-80g").level_summary()
        (('dp', 4, ('inter-node',)), ('tp', 8, ('intra-node',)))
        """
        return tuple((name, size, self.levels((name,))) for name, size in self.axes)

    # ----- collectives -------------------------------------------------------------------
    def collective_bytes(
        self, kind: CollectiveKind | str, size_bytes: float, axes: str | Iterable[str]
    ) -> float:
        """Bytes each device sends for a ring/direct collective over ``axes``.

        See `bytes_sent_per_device`; ``size_bytes`` follows the conventions there.

        >>> Mesh({"dp": 2, "tp": 4}).collective_bytes("all-gather", 4096, ("tp",))
        3072.0
        """
        plans = self.__dict__.get("_link_plans")
        if plans is None or not isinstance(axes, str | tuple):
            return bytes_sent_per_device(kind, size_bytes, self._group_size(axes))
        key = ("group size", axes)  # no collective kind is a str like this
        n = plans.get(key)
        if n is None:
            n = plans[key] = self._group_size(axes)
        return bytes_sent_per_device(kind, size_bytes, n)

    def collective_time(
        self,
        kind: CollectiveKind | str,
        size_bytes: float,
        axes: str | Iterable[str],
        algorithm: Algorithm = "auto",
        concurrent: Iterable[str | Iterable[str]] = (),
    ) -> float:
        """Seconds for a collective over the devices spanned by ``axes``.

        Links come from the cluster's levels (`axis_link`): the slowest level the ring
        crosses, its links shared by every group's ring and by the ``concurrent``
        collectives' rings (axis sets running at the same time).

        ``algorithm``:

        - ``"ring"``: one ring over all ``n`` devices, at the slowest level it crosses
          (lowest per-flow bandwidth, highest latency).
        - ``"tree"``: `tree_time` at that link (all-reduce only).
        - ``"hierarchical"``: `hierarchical_time` with ``n_intra`` = product of the intra
          axes' sizes (a ring over them) and ``n_inter`` = product of the inter axes' sizes
          (one ring per intra rank over them, all at once).
        - ``"auto"``: ``"ring"`` when every axis uses one link level (or for send/recv),
          ``"hierarchical"`` when intra and inter axes mix.

        >>> mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
        >>> round(mesh.collective_time("all-reduce", 2**30, ("tp",)) * 1e3, 3)  # ms
        6.333
        >>> round(mesh.collective_time("all-reduce", 2**30, ("dp", "tp")) * 1e3, 3)
        11.722
        """
        plans = self.__dict__.get("_link_plans")
        key = None  # kept only for values: a list or generator of axes is not memoized
        if plans is not None and isinstance(axes, str | tuple) and isinstance(concurrent, tuple):
            try:
                key = (kind, axes, algorithm, concurrent)
                plan = plans.get(key)
            except TypeError:  # an unhashable member (a list inside the tuple)
                key, plan = None, None
        if key is None or plan is None:
            plan = self._link_plan(kind, axes, algorithm, concurrent)
            if key is not None:
                plans[key] = plan
        return _apply_plan(plan, size_bytes)

    def _link_plan(
        self,
        kind: CollectiveKind | str,
        axes: str | Iterable[str],
        algorithm: Algorithm,
        concurrent: Iterable[str | Iterable[str]],
    ) -> tuple:
        """What `collective_time` derives from everything but the size: the group, its
        algorithm and the links of each phase (which levels the ring crosses, their shared
        bandwidth and latency). They do not depend on the message size, and a plan search
        asks for the same collective at hundreds of sizes, so `collective_time` keeps them
        per (kind, axes, algorithm, concurrent) and applies the size in `_apply_plan` with
        the same formulas (`ring_time`, `tree_time`, `hierarchical_time`)."""
        kind = CollectiveKind.parse(kind)
        if algorithm not in ALGORITHMS:
            raise MeshError(
                f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
            )
        names = self._check_axis_names(axes)
        others = tuple(self._check_axis_names(c) for c in concurrent)
        n = self._group_size(names)
        self._cluster("collective_time")
        levels = {self.link(name) for name in names}
        if n == 1:
            return ("zero",)
        if algorithm == "auto":
            mixed = len(levels) > 1 and kind is not CollectiveKind.SEND_RECV
            algorithm = "hierarchical" if mixed else "ring"
        if algorithm == "hierarchical":
            intra = tuple(a for a in names if self.link(a) == "intra")
            inter = tuple(a for a in names if self.link(a) != "intra")
            return ("hierarchical", kind, *self._hierarchical_links(kind, intra, inter, others))
        # Ring and tree run at the slowest link any of their steps crosses; a ring
        # collective's group spreads over its members' NICs on a multi-rail cluster.
        spread = kind is not CollectiveKind.ALL_TO_ALL and kind is not CollectiveKind.SEND_RECV
        link = self._cluster("collective_time").axis_bandwidth(
            self.device_order, names, others, spread_rails=spread
        )
        timer = tree_time if algorithm == "tree" else ring_time
        cluster = self._cluster("collective_time")
        if kind is CollectiveKind.ALL_TO_ALL and cluster.multi_rail_rings:
            n_, g, top = local_share(cluster.levels, self.device_order, names)
            if top > 0 and g > 1:
                # peers inside the child group get their share below the top level, the
                # others across it, both at once: the slower of the two
                alpha = ring_time(kind, 0.0, n, link.bandwidth_bytes_per_s, link.latency_s)
                inner = cluster.levels[top - 1].bandwidth_bytes_per_s
                return ("split_all_to_all", alpha, n, g, link.bandwidth_bytes_per_s, inner)
        return ("ring", timer, kind, n, link.bandwidth_bytes_per_s, link.latency_s)

    def hierarchical_time(
        self,
        kind: CollectiveKind | str,
        size_bytes: float,
        inner: str | Iterable[str],
        outer: str | Iterable[str],
        concurrent: Iterable[str | Iterable[str]] = (),
    ) -> float:
        """Seconds for a two-level collective over ``inner`` + ``outer`` axes: rings over
        ``inner`` inside each outer group, rings over ``outer`` across them, each phase on its
        own axes' link (`axis_link`); the phases as in `hierarchical_time`.

        ``algorithm="hierarchical"`` of `collective_time` is this with the intra-node axes
        inner and the others outer; `explorer.hardware.wan.collective_time` uses it with the
        axes inside a datacenter inner and the datacenter axis outer.

        >>> mesh = Mesh({"dp": 2, "tp": 8}, hardware="a100-80g")
        >>> mesh.hierarchical_time("all-reduce", 2**30, ("tp",), ("dp",)) == (
        ...     mesh.collective_time("all-reduce", 2**30, ("dp", "tp")))
        True
        """
        others = tuple(self._check_axis_names(c) for c in concurrent)
        return hierarchical_time(
            kind, size_bytes, *self._hierarchical_links(kind, inner, outer, others)
        )

    def _hierarchical_links(
        self, kind, inner: str | Iterable[str], outer: str | Iterable[str], others: tuple
    ) -> tuple[int, int, tuple[float, float], tuple[float, float]]:
        """(inner group size, outer group size, inner link, outer link) of
        `hierarchical_time`: everything but the size."""
        inner_axes = self._check_axis_names(inner)
        outer_axes = self._check_axis_names(outer)
        self._check_axis_names(inner_axes + outer_axes)  # an axis in both raises
        return (
            self._group_size(inner_axes),
            self._group_size(outer_axes),
            self._phase_link(inner_axes, others, kind),
            self._phase_link(outer_axes, others, kind),
        )

    def _phase_link(
        self, axes: tuple[str, ...], others: tuple[tuple[str, ...], ...], kind=None
    ) -> tuple[float, float]:
        """(bandwidth, latency) of one phase of a hierarchical collective; a phase over one
        device is never timed (its ring_time is 0), so any positive link does. A ring
        phase spreads over its members' NICs on a multi-rail cluster (`axis_link`)."""
        cluster = self._cluster("collective_time")
        if self._group_size(axes) == 1:
            level = cluster.levels[0]
            return level.bandwidth_bytes_per_s, level.latency_s
        kind = CollectiveKind.parse(kind) if kind is not None else CollectiveKind.ALL_TO_ALL
        spread = kind not in (CollectiveKind.ALL_TO_ALL, CollectiveKind.SEND_RECV)
        link = cluster.axis_bandwidth(self.device_order, axes, others, spread_rails=spread)
        return link.bandwidth_bytes_per_s, link.latency_s

    # ----- printing ----------------------------------------------------------------------
    def __str__(self) -> str:
        levels = dict(self.links)
        parts = [
            f"{name}={size}" + (f" [{levels[name]}]" if name in levels else "")
            for name, size in self.axes
        ]
        where = f" on {self.hardware.name}" if self.hardware is not None else ""
        if self.hardware is not None and self.hardware.extension:
            where += f" ({self.hardware.extension})"
        return f"Mesh({', '.join(parts)}){where}"

    def __repr__(self) -> str:
        return f"Mesh({dict(self.axes)!r}, hardware={self.hardware!r}, links={dict(self.links)!r})"

    # ----- helpers -----------------------------------------------------------------------
    def _index(self, name: str) -> int:
        for i, (axis, _) in enumerate(self.axes):
            if axis == name:
                return i
        raise MeshError(
            f"unknown mesh axis {name!r}; this mesh has axes {', '.join(self.axis_names)}"
        )

    def _check_axis_names(self, axes: str | Iterable[str]) -> tuple[str, ...]:
        names = (axes,) if isinstance(axes, str) else tuple(axes)
        for name in names:
            self._index(name)
        if len(set(names)) != len(names):
            raise MeshError(f"axes {names} name an axis more than once; name each axis once")
        return names

    def _group_size(self, axes: str | Iterable[str]) -> int:
        return math.prod(self.axis_size(name) for name in self._check_axis_names(axes))

    def _cluster(self, query: str) -> Cluster:
        if self.hardware is None:
            raise MeshError(
                f"{query} needs hardware but {self} is a logical mesh; "
                f"build it with Mesh(..., hardware=NAME), NAME in explorer.hardware.names()"
            )
        return self.hardware


def _apply_plan(plan: tuple, size_bytes: float) -> float:
    """Seconds of a collective of ``size_bytes`` from its `Mesh._link_plan`."""
    how = plan[0]
    if how == "ring":
        _, timer, kind, n, bandwidth, latency = plan
        return timer(kind, size_bytes, n, bandwidth, latency)
    if how == "hierarchical":
        _, kind, n_intra, n_inter, intra, inter = plan
        return hierarchical_time(kind, size_bytes, n_intra, n_inter, intra, inter)
    if how == "split_all_to_all":
        _, alpha, n, g, bandwidth, inner = plan
        return alpha + max((n - g) / n * size_bytes / bandwidth, (g - 1) / n * size_bytes / inner)
    return 0.0


def _check_axes(axes: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(axes, Mapping):
        items = list(axes.items())
    elif isinstance(axes, str) or not isinstance(axes, Iterable):
        raise MeshError(
            f"mesh axes must be a dict like {{'dp': 4, 'tp': 8}} or (name, size) pairs, "
            f"got {axes!r}"
        )
    else:
        items = list(axes)
    if not items:
        raise MeshError("mesh has no axes; give at least one, e.g. Mesh({'dp': 1})")
    pairs: list[tuple[str, int]] = []
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise MeshError(f"mesh axis entry {item!r} is not a (name, size) pair")
        name, size = item
        if not isinstance(name, str) or not name.isidentifier():
            raise MeshError(
                f"mesh axis name {name!r} is not a Python identifier; use names like 'dp', 'tp'"
            )
        if any(name == seen for seen, _ in pairs):
            raise MeshError(f"mesh axis {name!r} appears twice; give each axis a distinct name")
        if not is_int(size, minimum=1, numpy=True):
            raise MeshError(f"mesh axis {name!r} has size {size!r}; sizes must be positive ints")
        pairs.append((name, int(size)))
    return tuple(pairs)


def _check_links(pairs: tuple[tuple[str, int], ...], links: Any) -> dict[str, str]:
    if links is None:
        return {}
    given = dict(links.items() if isinstance(links, Mapping) else links)
    axis_names = [name for name, _ in pairs]
    for axis, level in given.items():
        if axis not in axis_names:
            raise MeshError(
                f"links names unknown axis {axis!r}; the mesh has axes {', '.join(axis_names)}"
            )
        if level not in LINK_LEVELS:
            raise MeshError(
                f"links[{axis!r}] is {level!r}; expected one of {', '.join(LINK_LEVELS)}"
            )
    return given


def _place(
    pairs: tuple[tuple[str, int], ...], cluster: Cluster | None, overrides: dict[str, str]
) -> tuple[tuple[str, LinkLevel], ...]:
    """Link level per axis: defaults (innermost axes intra-node) then overrides."""
    levels: dict[str, str] = {}
    if cluster is not None:
        cumulative = 1
        for name, size in reversed(pairs):
            cumulative *= size
            levels[name] = "intra" if cumulative <= cluster.chips_per_node else "inter"
    levels.update(overrides)
    if cluster is not None:
        intra = [(name, size) for name, size in pairs if levels[name] == "intra"]
        product = math.prod(size for _, size in intra)
        if product > cluster.chips_per_node:
            raise MeshError(
                f"axes {', '.join(name for name, _ in intra)} are placed on intra-node links but "
                f"span {product} devices, more than the {cluster.chips_per_node} chips per node "
                f"of {cluster.name}; mark some of them 'inter' in links"
            )
    return tuple((name, levels[name]) for name, _ in pairs if name in levels)  # type: ignore[misc]


def _describe(pairs: tuple[tuple[str, int], ...]) -> str:
    return "(" + ", ".join(f"{name}={size}" for name, size in pairs) + ")"
