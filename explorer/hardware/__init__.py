"""Hardware: chip and cluster profiles (a cluster is a stack of link `Level`\\ s), device
meshes, and alpha-beta collective costs on the levels an axis crosses, links shared.

>>> from explorer.hardware import Mesh, load
>>> mesh = Mesh({"dp": 4, "tp": 8}, hardware=load("a100-80g"))
>>> mesh.link("tp"), mesh.link("dp")
('intra', 'inter')
"""

from explorer.hardware.catalog import load, load_file, names, resolve
from explorer.hardware.chip import Chip
from explorer.hardware.cluster import Cluster, LinkLevel
from explorer.hardware.collectives import (
    Algorithm,
    CollectiveKind,
    Link,
    bytes_sent_per_device,
    hierarchical_time,
    ring_latency,
    ring_time,
    tree_time,
)
from explorer.hardware.errors import HardwareError, MeshError
from explorer.hardware.levels import AxisLink, Level, axis_link
from explorer.hardware.mesh import Mesh

__all__ = [
    "Algorithm",
    "AxisLink",
    "Chip",
    "Cluster",
    "CollectiveKind",
    "HardwareError",
    "Link",
    "Level",
    "LinkLevel",
    "Mesh",
    "MeshError",
    "axis_link",
    "bytes_sent_per_device",
    "hierarchical_time",
    "load",
    "load_file",
    "names",
    "resolve",
    "ring_latency",
    "ring_time",
    "tree_time",
]
