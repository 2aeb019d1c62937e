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

Host links (`explorer.hardware.host`): per chip and per direction, from the vendors'
datasheets; a cluster profile can give its own with a link level named ``"pcie"``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

from ..checks import is_number
from ..hardware import Cluster
from ..hardware.errors import HardwareError
from ..hardware.host import HostLink, host_link
from .errors import OffloadError
from .memory import MemoryBreakdown
from .params import TrainingParams
from .simulate import SimResult
from .step_model.kernels import optimizer_step_s
from .step_model.model import exposed_s

__all__ = [
    "OffloadKind", "OFFLOAD_KINDS", "OffloadParams", "OffloadTerms", "offload_terms",
    "apply_offload", "offloaded_memory", "optimizer_offload_s", "offload_link",
]  # fmt: skip

OffloadKind = Literal["none", "optimizer", "optimizer+params"]
OFFLOAD_KINDS: tuple[str, ...] = get_args(OffloadKind)
_GIB = 2**30


def offload_link(cluster: Cluster) -> HostLink:
    """`explorer.hardware.host.host_link` of ``cluster``, its error an `OffloadError` (an
    unknown host link is why offload cannot be priced)."""
    try:
        return host_link(cluster)
    except HardwareError as e:
        raise OffloadError(str(e)) from None


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
            if not is_number(v, minimum=0, maximum=1) or (
                f.name == "host_memory_efficiency" and v == 0
            ):
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


def _parameters_kept(mem: MemoryBreakdown, kind: OffloadKind, tparams: TrainingParams,
                     layers: int) -> float:  # fmt: skip
    """Weight bytes left on the device: all of them, or with ``optimizer+params`` a buffer
    of ``zero3_prefetch_layers`` of the stage's ``layers`` layers."""
    if kind != "optimizer+params":
        return mem.parameters
    return mem.parameters * min(1.0, tparams.zero3_prefetch_layers / max(layers, 1))


def offloaded_memory(
    mem: MemoryBreakdown, kind: OffloadKind, tparams: TrainingParams, layers: int = 1
) -> MemoryBreakdown:
    """A device's memory with what ``kind`` keeps in host memory taken off: the optimizer
    states, and with ``optimizer+params`` the weights beyond a prefetch buffer of
    ``zero3_prefetch_layers`` of the stage's ``layers`` layers; the fragmentation of the
    bytes gone goes too (``allowances.fragmentation_fraction``). `apply_offload` and the
    pipeline across pools (`explorer.training.hetero.pipeline`) both use it.

    >>> from explorer.training.memory import MemoryBreakdown
    >>> mem = MemoryBreakdown(parameters=2.0, optimizer_states=12.0, fragmentation=1.0)
    >>> offloaded_memory(mem, "optimizer", TrainingParams()).optimizer_states
    0.0
    """
    params = _parameters_kept(mem, kind, tparams, layers)
    gone = mem.optimizer_states + (mem.parameters - params)
    frag = tparams.allowances.fragmentation_fraction
    return dataclasses.replace(
        mem, optimizer_states=0.0, parameters=params,
        fragmentation=max(0.0, mem.fragmentation - frag * gone),
    )  # fmt: skip


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
        exposed_s(grad_copy, backward_window_s, op.gradient_overlap_fraction)
        + host_step + weight_copy
    )  # fmt: skip
    return grad_copy, host_step, weight_copy, exposed


def _check_inputs(sim: object, cluster: object, tparams: object, oparams: object) -> None:
    """The types the offload functions name, each refused with its fix."""
    for name, value, cls, fix in (
        ("sim", sim, SimResult, "pass the SimResult of ex.simulate(...) or plan.sim"),
        ("cluster", cluster, Cluster, "pass explorer.hardware.load('a100-80g')"),
        ("tparams", tparams, TrainingParams, "pass ex.TrainingParams() or plan.params"),
    ):
        if not isinstance(value, cls):
            raise OffloadError(f"{name}={value!r} is not a {cls.__name__}; {fix}")
    if oparams is not None and not isinstance(oparams, OffloadParams):
        raise OffloadError(f"oparams={oparams!r} is not an OffloadParams; pass OffloadParams() "
                           "or None")  # fmt: skip


def offload_terms(
    sim: SimResult, kind: OffloadKind, cluster: Cluster, tparams: TrainingParams,
    oparams: OffloadParams | None = None,
) -> OffloadTerms:  # fmt: skip
    """The offload of ``kind`` applied to the device of ``sim`` needing the most memory."""
    _check_inputs(sim, cluster, tparams, oparams)
    if not isinstance(kind, str) or kind not in OFFLOAD_KINDS or kind == "none":
        raise OffloadError(
            f"offload={kind!r}; expected 'optimizer' or 'optimizer+params' ('none' offloads "
            "nothing)"
        )
    op = oparams or OffloadParams()
    link = offload_link(cluster)
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
    device_opt = optimizer_step_s(opt_params, cluster.chip, tparams)  # the step it replaces
    host = mem.optimizer_states
    layers = max(sim.partition.layer_counts())
    saved = mem.optimizer_states + mem.parameters - _parameters_kept(mem, kind, tparams, layers)
    stream = 0.0
    if kind == "optimizer+params":
        host += mem.parameters
        stream = 2 * m * (link.latency_s + mem.parameters / bw)
        compute = kinds.get("compute-forward", 0.0) + kinds.get("compute-backward", 0.0)
        exposed += exposed_s(stream, compute, op.param_prefetch_overlap_fraction)
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
    layers = max(sim.partition.layer_counts())

    def moved(mem):
        return offloaded_memory(mem, kind, tparams, layers)

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
