"""A wide-area (WAN) link level: clusters spanning several datacenters.

A multi-datacenter cluster is a cluster's level stack with one more level on top, named
``"wan"``, whose groups hold every datacenter: its bandwidth per chip is a few percent of
the inter-node fabric's and its latency is in milliseconds. `datacenters` builds one from
any cluster; ``datasets/hardware/dgx-h100-2dc.json`` is a catalog example. `collective_time`
prices a data-parallel collective across datacenters hierarchically (inside each, then
across them on a shard), on the mesh split datacenter-major by `split_mesh`.

Default figures (``WAN_SOURCE``): an assumption, not a measured link. 2% of the cluster's
inter-node bandwidth per chip (a DGX H100 SuperPOD: 50 GB/s per GPU -> 1 GB/s per GPU, i.e.
~8 Tb/s between two 1,024-GPU datacenters, twenty 400G data-centre interconnect links), and
5 ms one way: light in fibre covers ~200 km per ms (refractive index ~1.47), so 5 ms is
~1,000 km of fibre plus equipment.

>>> from explorer.hardware import load
>>> two = datacenters(load("a100-80g"), 2)
>>> two.levels[-1].name, two.capacity, datacenter_size(two)
('wan', 16384, 8192)
"""

from __future__ import annotations

import dataclasses

from ..checks import is_int, is_number
from .cluster import Cluster
from .errors import HardwareError
from .levels import Level
from .mesh import Mesh

__all__ = [
    "WAN", "WAN_SOURCE", "WAN_BANDWIDTH_FRACTION", "WAN_LATENCY_S", "datacenters",
    "datacenter_size", "datacenter_count", "collective_time", "split_mesh",
]  # fmt: skip

#: The name of the wide-area level.
WAN = "wan"
#: Default WAN bandwidth per chip, as a fraction of the inter-node level's (assumption).
WAN_BANDWIDTH_FRACTION = 0.02
#: Default one-way WAN latency per step (assumption: ~1,000 km of fibre).
WAN_LATENCY_S = 5e-3
#: Default rails: independent data-centre interconnect links out of one datacenter.
WAN_RAILS = 20
#: Collectives over the data-parallel axis that run hierarchically across datacenters.
_HIERARCHICAL = ("all-reduce", "reduce-scatter", "all-gather")
WAN_SOURCE = (
    "assumption: bandwidth per chip 2% of the inter-node fabric's, 20 interconnect links per "
    "datacenter, 5 ms one way (~1,000 km of fibre at ~200 km per ms)"
)


def datacenters(
    cluster: Cluster, count: int = 2, bandwidth_fraction: float = WAN_BANDWIDTH_FRACTION,
    latency_s: float = WAN_LATENCY_S, rails: int = WAN_RAILS, name: str | None = None,
    source: str = WAN_SOURCE,
) -> Cluster:  # fmt: skip
    """``count`` copies of ``cluster`` (each a datacenter) joined by a WAN level.

    Args:
        bandwidth_fraction: the WAN's per-chip bandwidth over the slowest level of
            ``cluster`` above its first (the inter-node fabric).
        latency_s: one-way latency of a WAN step; ``rails``: links out of one datacenter
            (a single flow uses one).

    Device ids run datacenter by datacenter: datacenter ``k`` holds ids
    ``k * capacity .. (k + 1) * capacity - 1`` of the new cluster.
    """
    if not isinstance(cluster, Cluster):
        raise HardwareError(f"datacenters: cluster={cluster!r}; expected a Cluster (load(name))")
    if not is_int(count, minimum=2, numpy=True):
        raise HardwareError(f"datacenters: count={count!r}; expected an int >= 2 datacenters")
    if datacenter_size(cluster) is not None:
        raise HardwareError(
            f"datacenters: {cluster.name!r} already has a {WAN!r} level; give one datacenter"
        )
    if not is_number(bandwidth_fraction, above=0, maximum=1, numpy=True):
        raise HardwareError(
            f"datacenters: bandwidth_fraction={bandwidth_fraction!r}; expected a fraction in "
            "(0, 1] of the inter-node bandwidth (a WAN: a few percent, e.g. 0.02)"
        )
    levels = cluster.levels
    fabric = min(lv.bandwidth_bytes_per_s for lv in (levels[1:] or levels))
    wan = Level(WAN, cluster.capacity * count, fabric * bandwidth_fraction, latency_s,
                rails=rails, source=source)  # fmt: skip
    # the top level must span exactly one datacenter's chips for the WAN groups to line up
    top = levels[-1]
    if top.group_size != cluster.capacity:
        levels = levels[:-1] + (dataclasses.replace(top, group_size=cluster.capacity),)
    return dataclasses.replace(
        cluster, name=name or f"{cluster.name}-x{count}dc", max_nodes=cluster.max_nodes * count,
        link_levels=levels + (wan,),
        source=f"{cluster.source} | WAN: {source}",
    )  # fmt: skip


