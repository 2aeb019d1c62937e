"""`Cluster`: identical chips joined by a stack of link levels (NVLink domain, node, rail or
leaf switch, spine, ...); the two-level intra-/inter-node profile is the default stack."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from explorer.checks import is_int, nonnegative_number, positive_int, positive_number
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
        max_nodes: the nodes the profile describes (a reference architecture's size, a
            pod). Not a ceiling on a job: `extended` grows the cluster for a larger one.
        source: where the numbers come from (spec sheets, papers).
        link_levels: the cluster's `Level` stack, innermost first, when it has more than the
            two default levels (a spine, an oversubscription ratio, NICs shared by chips).
            ``()`` (the default) derives the stack from the intra/inter fields: an
            ``"intra-node"`` level of ``chips_per_node`` chips and an ``"inter-node"`` level
            of the whole cluster with one NIC per chip (``rails = chips_per_node``). Given
            levels must agree with the intra/inter fields: ``intra_node_*`` are the figures
            of the level grouping ``chips_per_node`` chips, ``inter_node_*`` those of the
            level above it.
        extended_from: the profile's own ``max_nodes`` when this cluster is that profile
            grown by `extended` for a larger job, else None.
        multi_rail_rings: whether a ring collective (all-reduce, all-gather,
            reduce-scatter) whose group has several members on one node spreads over their
            NICs, one ring per NIC, as NCCL's channels do (``explorer.hardware.levels``);
            False (the profiles' default, the two-level model the 2021 tables were set
            with): one NIC per ring. With it an all-to-all whose group crosses a level
            sends across it only the share of the peers beyond it, the rest below it at the
            same time (`levels.local_share`). The training step model sets it from
            ``TrainingParams.multi_rail_collectives``.

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
    extended_from: int | None = None
    multi_rail_rings: bool = False

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
        if not isinstance(self.multi_rail_rings, bool):
            raise HardwareError(
                f"Cluster {self.name!r}: multi_rail_rings={self.multi_rail_rings!r} is not a "
                "bool; give True (a ring collective's group spreads over its members' NICs) "
                "or False (one NIC per ring)"
            )
        if self.extended_from is not None:
            positive_int(self.extended_from, f"Cluster {self.name!r}: extended_from",
                         error=HardwareError)  # fmt: skip
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
    def scale_up_chips(self) -> int:
        """Chips of the scale-up domain: the largest link level whose per-chip bandwidth is
        the innermost level's (an NVLink domain larger than a node, as a GB200 NVL72 rack's
        72 GPUs over its 18 compute trays of 4; a node's chips elsewhere). Tensor
        parallelism may span it (`planning.space.tp_candidates`).

        >>> from explorer.hardware import load
        >>> load("gb200-nvl72").scale_up_chips, load("h100-sxm").scale_up_chips
        (72, 8)
        """
        fast = self.levels[0].bandwidth_bytes_per_s
        return max(lv.group_size for lv in self.levels if lv.bandwidth_bytes_per_s >= fast)

    @property
    def capacity(self) -> int:
        """Total chips: ``chips_per_node * max_nodes``."""
        return self.chips_per_node * self.max_nodes

    @property
    def extension(self) -> str:
        """How this cluster grew past its profile (`extended`), or ``""`` when it did not.

        >>> from explorer.hardware import load
        >>> load("h100-sxm").extended(16384).extension
        "extended from 1024 to 2048 nodes over its outermost level 'inter-node'"
        """
        if self.extended_from is None:
            return ""
        return (
            f"extended from {self.extended_from} to {self.max_nodes} nodes over its "
            f"outermost level {self.levels[-1].name!r}"
        )

    def extended(self, devices: int) -> Cluster:
        """This cluster when it holds ``devices`` chips; else the same profile grown to
        ``ceil(devices / chips_per_node)`` nodes.

        A profile describes a building block (a reference architecture, a pod), not the
        largest job on it: Llama 3 405B trained on 16,384 H100s, twice the ``h100-sxm``
        profile. The outermost level repeats: the nodes beyond ``max_nodes`` join over its
        links, with the same per-chip bandwidth, latency, rails and oversubscription (an
        assumption written into `source` and the level's source), and its groups grow to
        hold them all (a whole multiple of the level below). The result says so:
        `extended_from` and `extension`, and ``str()``. `plan_training`, `simulate`,
        `Mesh` and `Pool` call it, so a job is never refused for its size alone.

        A profile whose outermost level is a bounded domain (an NVLink domain, a TPU pod,
        a supernode) lists the network that joins such domains as a level of its own, so
        that this is the level that repeats.

        Raises:
            HardwareError: ``devices`` is not an int >= 1, or the cluster has no level
                between nodes to repeat (its outermost level is a node).

        >>> from explorer.hardware import load
        >>> big = load("dgx-h100-superpod").extended(4096)
        >>> big.max_nodes, [(lv.name, lv.group_size) for lv in big.levels]
        (512, [('nvlink', 8), ('ib-leaf', 256), ('ib-spine', 4096)])
        """
        if not is_int(devices, minimum=1):
            raise HardwareError(
                f"Cluster {self.name!r}: extended(devices={devices!r}); expected an int >= 1 "
                "(the chips in the job)"
            )
        if devices <= self.capacity:
            return self
        return _extend(self, -(-devices // self.chips_per_node))

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
        spread_rails: bool = False,
    ) -> AxisLink:
        """Bandwidth (bytes/s), latency (s), levels used and flows of a ring over ``axis``.

        Args:
            axis_sizes: the mesh axes in device order, outermost first, as ``{name: size}``
                or ``(name, size)`` pairs; the innermost (last) axes fill an NVLink domain
                first, as in `Mesh`.
            axis: one axis name or several (a collective over their product).
            concurrent: axis sets of collectives running at the same time; they share the
                links of every level both use.
            spread_rails: a ring collective (all-reduce, all-gather, reduce-scatter) whose
                group has several members on one node spreads over their NICs, as NCCL's
                channels do; asked only where `multi_rail_rings` is True.

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
        spread = bool(spread_rails) and self.multi_rail_rings
        return axis_link(self.levels, pairs, axis, concurrent, spread)

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
        grown = f"; {self.extension}" if self.extension else ""
        return (
            f"{self.name}: {self.max_nodes} x {self.chips_per_node} x {self.chip.name} "
            f"(intra {self.intra_node_bandwidth_bytes_per_s / 1e9:g} GB/s, "
            f"inter {self.inter_node_bandwidth_bytes_per_s / 1e9:g} GB/s per chip{grown})"
        )


@functools.lru_cache(maxsize=256)
def _extend(cluster: Cluster, nodes: int) -> Cluster:
    """`Cluster.extended` to ``nodes`` nodes (cached: a search builds many meshes on one
    extended cluster, and equal inputs give the equal cluster)."""
    levels = cluster.levels
    top = levels[-1]
    if cluster.link_levels and top.group_size <= cluster.chips_per_node:
        raise HardwareError(
            f"Cluster {cluster.name!r} holds {cluster.capacity} chips and cannot grow to "
            f"{nodes} nodes: its outermost level {top.name!r} is a node ({top.group_size} "
            "chips), with no link between nodes to repeat; use at most "
            f"{cluster.capacity} chips or a profile with an inter-node level"
        )
    base = cluster.max_nodes if cluster.extended_from is None else cluster.extended_from
    over = top.name if cluster.link_levels else "inter-node"  # the two-level stack's name
    assumption = (
        f"extended from {base} to {nodes} nodes (assumption: the nodes beyond the profile's "
        f"{base} join over level {over!r} with its per-chip bandwidth, latency, rails "
        "and oversubscription)"
    )
    changes: dict[str, object] = {}
    if cluster.link_levels:
        below = levels[-2].group_size
        size = max(top.group_size, -(-nodes * cluster.chips_per_node // below) * below)
        if size != top.group_size:
            grown = dataclasses.replace(top, group_size=size, source=_note(top.source, assumption))
            changes["link_levels"] = levels[:-1] + (grown,)
    # a two-level profile derives its inter-node level from max_nodes
    return dataclasses.replace(
        cluster, max_nodes=nodes, extended_from=base,
        source=_note(cluster.source, assumption), **changes,
    )  # fmt: skip


def _note(source: str, note: str) -> str:
    return f"{source} | {note}" if source else note


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
