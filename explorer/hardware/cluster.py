"""`Cluster`: identical chips joined by a stack of link levels (NVLink domain, node, rail or
leaf switch, spine, ...); the two-level intra-/inter-node profile is the default stack."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from explorer.checks import nonnegative_number, positive_int, positive_number
from explorer.hardware.chip import Chip
from explorer.hardware.errors import HardwareError
from explorer.hardware.levels import AxisLink, Level, axis_link, check_levels

__all__ = ["LINK_LEVELS", "Cluster", "LinkLevel"]

LinkLevel = Literal["intra", "inter"]
LINK_LEVELS: tuple[str, ...] = get_args(LinkLevel)


@dataclass(frozen=True)
class Cluster:
    """A homogeneous cluster profile, in SI units.

    Bandwidths are per chip and per direction (unidirectional): what one chip can push to its
    peers at once. NVLink3's "600 GB/s" (both directions summed) is 300e9 here.

    Args:
        name: catalog name, e.g. ``"a100-80g"``.
        chip: the accelerator in every slot.
        chips_per_node: chips sharing the fast intra-node fabric (NVLink/NVSwitch, HCCS, ...).
        intra_node_bandwidth_bytes_per_s: per-chip unidirectional intra-node bandwidth.
        intra_node_latency_s: per-step latency (alpha) of an intra-node transfer.
        inter_node_bandwidth_bytes_per_s: per-chip unidirectional inter-node bandwidth
            (node NIC bandwidth divided by chips_per_node).
        inter_node_latency_s: per-step latency (alpha) of an inter-node transfer.
        max_nodes: the most nodes a plan may use.
        source: where the numbers come from (spec sheets, papers).
        link_levels: the cluster's `Level` stack, innermost first, when it has more than the
            two default levels (a spine, an oversubscription ratio, NICs shared by chips).
            ``()`` (the default) derives the stack from the intra/inter fields: an
            ``"intra-node"`` level of ``chips_per_node`` chips and an ``"inter-node"`` level
            of the whole cluster with one NIC per chip (``rails = chips_per_node``). Given
            levels must agree with the intra/inter fields: ``intra_node_*`` are the figures
            of the level grouping ``chips_per_node`` chips, ``inter_node_*`` those of the
            level above it.

    `levels` is the resolved stack (given or derived); `axis_bandwidth` prices a mesh axis
    on it (slowest level crossed, links shared by concurrent rings).

    >>> from explorer.hardware import load
    >>> load("a100-80g").capacity
    8192
    """

    name: str
    chip: Chip
    chips_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_bandwidth_bytes_per_s: float
    inter_node_latency_s: float
    max_nodes: int
    source: str = ""
    link_levels: tuple[Level, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise HardwareError(f"Cluster name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.chip, Chip):
            raise HardwareError(f"Cluster {self.name!r}: chip must be a Chip, got {self.chip!r}")
        for field_ in ("chips_per_node", "max_nodes"):
            value = getattr(self, field_)
            positive_int(value, f"Cluster {self.name!r}: {field_}", error=HardwareError)
        for field_ in ("intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s"):
            _check_number(self.name, field_, getattr(self, field_), allow_zero=False)
        for field_ in ("intra_node_latency_s", "inter_node_latency_s"):
            _check_number(self.name, field_, getattr(self, field_), allow_zero=True)
        if not isinstance(self.link_levels, tuple | list):
            raise HardwareError(
                f"Cluster {self.name!r}: link_levels={self.link_levels!r} is not a tuple of "
                "Level; give a tuple, innermost level first, or () for the two-level default"
            )
        given = tuple(self.link_levels)
        object.__setattr__(self, "link_levels", given)
        levels = check_levels(self.levels, self.name, self.capacity)
        if given:
            _check_agrees(self, levels)

    @property
    def levels(self) -> tuple[Level, ...]:
        """The link levels, innermost first: `link_levels` when given, else the two-level
        stack derived from the intra/inter fields (computed, not stored, so that
        ``dataclasses.replace`` and ``Cluster(**vars(c))`` see only the init fields)."""
        if self.link_levels:
            return self.link_levels
        return _two_levels(
            self.chips_per_node, self.max_nodes,
            self.intra_node_bandwidth_bytes_per_s, self.intra_node_latency_s,
            self.inter_node_bandwidth_bytes_per_s, self.inter_node_latency_s,
        )  # fmt: skip

    @property
    def capacity(self) -> int:
        """Total chips: ``chips_per_node * max_nodes``."""
        return self.chips_per_node * self.max_nodes

    @property
    def price_per_chip_hour(self) -> float | None:
        """US dollars per chip-hour of the cluster's chip (None: no price in the profile)."""
        return self.chip.price_per_chip_hour

    def bandwidth(self, level: LinkLevel) -> float:
        """Per-chip unidirectional bandwidth (bytes/s) of the ``"intra"`` or ``"inter"`` link.

        >>> from explorer.hardware import load
        >>> load("a100-80g").bandwidth("intra")
        300000000000.0
        """
        return (
            self.intra_node_bandwidth_bytes_per_s
            if _check_level(level) == "intra"
            else self.inter_node_bandwidth_bytes_per_s
        )

    def latency(self, level: LinkLevel) -> float:
        """Per-step latency (s) of the ``"intra"`` or ``"inter"`` link.

        >>> from explorer.hardware import load
        >>> load("a100-80g").latency("intra")
        5e-06
        """
        return (
            self.intra_node_latency_s
            if _check_level(level) == "intra"
            else self.inter_node_latency_s
        )

    def axis_bandwidth(
        self,
        axis_sizes: Iterable[tuple[str, int]] | dict[str, int],
        axis: str | Iterable[str],
        concurrent: Iterable[str | Iterable[str]] = (),
    ) -> AxisLink:
        """Bandwidth (bytes/s), latency (s), levels used and flows of a ring over ``axis``.

        Args:
            axis_sizes: the mesh axes in device order, outermost first, as ``{name: size}``
                or ``(name, size)`` pairs; the innermost (last) axes fill an NVLink domain
                first, as in `Mesh`.
            axis: one axis name or several (a collective over their product).
            concurrent: axis sets of collectives running at the same time; they share the
                links of every level both use.

        The bandwidth is the slowest level the ring crosses, each level's links shared by
        the concurrent flows that leave one of its child groups (`explorer.hardware.levels`
        gives the formula). The training step model and the search price every collective
        through it (`Mesh.collective_time`).

        >>> from explorer.hardware import load
        >>> link = load("a100-80g").axis_bandwidth({"dp": 4, "tp": 8}, "dp")
        >>> link.bandwidth_bytes_per_s, link.levels
        (25000000000.0, ('inter-node',))
        """
        pairs = tuple(axis_sizes.items()) if isinstance(axis_sizes, dict) else tuple(axis_sizes)
        return axis_link(self.levels, pairs, axis, concurrent)

    def level(self, name: str) -> Level:
        """The level called ``name``."""
        for level in self.levels:
            if level.name == name:
                return level
        raise HardwareError(
            f"cluster {self.name!r} has no level {name!r}; its levels are "
            f"{', '.join(lv.name for lv in self.levels)}"
        )

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.max_nodes} x {self.chips_per_node} x {self.chip.name} "
            f"(intra {self.intra_node_bandwidth_bytes_per_s / 1e9:g} GB/s, "
            f"inter {self.inter_node_bandwidth_bytes_per_s / 1e9:g} GB/s per chip)"
        )