def datacenter_size(cluster: Cluster) -> int | None:
    """Chips per datacenter when the cluster's outermost level is the WAN, else None.

    >>> from explorer.hardware import load
    >>> datacenter_size(load("dgx-h100-2dc")), datacenter_size(load("a100-80g"))
    (1024, None)
    """
    levels = cluster.levels
    if len(levels) < 2 or levels[-1].name != WAN:
        return None
    return levels[-2].group_size


def datacenter_count(cluster: Cluster, devices: int) -> int:
    """How many datacenters a job of ``devices`` chips (ids ``0 .. devices-1``) touches."""
    size = datacenter_size(cluster)
    return 1 if size is None else -(-devices // size)


def collective_time(mesh: Mesh, kind: str, size_bytes: float, axes: tuple[str, ...]) -> float:
    """`Mesh.collective_time`, except that an all-reduce, reduce-scatter or all-gather over
    ``dp`` alone (other axes of the group of size 1) crossing datacenters runs hierarchically
    on the mesh split datacenter-major (`split_mesh`): `Mesh.hierarchical_time` with the
    ``dp`` replicas inside a datacenter inner and the datacenters (``dc``) outer, i.e.

    - all-reduce: reduce-scatter inside on ``size_bytes`` + all-reduce across on the
      ``1/dp_inside`` shard + all-gather inside;
    - reduce-scatter: inside, then across; all-gather: across, then inside.

    The training step model prices its collectives through this function.

    >>> from explorer.hardware import load
    >>> two = datacenters(dataclasses.replace(load("a100-80g"), max_nodes=8), 2)
    >>> mesh = Mesh({"dp": 16, "tp": 8}, hardware=two)
    >>> round(collective_time(mesh, "all-reduce", 1e9, ("dp",)), 5)  # s
    0.33014
    """
    names = (axes,) if isinstance(axes, str) else tuple(axes)
    moving = tuple(a for a in names if mesh.axis_size(a) > 1)
    split = split_mesh(mesh) if moving == ("dp",) and kind in _HIERARCHICAL else None
    if split is None:
        return mesh.collective_time(kind, size_bytes, axes)
    return split.hierarchical_time(kind, size_bytes, ("dp",), ("dc",))


def split_mesh(mesh: Mesh) -> Mesh | None:
    """The mesh with its outermost ``dp`` axis split datacenter-major into ``("dc", "dp")``
    (the same device ids), or None when dp does not cross datacenters evenly: the job must
    fill every datacenter it touches (its ids run datacenter by datacenter, so a job of
    1.5 datacenters holds a whole one and half of the next) and dp must be a multiple of
    their count. Otherwise the collective is priced as one ring on the levels it crosses."""
    cluster = mesh.hardware
    if cluster is None or datacenter_size(cluster) is None or mesh.axis_names[0] != "dp":
        return None
    n_dc = datacenter_count(cluster, mesh.size)
    dp = mesh.axis_size("dp")
    # job ids fill datacenters in order: the halves are equal only when it fills them all
    if n_dc < 2 or dp % n_dc or mesh.size != n_dc * datacenter_size(cluster):
        return None
    rest = dict(mesh.axes[1:])
    return Mesh({"dc": n_dc, "dp": dp // n_dc, **rest}, hardware=cluster)
