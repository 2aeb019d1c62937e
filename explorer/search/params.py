"""``CostParams``: every knob of the cost model, with its unit in its name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ..checks import is_number
from .errors import SearchError

__all__ = ["CostParams", "CostUnit"]

CostUnit = Literal["seconds", "bytes"]


@dataclass(frozen=True)
class CostParams:
    """The cost model's weights and hardware efficiencies.

    Two presets: ``CostParams()`` is a time-based roofline model in seconds (FLOPs over
    achievable FLOP/s, bytes over achievable bandwidth plus latency per collective step);
    ``CostParams.mindspore()`` is MindSpore's byte-based model (computation = bytes of the
    input slices, communication = bytes moved, small messages adjusted).

    Weights:
        alpha_compute: weight of computation cost.
        beta_communication: weight of activation redistribution and in-op collectives.
        gamma_param_comm: weight of parameter-gradient communication (data-parallel
            all-reduce of a weight replicated over axes its consumer splits).
        memory_weight_per_byte: cost added per byte of device memory a strategy keeps.
    Memory:
        device_memory_cap_bytes: the memory a plan may use per device (None: the chip's).
    MindSpore's message adjustment (unit ``bytes`` only): a message of
        ``0 < c <= message_threshold_bytes`` costs ``message_constant_bytes``; a larger one
        costs ``c + message_bias_bytes``.
    Efficiencies (unit ``seconds`` only):
        compute_efficiency: achievable fraction of the chip's peak FLOP/s.
        bandwidth_efficiency: achievable fraction of each link's bandwidth.
        grad_comm_overlap: fraction of gradient communication hidden behind compute.
    Training:
        training: cost forward + backward (backward = ``backward_compute_ratio`` x the
            forward FLOPs and ``backward_comm_ratio`` x its redistributions) and the
            gradient reduction; False costs inference (forward only, no gradients).
        prefer_data_parallel_on_ties: among equal costs pick the pure data-parallel
            strategy (MindSpore's rule).

    >>> CostParams.mindspore().beta_communication
    400.0
    """

    unit: CostUnit = "seconds"
    alpha_compute: float = 1.0
    beta_communication: float = 1.0
    gamma_param_comm: float = 1.0
    memory_weight_per_byte: float = 0.0
    device_memory_cap_bytes: float | None = None
    message_threshold_bytes: float = 2048.0
    message_constant_bytes: float = 3072.0
    message_bias_bytes: float = 1024.0
    compute_efficiency: float = 0.5
    bandwidth_efficiency: float = 0.8
    grad_comm_overlap: float = 0.0
    training: bool = True
    backward_compute_ratio: float = 2.0
    backward_comm_ratio: float = 1.0
    prefer_data_parallel_on_ties: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("training", "prefer_data_parallel_on_ties") and not isinstance(v, bool):
                raise SearchError(f"CostParams.{f.name}={v!r}; expected True or False")
            if f.name in ("unit", "training", "prefer_data_parallel_on_ties"):
                continue
            if v is None and f.name == "device_memory_cap_bytes":  # None: the chip's memory
                continue
            no_cap = f.name == "device_memory_cap_bytes" and v == float("inf")  # +inf: no cap
            if not is_number(v, finite=not no_cap, numpy=True):
                raise SearchError(
                    f"CostParams.{f.name}={v!r}; expected a number, finite (not NaN or inf), in "
                    "the unit its name says"
                )
        if self.unit not in ("seconds", "bytes"):
            raise SearchError(f"CostParams.unit={self.unit!r}; expected 'seconds' or 'bytes'")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or f.name == "unit" or v is None:
                continue
            if v < 0:
                raise SearchError(f"CostParams.{f.name}={v}; expected a value >= 0")
        for k in ("compute_efficiency", "bandwidth_efficiency"):
            if not 0 < getattr(self, k) <= 1:
                raise SearchError(f"CostParams.{k}={getattr(self, k)}; expected 0 < value <= 1")
        if not 0 <= self.grad_comm_overlap <= 1:
            raise SearchError(
                f"CostParams.grad_comm_overlap={self.grad_comm_overlap}; expected 0..1"
            )

    @classmethod
    def mindspore(cls, **changes) -> CostParams:
        """MindSpore's defaults: alpha 1, beta 400, gamma 0.001, threshold/constant/bias
        2048/3072/1024 bytes, data parallel preferred on ties."""
        base = cls(
            unit="bytes", alpha_compute=1.0, beta_communication=400.0, gamma_param_comm=0.001,
            message_threshold_bytes=2048.0, message_constant_bytes=3072.0,
            message_bias_bytes=1024.0, prefer_data_parallel_on_ties=True,
        )  # fmt: skip
        return dataclasses.replace(base, **changes)

    def replace(self, **changes) -> CostParams:
        return dataclasses.replace(self, **changes)

    def fields(self) -> dict[str, object]:
        """Every knob as a dict (the widgets build one control per entry)."""
        return dataclasses.asdict(self)
