"""Alpha-beta cost of collectives: bytes each device sends and the time it takes.

Notation: ``S`` = ``size_bytes``, ``n`` = devices in the group, ``B`` = per-device one-way
link bandwidth (bytes/s), ``alpha`` = per-step latency (s).

What ``S`` means per kind (always the full buffer as one device sees it):

============== =========================================================
all-reduce     the buffer being reduced (input = output size)
all-gather     the gathered OUTPUT per device (each device contributes S/n)
reduce-scatter the INPUT per device (each device ends with S/n)
all-to-all     the per-device buffer (S/n goes to each peer, itself included)
send/recv      the message
============== =========================================================

All collectives on one device (``n == 1``) cost 0 bytes and 0 s.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Literal, NamedTuple, get_args

from ..checks import nonnegative_number, positive_int, positive_number
from .errors import HardwareError

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CollectiveKind",
    "Link",
    "bytes_sent_per_device",
    "hierarchical_time",
    "ring_latency",
    "ring_time",
    "tree_time",
]

Algorithm = Literal["auto", "ring", "tree", "hierarchical"]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)


class CollectiveKind(Enum):
    """The collectives the planner knows, valued by their usual hyphenated names."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send/recv"

    @classmethod
    def parse(cls, kind: CollectiveKind | str) -> CollectiveKind:
        """Accept a member or its value (``"all-reduce"``); list the valid values otherwise.

        >>> CollectiveKind.parse("all-gather")
        <CollectiveKind.ALL_GATHER: 'all-gather'>
        """
        if isinstance(kind, cls):
            return kind
        try:
            return cls(kind)
        except ValueError:
            valid = ", ".join(repr(member.value) for member in cls)
            raise HardwareError(
                f"unknown collective kind {kind!r}; expected one of {valid}"
            ) from None


class Link(NamedTuple):
    """One link level's alpha-beta parameters."""

    bandwidth_bytes_per_s: float
    latency_s: float


# Bytes sent per device is k * (n-1)/n * S (send/recv aside): k = 2 for ring all-reduce
# (a reduce-scatter then an all-gather), 1 for the others.
_RING_FACTOR = {
    CollectiveKind.ALL_REDUCE: 2,
    CollectiveKind.ALL_GATHER: 1,
    CollectiveKind.REDUCE_SCATTER: 1,
    CollectiveKind.ALL_TO_ALL: 1,
}


def bytes_sent_per_device(kind: CollectiveKind | str, size_bytes: float, n: int) -> float:
    """Bytes one device sends in a ring (or direct, for all-to-all) collective.

    Formulas (0 when ``n == 1``):

    - all-reduce: ``2 (n-1)/n * S``
    - all-gather, reduce-scatter, all-to-all: ``(n-1)/n * S``
    - send/recv: ``S``

    Computed as ``k * S * (n-1) / n`` with one division, so it is exact whenever the true
    value is an integer (what a numpy SPMD executor counts). The hierarchical all-reduce,
    all-gather and reduce-scatter send the same total; hierarchical all-to-all sends more
    (see `hierarchical_time`).

    >>> bytes_sent_per_device("all-reduce", 1024, 8)
    1792.0
    """
    kind = CollectiveKind.parse(kind)
    _check_group(size_bytes, n)
    if n == 1:
        return 0.0
    if kind is CollectiveKind.SEND_RECV:
        return float(size_bytes)
    return _RING_FACTOR[kind] * size_bytes * (n - 1) / n