@functools.lru_cache(maxsize=1024)
def _two_levels(
    per_node: int, nodes: int, intra_bw: float, intra_lat: float, inter_bw: float, inter_lat: float
) -> tuple[Level, ...]:
    """The default stack of a two-level profile: NVLink-like inside a node, one NIC per chip
    between nodes (so a single ring leaving a node runs at one chip's share, as before)."""
    intra = Level("intra-node", per_node, intra_bw, intra_lat, rails=1,
                  source="intra_node_* fields")  # fmt: skip
    if nodes == 1:
        return (intra,)
    inter = Level("inter-node", per_node * nodes, inter_bw, inter_lat, rails=per_node,
                  source="inter_node_* fields (one NIC per chip)")  # fmt: skip
    return intra, inter


def _check_agrees(cluster: Cluster, levels: tuple[Level, ...]) -> None:
    """Given levels and the intra/inter fields must tell the same story."""
    node = [i for i, lv in enumerate(levels) if lv.group_size == cluster.chips_per_node]
    if not node:
        raise HardwareError(
            f"Cluster {cluster.name!r}: no level groups chips_per_node={cluster.chips_per_node} "
            f"chips (levels group {', '.join(str(lv.group_size) for lv in levels)}); add the "
            "node as a level or fix chips_per_node"
        )
    checks = [("intra_node", levels[node[0]])]
    if node[0] + 1 < len(levels):
        checks.append(("inter_node", levels[node[0] + 1]))
    for prefix, level in checks:
        for suffix, value in (
            ("bandwidth_bytes_per_s", level.bandwidth_bytes_per_s),
            ("latency_s", level.latency_s),
        ):
            mine = getattr(cluster, f"{prefix}_{suffix}")
            if not math.isclose(mine, value, rel_tol=1e-12, abs_tol=0.0):
                raise HardwareError(
                    f"Cluster {cluster.name!r}: {prefix}_{suffix}={mine!r} disagrees with "
                    f"level {level.name!r} ({value!r}); change both together (build the "
                    "Cluster from its levels, or dataclasses.replace(..., link_levels=...))"
                )


def _check_level(level: str) -> str:
    if level not in LINK_LEVELS:
        raise HardwareError(f"unknown link level {level!r}; expected one of {LINK_LEVELS}")
    return level


def _check_number(owner: str, field: str, value: object, *, allow_zero: bool) -> None:
    check = nonnegative_number if allow_zero else positive_number
    check(value, f"Cluster {owner!r}: {field}", error=HardwareError)
