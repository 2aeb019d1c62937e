"""``link_fit(trace, cluster)``: latency and bandwidth per link level, fitted from the
collectives a trace timed.

Each collective whose kind, bytes and group the trace records is one sample of the ring
model the planner prices collectives with (`explorer.hardware.collectives`): its time is
``ring_latency(kind, n, 1) * alpha + bytes_sent_per_device(kind, S, n) / B``, linear in the
latency ``alpha`` and the inverse bandwidth ``1 / B``. The samples are split by the level
their group crosses (``intra-node`` when every member sits on one node of
``cluster.chips_per_node`` ranks, else ``inter-node``) and each level is fitted by
non-negative least squares on relative errors. A collective that waited for a late peer
lasts longer than its transfer, so each distinct message (kind, group size, bytes) counts
once, at its fastest time. With a single message size the two terms cannot be told apart:
both are scaled by one factor, keeping the cluster's ratio (``LinkFit.note`` says so).

Where the time comes from: a GPU trace's NCCL kernels; a CPU trace's backend slices
(``gloo:all_reduce`` on gloo's thread: the wire time, where the ``c10d::`` op on the main
thread only enqueues the work), whose size is their input (an all-gather's input is its
share: the planner's ``S`` is the gathered output, ``n`` times it).

>>> import explorer as ex
>>> t = ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz"))
>>> fit = ex.traces.link_fit(t, ex.hardware.load("a100-80g"))
>>> [(f.level, f.messages) for f in fit.fits]
[('intra-node', 5)]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..hardware import Cluster
from ..hardware.collectives import bytes_sent_per_device, ring_latency
from .classify import collective_kind, dtype_bytes, nelems
from .errors import TracesError
from .events import KinetoTrace, RankTrace

__all__ = ["LinkFit", "LinkFits", "link_fit", "link_samples"]

US = 1e-6
_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv")
LEVELS = ("intra-node", "inter-node")


@dataclass(frozen=True)
class LinkFit:
    """One link level's fitted latency and bandwidth.

    Attributes:
        level: ``intra-node`` or ``inter-node``.
        latency_s, bandwidth_bytes_per_s: fitted (latency: the cluster's when ``note`` says
            it could not be fitted).
        before_latency_s, before_bandwidth_bytes_per_s: the cluster's figures.
        samples: collectives read; ``messages``: distinct (kind, group size, bytes) fitted.
        error_before, error_after: median relative error of the messages' times under the
            cluster's figures and under the fitted ones.
        note: what could not be fitted, or "".
    """

    level: str
    latency_s: float
    bandwidth_bytes_per_s: float
    before_latency_s: float
    before_bandwidth_bytes_per_s: float
    samples: int
    messages: int
    error_before: float
    error_after: float
    note: str = ""

    def __str__(self) -> str:
        return (
            f"{self.level}: latency {self.latency_s * 1e6:.3g} us (was "
            f"{self.before_latency_s * 1e6:.3g}), bandwidth "
            f"{self.bandwidth_bytes_per_s / 1e9:.3g} GB/s (was "
            f"{self.before_bandwidth_bytes_per_s / 1e9:.3g}); {self.messages} messages of "
            f"{self.samples} collectives, median error {self.error_before:+.0%} -> "
            f"{self.error_after:+.0%}" + (f" ({self.note})" if self.note else "")
        )


@dataclass(frozen=True)
class LinkFits:
    """The levels `link_fit` could fit, innermost first, and the cluster they came from."""

    fits: tuple[LinkFit, ...]
    base: Cluster

    def cluster(self) -> Cluster:
        """``base`` with the fitted latency and bandwidth of each level fitted (its
        intra/inter fields, and the matching `Level` where it lists its levels)."""
        c = self.base
        for f in self.fits:
            pre = "intra_node" if f.level == "intra-node" else "inter_node"
            c = replace(c, **{f"{pre}_latency_s": f.latency_s,
                              f"{pre}_bandwidth_bytes_per_s": f.bandwidth_bytes_per_s})  # fmt: skip
        if c.link_levels:
            levels = list(c.link_levels)
            i = next((k for k, lv in enumerate(levels) if lv.group_size == c.chips_per_node), None)
            for f in self.fits:
                j = i if f.level == "intra-node" else (None if i is None else i + 1)
                if j is not None and j < len(levels):
                    levels[j] = replace(levels[j], latency_s=f.latency_s,
                                        bandwidth_bytes_per_s=f.bandwidth_bytes_per_s)  # fmt: skip
            c = replace(c, link_levels=tuple(levels))
        return c

    def __str__(self) -> str:
        return "\n".join(str(f) for f in self.fits)


def link_samples(trace: KinetoTrace | RankTrace) -> list[tuple[str, int, int, float, tuple]]:
    """The timed collectives of a trace as ``(kind, group size, bytes S, seconds, ranks)``:
    those whose kind is a ring collective and whose bytes and group the trace records."""
    ranks = trace.ranks if isinstance(trace, KinetoTrace) else (trace,)
    out = []
    for r in ranks:
        if r.device == "gpu":
            for k in r.collectives:
                c = k.collective
                group = c.group_ranks or ()
                n = len(group) or c.group_size
                if c.kind in _KINDS and c.size_bytes and n and n > 1 and k.dur > 0:
                    out.append((c.kind, n, c.size_bytes, k.dur * US, tuple(group)))
            continue
        sets = {g.ranks for g in r.groups}
        group = next(iter(sets)) if len(sets) == 1 else ()
        dtypes = {a.collective.dtype for a in r.collectives} - {None}
        width = dtype_bytes(next(iter(dtypes))) if len(dtypes) == 1 else None
        if len(group) < 2 or width is None:
            continue
        n = len(group)
        for a in r.ops:  # the backend's own slices: the wire time (module doc)
            kind = collective_kind(a.name[5:]) if a.name.startswith("gloo:") else None
            elems = nelems(list(a.shapes[0])) if kind in _KINDS and a.shapes else None
            if elems and a.dur > 0:
                size = elems * width * (n if kind == "all-gather" else 1)
                out.append((kind, n, size, a.dur * US, tuple(group)))
    return out


def link_fit(trace: KinetoTrace | RankTrace, cluster: Cluster) -> LinkFits:
    """Fit each link level's latency and bandwidth to the trace's collectives (module doc).

    Raises:
        TracesError: not a trace or not a cluster; no collective with its bytes and group.
    """
    if isinstance(trace, RankTrace):
        trace = KinetoTrace((trace,))
    if not isinstance(trace, KinetoTrace):
        raise TracesError(f"link_fit({trace!r}): expected a KinetoTrace from load_kineto")
    if not isinstance(cluster, Cluster):
        raise TracesError(
            f"link_fit(cluster={cluster!r}): expected a Cluster (ex.hardware.load('h100'))"
        )
    samples = link_samples(trace)
    if not samples:
        raise TracesError(
            "link_fit: the trace holds no ring collective with its size and group (NCCL "
            "kernels with Kineto's communication arguments, or gloo slices with their input "
            "shapes in a trace with one process group); profile with record_shapes=True"
        )
    per = cluster.chips_per_node
    by_level: dict[str, list] = {}
    for kind, n, size, secs, group in samples:
        one_node = bool(group) and len({g // per for g in group}) == 1
        level = "intra-node" if (one_node or (not group and n <= per)) else "inter-node"
        by_level.setdefault(level, []).append((kind, n, size, secs))
    fits = []
    for level in LEVELS:
        if level in by_level:
            pre = "intra_node" if level == "intra-node" else "inter_node"
            lat = getattr(cluster, f"{pre}_latency_s")
            bw = getattr(cluster, f"{pre}_bandwidth_bytes_per_s")
            fits.append(_fit(level, by_level[level], lat, bw))
    return LinkFits(tuple(fits), cluster)


def _fit(level: str, samples: list, lat0: float, bw0: float) -> LinkFit:
    fastest: dict[tuple, float] = {}
    for kind, n, size, secs in samples:
        key = (kind, n, size)
        fastest[key] = min(secs, fastest.get(key, float("inf")))
    keys = sorted(fastest)
    t = np.array([fastest[k] for k in keys])
    a = np.array([ring_latency(kind, n, 1.0) for kind, n, _ in keys])
    b = np.array([bytes_sent_per_device(kind, size, n) for kind, n, size in keys])
    sizes = {size for _, _, size in keys}
    note = ""
    if len(sizes) >= 2:
        from scipy.optimize import nnls

        coef, _ = nnls(np.stack([a / t, b / t], axis=1), np.ones(len(t)))
        lat, inv_bw = float(coef[0]), float(coef[1])
    else:  # one size: both terms scaled by one factor (the cluster's latency/bandwidth ratio)
        scale = float(np.median(t / (a * lat0 + b / bw0)))
        lat, inv_bw = lat0 * scale, scale / bw0
        note = "one message size: the cluster's latency and bandwidth scaled together"
    if inv_bw <= 0:  # only latency explains them (or they fit no bandwidth): keep the cluster's
        rest = np.maximum(t - a * lat, 0.0)
        inv_bw = float(np.median(rest / b)) if np.any(rest > 0) else 1.0 / bw0
        note = note or "times do not grow with the bytes: bandwidth from the time left"
    inv_bw = max(inv_bw, 1e-30)

    def err(lat_, inv_):
        return float(np.median((a * lat_ + b * inv_) / t - 1.0))

    return LinkFit(level, lat, 1.0 / inv_bw, lat0, bw0, len(samples), len(keys),
                   err(lat0, 1.0 / bw0), err(lat, inv_bw), note)  # fmt: skip
