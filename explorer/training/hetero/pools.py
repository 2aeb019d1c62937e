"""`Pool`: one homogeneous group of chips in a heterogeneous job.

A job over pools is planned by `explorer.training.hetero.plan.plan_hetero` (and
``plan_training(cfg, pools=[...])``): ``[Pool("h100-sxm", 512), Pool("a100-80g", 512)]``.
A pool is a hardware profile (its chip, nodes and link levels), how many of its chips the
job uses, and optionally their price per chip-hour (to price a step).

The link *between* two pools is an assumption, stated once here: the pools share one
fabric, and a flow from one pool to another runs at the slower pool's outermost level
(bandwidth per chip and latency), the narrowest part of the path. A pool elsewhere (another
building, another datacenter) says how it is reached with ``uplink`` (a `CrossPoolLink`),
which then stands for its outermost level. `cross_pool_link` gives the link.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ...checks import is_int, is_number
from ...hardware import Cluster, load, names, resolve
from ...hardware.errors import HardwareError
from ..errors import PoolError

__all__ = ["Pool", "PoolError", "CrossPoolLink", "check_pools", "cross_pool_link"]


@dataclass(frozen=True)
class Pool:
    """``chips`` chips of the hardware profile ``hardware`` in one job.

    Args:
        hardware: a profile name from ``datasets/hardware`` (``"h100-sxm"``, ``"a100-80g"``,
            ``"ascend-910b"``, ...) or a `Cluster`.
        chips: how many of its chips the job uses; more than the profile holds extends it
            (`Cluster.extended`).
        price_per_chip_hour: price of one chip for one hour (any currency, the same for
            every pool of a job); None: the profile's ``price_per_chip_hour`` when it has
            one, else unknown (then a plan has no cost).
        name: the label views and reports use; default the profile's name.
        uplink: how the pool reaches the other pools (per chip, one direction), when not
            by its profile's outermost link level (e.g. a WAN between datacenters).

    >>> Pool("a100-80g", 16, price_per_chip_hour=1.5)
    Pool('a100-80g', 16, price_per_chip_hour=1.5)
    """

    hardware: str | Cluster
    chips: int
    price_per_chip_hour: float | None = None
    name: str | None = None
    uplink: CrossPoolLink | None = None
    cluster: Cluster = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            cluster = resolve(self.hardware)
        except HardwareError as e:
            raise PoolError(
                f"Pool(hardware={self.hardware!r}): {e}.{_chip_hint(self.hardware)} Use a "
                "profile name from explorer.hardware.names() or a Cluster"
            ) from None
        c = self.chips
        if not is_int(c, minimum=1):
            raise PoolError(
                f"Pool({cluster.name!r}, chips={c!r}): a pool needs an int >= 1 chips; "
                "leave a pool with no chips out of the list"
            )
        try:  # a pool larger than its profile extends it (Cluster.extended)
            cluster = cluster.extended(c)
        except HardwareError as e:
            raise PoolError(f"Pool({cluster.name!r}, chips={c}): {e}") from None
        object.__setattr__(self, "cluster", cluster)
        price = self.price_per_chip_hour
        if price is None:
            price = getattr(cluster, "price_per_chip_hour", None)
            object.__setattr__(self, "price_per_chip_hour", price)
        elif not is_number(price, minimum=0):
            raise PoolError(
                f"Pool({cluster.name!r}): price_per_chip_hour={price!r}; expected a finite "
                "number >= 0 (price of one chip for one hour) or None"
            )
        u = self.uplink
        if u is not None and not (
            isinstance(u, CrossPoolLink)
            and is_number(u.bandwidth_bytes_per_s, above=0)
            and is_number(u.latency_s, minimum=0)
        ):
            raise PoolError(
                f"Pool({cluster.name!r}): uplink={u!r}; expected CrossPoolLink(bandwidth "
                "bytes/s > 0, latency s >= 0, source) or None"
            )
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise PoolError(f"Pool({cluster.name!r}): name={self.name!r}; expected a non-empty str")

    @property
    def label(self) -> str:
        """``name`` if given, else the hardware profile's name."""
        return self.name or self.cluster.name

    @property
    def peak_flops(self) -> float:
        """One chip's dense bf16 peak FLOP/s (fp16, then the widest dtype, if no bf16)."""
        chip = self.cluster.chip
        for dtype in ("bf16", "fp16", *chip.dtypes):
            if dtype in chip.dtypes:
                return chip.peak_flops(dtype)
        raise PoolError(f"{chip.name} has no peak rate")  # a Chip always has one

    def cost_per_s(self) -> float | None:
        """Price of the pool's chips per second, or None when the price is unknown."""
        if self.price_per_chip_hour is None:
            return None
        return self.price_per_chip_hour * self.chips / 3600.0

    def __repr__(self) -> str:
        hw = self.hardware if isinstance(self.hardware, str) else self.cluster.name
        extra = ""
        if self.price_per_chip_hour is not None:
            extra += f", price_per_chip_hour={self.price_per_chip_hour!r}"
        if self.name is not None:
            extra += f", name={self.name!r}"
        if self.uplink is not None:
            extra += f", uplink={self.uplink!r}"
        return f"Pool({hw!r}, {self.chips}{extra})"

    def __str__(self) -> str:
        return f"{self.chips} x {self.label}"