def ring_latency(
    kind: CollectiveKind | str,
    n: int,
    latency: float,
    per_node: int | None = None,
    inter_latency: float | None = None,
) -> float:
    """Seconds of latency of a ring collective over ``n`` devices (0 when ``n == 1``).

    A ring all-reduce takes ``2(n-1)`` steps, all-gather, reduce-scatter and all-to-all
    ``n-1``, send/recv one. Two forms of one model:

    - ``per_node=None``: every step pays ``latency``, the alpha-beta ring on one link
      (``steps * latency``). `ring_time` and so `Mesh.collective_time` use it with the
      highest latency of the levels the ring crosses: the mesh prices a ring on any stack of
      levels by its slowest one, and the operator-sharding search's costs
      (``bench/search.py``, ``bench/sharding.py``) are that coarser form. The two forms
      differ only for rings holding several members per node and crossing nodes, and there
      by the latency term alone, which the large collectives the search and the step model's
      tp and dp rings price barely feel (bandwidth dominates).
    - ``per_node`` given: NCCL's ring model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``:
      ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` with ``nInterSteps =
      k (nNodes - 1)``): the ``n`` members sit ``per_node`` to a node on ``ceil(n /
      per_node)`` nodes; ``k (nodes - 1)`` steps cross a node boundary at ``inter_latency``
      and the others stay inside a node at ``latency``. The step model's ZeRO-3 collectives
      use it (many small per-tensor gathers, where the latency is most of the time;
      `explorer.training.step_model.terms.zero.ring_latency_s`). With ``per_node=1`` (or
      all members on one node) it is the one-link form.

    >>> ring_latency("all-gather", 32, 5e-6) * 1e6  # 31 steps on one link
    155.0
    >>> round(ring_latency("all-gather", 32, 5e-6, per_node=8, inter_latency=10e-6) * 1e6, 1)
    170.0
    """
    kind = CollectiveKind.parse(kind)
    positive_int(n, "group size n", error=HardwareError, numpy=True)
    nonnegative_number(latency, "latency", error=HardwareError, fix="give seconds", numpy=True)
    if per_node is not None:
        positive_int(per_node, "per_node", error=HardwareError, numpy=True)
        if inter_latency is None:
            raise HardwareError("ring_latency: per_node given without inter_latency; give both")
        nonnegative_number(inter_latency, "inter_latency", error=HardwareError, numpy=True)
    return _ring_latency(kind, n, latency, per_node, inter_latency)


