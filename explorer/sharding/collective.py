"""`Collective`: one communication step with its bytes and time from the hardware side."""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import CollectiveKind, Mesh, ring_time
from ..ir import format_bytes
from ..memo import memoize

__all__ = ["Collective", "make_collective", "send_recv"]


@dataclass(frozen=True)
class Collective:
    """A collective over mesh ``axes``.

    Args:
        kind: all-reduce, all-gather, reduce-scatter, all-to-all or send/recv.
        axes: the mesh axes of the group (``()`` for a send/recv across stages).
        size_bytes: the buffer ``S`` of `explorer.hardware.bytes_sent_per_device`
            (all-gather: gathered output; reduce-scatter: input; others: the buffer).
        bytes_per_device: bytes each device sends.
        time_s: seconds on the mesh's hardware (0 for a mesh without hardware).
        tensor: the tensor (or edge ``producer->consumer``) it belongs to, if known.
    """

    kind: CollectiveKind
    axes: tuple[str, ...]
    size_bytes: float
    bytes_per_device: float
    time_s: float
    tensor: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}({','.join(self.axes)}) {format_bytes(self.size_bytes)}"


@memoize(maxsize=65536, name="sharding.collective")
def make_collective(
    kind: CollectiveKind | str, size_bytes: float, axes: tuple[str, ...], mesh: Mesh,
    tensor: str = "",
) -> Collective:  # fmt: skip
    """A collective priced by the mesh: the same function the cost side charges."""
    kind = CollectiveKind.parse(kind)
    nbytes = mesh.collective_bytes(kind, size_bytes, axes)
    time = mesh.collective_time(kind, size_bytes, axes) if mesh.hardware is not None else 0.0
    return Collective(kind, tuple(axes), float(size_bytes), float(nbytes), float(time), tensor)


def send_recv(size_bytes: float, mesh: Mesh, tensor: str = "", link: str = "inter") -> Collective:
    """A point-to-point transfer of ``size_bytes`` per device across a pipeline boundary."""
    time = 0.0
    if mesh.hardware is not None:
        cl = mesh.hardware
        time = ring_time(CollectiveKind.SEND_RECV, size_bytes, 2, cl.bandwidth(link),
                         cl.latency(link))  # fmt: skip
    return Collective(CollectiveKind.SEND_RECV, (), float(size_bytes), float(size_bytes), time,
                      tensor)  # fmt: skip