def _chip_hint(name: object) -> str:
    """Profiles whose chip's name holds every part of ``name`` (``"h100-80g"`` ->
    ``h100-sxm``, the NVIDIA H100 SXM5 80GB), as a sentence; "" when none or not a str."""
    if not isinstance(name, str):
        return ""
    parts = [p for p in re.split(r"[-_\s]+", name.lower()) if p]
    found = []
    for profile in names():
        try:
            chip = load(profile).chip.name.lower()
        except HardwareError:
            continue
        if parts and all(p in chip for p in parts):
            found.append(f"{profile!r} ({load(profile).chip.name})")
    return f" Its chip is in {', '.join(found)}." if found else ""


def check_pools(pools: object) -> tuple[Pool, ...]:
    """``pools`` as a tuple of `Pool`, checked: a non-empty sequence of Pool with distinct
    labels (two pools of one profile need names)."""
    if isinstance(pools, Pool):
        pools = (pools,)
    if isinstance(pools, str | bytes) or not isinstance(pools, Sequence) or not pools:
        raise PoolError(
            f"pools={pools!r}; expected a non-empty list of Pool, e.g. "
            "[Pool('h100-sxm', 512), Pool('a100-80g', 512)]"
        )
    for p in pools:
        if not isinstance(p, Pool):
            raise PoolError(
                f"pools holds {p!r} ({type(p).__name__}); expected Pool(hardware, chips), "
                "e.g. Pool('a100-80g', 64)"
            )
    labels = [p.label for p in pools]
    for lab in labels:
        if labels.count(lab) > 1:
            raise PoolError(
                f"two pools are labelled {lab!r}; merge them into one Pool or give each a name=..."
            )
    return tuple(pools)


class CrossPoolLink(NamedTuple):
    """The link between pools: per-chip bandwidth (bytes/s, one direction), latency (s),
    and which pool's level it is (the assumption of this module's docstring)."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str


def cross_pool_link(pools: Sequence[Pool]) -> CrossPoolLink:
    """The slowest pool's way out: its ``uplink``, else its outermost link level
    (assumption: one shared fabric); the latency is the largest of them.

    >>> link = cross_pool_link([Pool("h100-sxm", 8), Pool("a100-80g", 8)])
    >>> link.bandwidth_bytes_per_s, link.source.split(":")[0]
    (25000000000.0, 'assumption')
    """
    ways = []
    for p in check_pools(pools):
        if p.uplink is not None:
            ways.append((p.uplink, f"{p.label}'s uplink ({p.uplink.source})"))
            continue
        lv = p.cluster.levels[-1]
        ways.append(
            (CrossPoolLink(lv.bandwidth_bytes_per_s, lv.latency_s, lv.source),
             f"assumption: the pools share one fabric; {p.label}'s {lv.name!r} level")
        )  # fmt: skip
    link, why = min(ways, key=lambda w: (w[0].bandwidth_bytes_per_s, -w[0].latency_s))
    latency = max(w[0].latency_s for w in ways)
    return CrossPoolLink(
        link.bandwidth_bytes_per_s, latency,
        f"{why} (the slowest way out of a pool) carries the traffic between pools",
    )  # fmt: skip