def _ring_latency(
    kind: CollectiveKind, n: int, latency: float, per_node: int | None, inter_latency
) -> float:
    """`ring_latency` on checked arguments (ring_time's inner loop checks once)."""
    if n == 1:
        return 0.0
    if kind is CollectiveKind.SEND_RECV:
        return latency
    k = _RING_FACTOR[kind]
    steps = k * (n - 1)
    if per_node is None:
        return steps * latency
    inter_steps = k * (-(-n // per_node) - 1)
    return (steps - inter_steps) * latency + inter_steps * inter_latency


def ring_time(
    kind: CollectiveKind | str, size_bytes: float, n: int, bandwidth: float, latency: float
) -> float:
    """Seconds for a ring collective over ``n`` devices on one link (0 when ``n == 1``): its
    steps' latency (`ring_latency` on one link) plus its bytes at ``bandwidth``.

    - all-reduce: ``2(n-1) alpha + 2(n-1)/n * S/B``
    - all-gather, reduce-scatter, all-to-all: ``(n-1) alpha + (n-1)/n * S/B``
      (all-to-all as ``n-1`` pairwise exchange steps of ``S/n`` each)
    - send/recv: ``alpha + S/B``

    >>> ring_time("all-gather", 8e9, 8, bandwidth=1e9, latency=0.0)
    7.0
    """
    kind = CollectiveKind.parse(kind)
    _check_group(size_bytes, n)
    _check_link(bandwidth, latency)
    if n == 1:
        return 0.0
    if kind is CollectiveKind.SEND_RECV:
        return latency + size_bytes / bandwidth
    alpha = _ring_latency(kind, n, latency, None, None)
    return alpha + bytes_sent_per_device(kind, size_bytes, n) / bandwidth


def tree_time(
    kind: CollectiveKind | str, size_bytes: float, n: int, bandwidth: float, latency: float
) -> float:
    """Seconds for a (double binary) tree all-reduce: ``2 ceil(log2 n) alpha + 2 S/B``.

    The tree pays latency logarithmic in ``n`` but sends the whole buffer up and down, so it
    wins for small buffers on many devices. Only all-reduce has a tree algorithm here; other
    kinds raise rather than silently falling back to a ring.

    >>> tree_time("all-reduce", 1e9, 8, bandwidth=1e9, latency=1e-6)
    2.000006
    """
    kind = CollectiveKind.parse(kind)
    if kind is not CollectiveKind.ALL_REDUCE:
        raise HardwareError(
            f"no tree algorithm for {kind.value}; only all-reduce has one. "
            f"Use algorithm='ring' or 'hierarchical'."
        )
    _check_group(size_bytes, n)
    _check_link(bandwidth, latency)
    if n == 1:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * latency + 2 * size_bytes / bandwidth


def hierarchical_time(
    kind: CollectiveKind | str,
    size_bytes: float,
    n_intra: int,
    n_inter: int,
    intra: Link | tuple[float, float],
    inter: Link | tuple[float, float],
) -> float:
    """Seconds for a two-level collective: rings inside nodes, rings across nodes.

    ``intra`` and ``inter`` are ``(bandwidth_bytes_per_s, latency_s)``; ``n_intra`` devices
    per node take part, on ``n_inter`` nodes. Each phase is a `ring_time`:

    - all-reduce = reduce-scatter intra on ``S``
      + all-reduce inter on ``S/n_intra`` + all-gather intra on ``S``
    - all-gather = all-gather inter on ``S/n_intra`` (output size)
      + all-gather intra on ``S``
    - reduce-scatter = reduce-scatter intra on ``S``
      + reduce-scatter inter on ``S/n_intra`` (input size)
    - all-to-all = all-to-all intra on ``S`` + all-to-all inter on ``S``
      (each device first regroups its whole buffer inside the node by destination, then
      exchanges it across nodes, so it sends ``((ni-1)/ni + (no-1)/no) S`` bytes, more than a
      direct all-to-all, in exchange for fewer slow inter-node steps)
    - send/recv: no hierarchical form; raises.

    >>> hierarchical_time("all-gather", 8e9, 4, 2, intra=(1e9, 0.0), inter=(1e8, 0.0))
    16.0
    """
    kind = CollectiveKind.parse(kind)
    if kind is CollectiveKind.SEND_RECV:
        raise HardwareError(
            "send/recv has no hierarchical form; use ring_time on the slower link instead"
        )
    for label, count in (("n_intra", n_intra), ("n_inter", n_inter)):
        positive_int(count, label, error=HardwareError, numpy=True)
    b_in, a_in = intra
    b_out, a_out = inter
    per_node = size_bytes / n_intra
    if kind is CollectiveKind.ALL_REDUCE:
        return (
            ring_time(CollectiveKind.REDUCE_SCATTER, size_bytes, n_intra, b_in, a_in)
            + ring_time(CollectiveKind.ALL_REDUCE, per_node, n_inter, b_out, a_out)
            + ring_time(CollectiveKind.ALL_GATHER, size_bytes, n_intra, b_in, a_in)
        )
    if kind is CollectiveKind.ALL_GATHER:
        return ring_time(kind, per_node, n_inter, b_out, a_out) + ring_time(
            kind, size_bytes, n_intra, b_in, a_in
        )
    if kind is CollectiveKind.REDUCE_SCATTER:
        return ring_time(kind, size_bytes, n_intra, b_in, a_in) + ring_time(
            kind, per_node, n_inter, b_out, a_out
        )
    return ring_time(kind, size_bytes, n_intra, b_in, a_in) + ring_time(
        kind, size_bytes, n_inter, b_out, a_out
    )


def _check_group(size_bytes: float, n: int) -> None:
    positive_int(n, "group size n", error=HardwareError, numpy=True)
    nonnegative_number(size_bytes, "size_bytes", error=HardwareError, numpy=True)


def _check_link(bandwidth: float, latency: float) -> None:
    positive_number(bandwidth, "bandwidth", error=HardwareError, fix="give bytes/s", numpy=True)
    nonnegative_number(latency, "latency", error=HardwareError, fix="give seconds", numpy=True)
