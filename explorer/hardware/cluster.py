"""`Cluster`: nodes of identical chips joined by a fast intra-node and a slower inter-node link."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from explorer.hardware.chip import Chip
from explorer.hardware.errors import HardwareError

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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise HardwareError(f"Cluster name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.chip, Chip):
            raise HardwareError(f"Cluster {self.name!r}: chip must be a Chip, got {self.chip!r}")
        for field in ("chips_per_node", "max_nodes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise HardwareError(
                    f"Cluster {self.name!r}: {field} must be a positive int, got {value!r}"
                )
        for field in ("intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s"):
            _check_number(self.name, field, getattr(self, field), allow_zero=False)
        for field in ("intra_node_latency_s", "inter_node_latency_s"):
            _check_number(self.name, field, getattr(self, field), allow_zero=True)

    @property
    def capacity(self) -> int:
        """Total chips: ``chips_per_node * max_nodes``."""
        return self.chips_per_node * self.max_nodes

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

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.max_nodes} x {self.chips_per_node} x {self.chip.name} "
            f"(intra {self.intra_node_bandwidth_bytes_per_s / 1e9:g} GB/s, "
            f"inter {self.inter_node_bandwidth_bytes_per_s / 1e9:g} GB/s per chip)"
        )


def _check_level(level: str) -> str:
    if level not in LINK_LEVELS:
        raise HardwareError(f"unknown link level {level!r}; expected one of {LINK_LEVELS}")
    return level


def _check_number(owner: str, field: str, value: object, *, allow_zero: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        need = "non-negative" if allow_zero else "positive"
        raise HardwareError(
            f"Cluster {owner!r}: {field} must be a {need} finite number, got {value!r}"
        )
