"""Host links: each chip's PCIe link to its host and its share of the host's memory.

Per chip and per direction, from the vendors' datasheets (PCIe generation x16) and their
servers' system memory and CPUs (`HOST_LINKS`); a cluster profile can give its own with a
link level named ``"pcie"``/``"host-pcie"`` (`host_link`). Host offload of the training
step (`explorer.training.offload`) moves optimizer states and weights over them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .cluster import Cluster
from .errors import HardwareError

__all__ = ["HostLink", "HOST_LINKS", "host_link"]

_GB = 1e9


@dataclass(frozen=True)
class HostLink:
    """A chip's link to its host and its share of the host.

    Args:
        name: e.g. ``"pcie-gen4-x16"``.
        bandwidth_bytes_per_s: per chip, one direction.
        latency_s: per transfer.
        host_memory_bytes: the host memory one chip may use (the server's over its chips).
        host_memory_bandwidth_bytes_per_s: the host DRAM bandwidth one chip's optimizer
            update may use (the server's over its chips).
        source: the documents, or "assumption".
    """

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    host_memory_bytes: float
    host_memory_bandwidth_bytes_per_s: float
    source: str

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.bandwidth_bytes_per_s / _GB:g} GB/s per direction, host "
            f"{self.host_memory_bytes / _GB:g} GB and {self.host_memory_bandwidth_bytes_per_s / _GB:g}"
            " GB/s per chip"
        )


_PCIE_LATENCY_S = 10e-6  # assumption: a DMA transfer's setup, as the network levels' alpha
_PCIE4 = (32 * _GB, "PCIe Gen4 x16: 64 GB/s both directions (datasheet) -> 32 GB/s per direction")
_PCIE5 = (64 * _GB, "PCIe Gen5 x16: 128 GB/s both directions (datasheet) -> 64 GB/s per direction")

#: Chip name -> its host link. DGX A100 640GB: 2 TB system memory, 2x AMD EPYC 7742 (8
#: channels DDR4-3200 each: 204.8 GB/s per socket) for 8 GPUs; DGX H100 and DGX H200:
#: 2 TB, 2x Xeon Platinum 8480C (8 channels DDR5-4800: 307.2 GB/s per socket) for 8 GPUs;
#: DGX A100 320GB: 1 TB; DGX-1 (V100): 512 GB, 2x Xeon E5-2698 v4 (4 channels DDR4-2400:
#: 76.8 GB/s per socket). Ascend and TPU hosts: assumptions (no public per-chip figures).
HOST_LINKS: dict[str, HostLink] = {
    "NVIDIA A100 SXM4 80GB": HostLink(
        "pcie-gen4-x16",
        _PCIE4[0],
        _PCIE_LATENCY_S,
        2000 * _GB / 8,
        2 * 204.8 * _GB / 8,
        f"NVIDIA A100 datasheet ({_PCIE4[1]}); DGX A100 640GB datasheet (2 TB, 2x EPYC 7742)",
    ),
    "NVIDIA A100 SXM4 40GB": HostLink(
        "pcie-gen4-x16",
        _PCIE4[0],
        _PCIE_LATENCY_S,
        1000 * _GB / 8,
        2 * 204.8 * _GB / 8,
        f"NVIDIA A100 datasheet ({_PCIE4[1]}); DGX A100 320GB datasheet (1 TB, 2x EPYC 7742)",
    ),
    "NVIDIA H100 SXM5 80GB": HostLink(
        "pcie-gen5-x16",
        _PCIE5[0],
        _PCIE_LATENCY_S,
        2000 * _GB / 8,
        2 * 307.2 * _GB / 8,
        f"NVIDIA H100 datasheet ({_PCIE5[1]}); DGX H100 datasheet (2 TB, 2x Xeon 8480C)",
    ),
    "NVIDIA H200 SXM 141GB": HostLink(
        "pcie-gen5-x16",
        _PCIE5[0],
        _PCIE_LATENCY_S,
        2000 * _GB / 8,
        2 * 307.2 * _GB / 8,
        f"NVIDIA H200 datasheet ({_PCIE5[1]}); DGX H200 datasheet (2 TB, 2x Xeon 8480C)",
    ),
    "NVIDIA Tesla V100 SXM2 32GB": HostLink(
        "pcie-gen3-x16",
        16 * _GB,
        _PCIE_LATENCY_S,
        512 * _GB / 8,
        2 * 76.8 * _GB / 8,
        "NVIDIA V100 datasheet (PCIe Gen3 x16: 32 GB/s both directions); DGX-1 datasheet "
        "(512 GB, 2x Xeon E5-2698 v4)",
    ),
    # A GB200 superchip joins one Grace CPU and two Blackwell GPUs by NVLink-C2C, 900 GB/s
    # both directions; Grace holds up to 480 GB of LPDDR5X at up to 512 GB/s. Per GPU, the
    # two GPUs sharing the link and the memory (assumption): 225 GB/s per direction, 240 GB
    # and 256 GB/s.
    "NVIDIA GB200 Blackwell GPU 186GB": HostLink(
        "nvlink-c2c",
        900 * _GB / 2 / 2,
        _PCIE_LATENCY_S,
        480 * _GB / 2,
        512 * _GB / 2,
        "NVIDIA GB200 NVL72 datasheet and specifications (nvidia.com/en-us/data-center/"
        "gb200-nvl72, GB200 Grace Blackwell Superchip column: NVLink-C2C 900 GB/s "
        "bidirectional, up to 480 GB LPDDR5X at up to 512 GB/s per superchip of 1 Grace + 2 "
        "Blackwell GPUs); per GPU half of each (assumption: the two GPUs share the link and "
        "the memory)",
    ),
}
_ASSUMED = HostLink(
    "pcie-gen4-x16", _PCIE4[0], _PCIE_LATENCY_S, 1000 * _GB / 8, 2 * 204.8 * _GB / 8,
    "assumption: a PCIe Gen4 x16 host with 1 TB and two 8-channel DDR4-3200 sockets per 8 "
    "chips (no per-chip figures published for this chip)",
)  # fmt: skip
_ASSUMED_CHIPS = ("Ascend", "TPU")


def host_link(cluster: Cluster) -> HostLink:
    """The host link of ``cluster``'s chips: a level named ``pcie``/``host-pcie`` of the
    profile when it has one (host memory figures from `HOST_LINKS` or the assumption), else
    `HOST_LINKS` by chip name, else the stated assumption for Ascend and TPU hosts.

    >>> from explorer.hardware import load
    >>> host_link(load("h100-sxm")).bandwidth_bytes_per_s
    64000000000.0
    """
    chip = cluster.chip.name
    base = HOST_LINKS.get(chip)
    if base is None and any(k in chip for k in _ASSUMED_CHIPS):
        base = _ASSUMED
    for level in cluster.levels:
        if level.name in ("pcie", "host-pcie"):
            base = base or _ASSUMED
            return dataclasses.replace(
                base, name=level.name, bandwidth_bytes_per_s=level.bandwidth_bytes_per_s,
                latency_s=level.latency_s, source=f"{cluster.name} level: {level.source}; "
                f"host memory: {base.source}",
            )  # fmt: skip
    if base is None:
        raise HardwareError(
            f"no host link known for chip {chip!r} ({cluster.name}); add it to "
            "explorer.hardware.host.HOST_LINKS or a 'pcie' level to the profile"
        )
    return base
