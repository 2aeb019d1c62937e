"""Host offload: optimizer states (and optionally parameters) kept in host memory and moved
over the host's PCIe link (DeepSpeed ZeRO-Offload, Ren et al. 2021; MindSpore's optimizer
offload; ZeRO-Infinity for parameters, Rajbhandari et al. 2021).

``optimizer`` (ZeRO-Offload): the fp32 master weights, momentum and variance of the
device's optimizer share live in host memory and the host runs the Adam update. Per step,
each device sends its share's 16-bit gradients to the host (device -> host), the host
updates, and the 16-bit weights come back (host -> device). Times:

- gradient copy ``g * gradient_bytes / pcie``: overlapped with the last microbatch's
  backward (ZeRO-Offload streams each bucket as it is reduced), ``OffloadParams.
  gradient_overlap_fraction`` of it at most the backward's length;
- host step ``g * optimizer_step_bytes_per_param / (host memory bandwidth x efficiency)``,
  after the copy (not overlapped: ZeRO-Offload's delayed parameter update is not modelled);
- weight copy ``g * weight_bytes / pcie`` before the next forward (exposed).

It replaces the device's optimizer step. Device memory saved: the optimizer states.

``optimizer+params`` also keeps the 16-bit weights in host memory and streams them to the
device for each microbatch's forward and backward (``2 m x weights / pcie``), prefetched
behind the compute (``param_prefetch_overlap_fraction``); the device keeps a buffer of
``zero3_prefetch_layers`` layers' weights. Memory saved: optimizer states and the weights
less the buffer.

Host links (`HOST_LINKS`): per chip and per direction, from the vendors' datasheets (PCIe
generation x16) and their servers' system memory and CPUs; a cluster profile can give its
own with a link level named ``"pcie"``/``"host-pcie"``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from ...hardware import Cluster
from ..errors import TrainingError

if TYPE_CHECKING:
    from ..simulate import SimResult
    from ..step_model import TrainingParams

__all__ = [
    "OffloadKind", "OFFLOAD_KINDS", "OffloadError", "HostLink", "HOST_LINKS", "host_link",
    "OffloadParams", "OffloadTerms", "offload_terms", "apply_offload", "optimizer_offload_s",
]  # fmt: skip

OffloadKind = Literal["none", "optimizer", "optimizer+params"]
OFFLOAD_KINDS: tuple[str, ...] = get_args(OffloadKind)
_GB = 1e9
_GIB = 2**30


class OffloadError(TrainingError):
    """Offload cannot be priced as asked (unknown host link, bad kind); names the fix."""


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
        raise OffloadError(
            f"no host link known for chip {chip!r} ({cluster.name}); add it to "
            "explorer.training.terms.offload.HOST_LINKS or a 'pcie' level to the profile"
        )
    return base


@dataclass(frozen=True)
class OffloadParams:
    """The knobs of the offload model (fractions in [0, 1]).

    Args:
        gradient_overlap_fraction: of the gradient copy to the host hidden behind the last
            backward (Ren et al. 2021, ZeRO-Offload section 4.1: copies overlap the
            backward); 1.0 default.
        param_prefetch_overlap_fraction: of the weight streaming hidden behind compute
            (ZeRO-Infinity prefetches the next layers); 1.0 default.
        host_memory_efficiency: fraction of the host DRAM bandwidth the CPU Adam update
            reaches; 0.5 (assumption).
    """

    gradient_overlap_fraction: float = 1.0
    param_prefetch_overlap_fraction: float = 1.0
    host_memory_efficiency: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or not 0 <= v <= 1 or (f.name == "host_memory_efficiency" and v == 0):
                raise OffloadError(
                    f"OffloadParams.{f.name}={v!r}; expected a fraction in [0, 1] "
                    "(host_memory_efficiency > 0)"
                )


@dataclass(frozen=True)
class OffloadTerms:
    """What offload moves and costs on one device per step.

    Attributes:
        kind: the offload; ``link``: the host link used.
        host_bytes: bytes kept in host memory for this device; ``device_bytes_saved``.
        gradient_copy_s, host_step_s, weight_copy_s, param_stream_s: the raw times.
        exposed_s: what the step gains (before the device optimizer step it replaces is
            taken off); ``device_optimizer_s``: that removed step.
        fits_host: ``host_bytes <= link.host_memory_bytes``.
    """

    kind: OffloadKind
    link: HostLink
    host_bytes: float
    device_bytes_saved: float
    gradient_copy_s: float
    host_step_s: float
    weight_copy_s: float
    param_stream_s: float
    exposed_s: float
    device_optimizer_s: float

    @property
    def fits_host(self) -> bool:
        return self.host_bytes <= self.link.host_memory_bytes

    @property
    def added_s(self) -> float:
        """Net seconds the step grows by."""
        return self.exposed_s - self.device_optimizer_s

    def __str__(self) -> str:
        return (
            f"offload {self.kind} over {self.link.name}: {self.device_bytes_saved / _GIB:.1f} "
            f"GiB off the device ({self.host_bytes / _GIB:.1f} GiB in host memory), step "
            f"{self.added_s:+.3g} s (gradients {self.gradient_copy_s:.3g} s behind the "
            f"backward, host Adam {self.host_step_s:.3g} s, weights back {self.weight_copy_s:.3g} s"
            + (f", weight streaming {self.param_stream_s:.3g} s" if self.param_stream_s else "")
            + ")"
        )


def _exposed(comm_s: float, window_s: float, fraction: float) -> float:
    return comm_s - min(fraction * comm_s, max(window_s, 0.0))


def optimizer_offload_s(
    opt_params: float, backward_window_s: float, link: HostLink, tparams: TrainingParams,
    oparams: OffloadParams | None = None,
) -> tuple[float, float, float, float]:  # fmt: skip
    """(gradient copy, host step, weight copy, exposed) seconds of offloading the optimizer
    of ``opt_params`` parameters (one device's share), the gradient copy hidden behind
    ``backward_window_s`` (the module docstring's model)."""
    op = oparams or OffloadParams()
    st = tparams.state
    bw = link.bandwidth_bytes_per_s
    grad_copy = link.latency_s + opt_params * st.gradient_bytes / bw
    host_bw = link.host_memory_bandwidth_bytes_per_s * op.host_memory_efficiency
    host_step = opt_params * tparams.optimizer_step_bytes_per_param / host_bw
    weight_copy = link.latency_s + opt_params * st.weight_bytes / bw
    exposed = (
        _exposed(grad_copy, backward_window_s, op.gradient_overlap_fraction)
        + host_step + weight_copy
    )  # fmt: skip
    return grad_copy, host_step, weight_copy, exposed


def offload_terms(
    sim: SimResult, kind: OffloadKind, cluster: Cluster, tparams: TrainingParams,
    oparams: OffloadParams | None = None,
) -> OffloadTerms:  # fmt: skip
    """The offload of ``kind`` applied to the device of ``sim`` needing the most memory."""
    if kind not in OFFLOAD_KINDS or kind == "none":
        raise OffloadError(
            f"offload={kind!r}; expected 'optimizer' or 'optimizer+params' ('none' offloads "
            "nothing)"
        )
    op = oparams or OffloadParams()
    link = host_link(cluster)
    st = tparams.state
    mem = sim.memory
    opt_params = mem.optimizer_states / st.optimizer_bytes if st.optimizer_bytes else 0.0
    bw = link.bandwidth_bytes_per_s
    kinds = dict(sim.time_by_kind)
    m = sim.config.num_microbatches or 1
    backward = kinds.get("compute-backward", 0.0) / m
    grad_copy, host_step, weight_copy, exposed = optimizer_offload_s(
        opt_params, backward, link, tparams, op
    )
    hbm = (
        tparams.hbm_efficiency
        if tparams.kernel_model == "shape"
        else tparams.cost.bandwidth_efficiency
    )
    device_opt = (
        opt_params * tparams.optimizer_step_bytes_per_param
        / (cluster.chip.memory_bandwidth_bytes_per_s * hbm)
    )  # fmt: skip
    host = mem.optimizer_states
    saved = mem.optimizer_states
    stream = 0.0
    if kind == "optimizer+params":
        layers = max(sim.partition.layer_counts()) or 1
        buffer = mem.parameters * min(1.0, tparams.zero3_prefetch_layers / layers)
        saved += mem.parameters - buffer
        host += mem.parameters
        stream = 2 * m * (link.latency_s + mem.parameters / bw)
        compute = kinds.get("compute-forward", 0.0) + kinds.get("compute-backward", 0.0)
        exposed += _exposed(stream, compute, op.param_prefetch_overlap_fraction)
    saved *= 1 + tparams.allowances.fragmentation_fraction  # its share of fragmentation goes too
    return OffloadTerms(
        kind=kind, link=link, host_bytes=host, device_bytes_saved=saved,
        gradient_copy_s=grad_copy, host_step_s=host_step, weight_copy_s=weight_copy,
        param_stream_s=stream, exposed_s=exposed, device_optimizer_s=device_opt,
    )  # fmt: skip


def apply_offload(
    sim: SimResult, kind: OffloadKind, cluster: Cluster, tparams: TrainingParams,
    oparams: OffloadParams | None = None,
) -> tuple[SimResult, OffloadTerms]:  # fmt: skip
    """``sim`` with the offload applied: memory rows moved to the host (every pipeline
    device's), the step longer by `OffloadTerms.added_s` (time kinds ``offload`` and
    ``host-optimizer`` replace ``optimizer``), FLOP/s and MFU rescaled, no timeline (the
    event simulation did not include the host)."""
    terms = offload_terms(sim, kind, cluster, tparams, oparams)
    frag = tparams.allowances.fragmentation_fraction

    def moved(mem):
        params = mem.parameters
        if kind == "optimizer+params":
            layers = max(sim.partition.layer_counts()) or 1
            params = mem.parameters * min(1.0, tparams.zero3_prefetch_layers / layers)
        gone = mem.optimizer_states + (mem.parameters - params)
        return dataclasses.replace(
            mem, optimizer_states=0.0, parameters=params,
            fragmentation=max(0.0, mem.fragmentation - frag * gone),
        )  # fmt: skip

    step = sim.step_time_s + terms.added_s
    scale = sim.step_time_s / step
    kinds = dict(sim.time_by_kind)
    pp = sim.config.pp
    kinds.pop("optimizer", None)
    kinds["offload"] = (terms.exposed_s - terms.host_step_s) / pp
    kinds["host-optimizer"] = terms.host_step_s / pp
    # the kinds are seconds per pipeline device on average; idle is what the step leaves
    kinds["idle"] = max(0.0, step - sum(v for k, v in kinds.items() if k != "idle"))
    new = dataclasses.replace(
        sim, step_time_s=step, tokens_per_s=sim.tokens_per_s * scale,
        tflops_per_device=sim.tflops_per_device * scale,
        hardware_tflops_per_device=sim.hardware_tflops_per_device * scale, mfu=sim.mfu * scale,
        memory=moved(sim.memory), memory_per_device=tuple(moved(m) for m in sim.memory_per_device),
        time_by_kind=tuple(sorted(kinds.items())), timeline=None,
    )  # fmt: skip
    return new, terms
