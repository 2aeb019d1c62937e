"""`Chip`: one accelerator's peak compute per dtype, memory capacity and memory bandwidth,
and the facts the training step model's matmul timing needs (compute units, GEMM tiles)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from explorer.checks import is_int, is_number, positive_int, positive_number
from explorer.hardware.errors import HardwareError

__all__ = ["DTYPES", "Chip", "DTypeName", "KERNEL_FACTS", "EFFICIENCY_FACTS", "DEFAULT_EFFICIENCY"]

DTypeName = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
# Canonical order used to store and print peak rates, widest first.
DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

_HEADLINE = ("bf16", "fp16", "tf32", "fp32")

# The output tiles cuBLAS picks from on Volta, Ampere and Hopper, most efficient first:
# NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001, 2023), section
# 2.3 "Typical tile dimensions in cuBLAS and performance" (256x128 and 128x256 the most
# efficient, 64x64 the least) and section 3.2 "Wave quantization" (A100: 108 SMs).
_CUBLAS_TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64),
                 (64, 128), (64, 64))  # fmt: skip

# Chip name -> (compute units, GEMM tiles), for chips whose vendor documents them.
# SM counts: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs (A100
# SXM4 40 and 80 GB); NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 132 SMs
# (H100 SXM5); H200 SXM is the same GH100 chip with 141 GB of HBM3e (NVIDIA H200 datasheet),
# 132 SMs; NVIDIA Tesla V100 GPU Architecture whitepaper (2017): 80 SMs (V100 SXM2).
# Ascend and TPU profiles have no entry: no wave quantization is modelled for them.
KERNEL_FACTS: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {
    "NVIDIA A100 SXM4 80GB": (108, _CUBLAS_TILES),
    "NVIDIA A100 SXM4 40GB": (108, _CUBLAS_TILES),
    "NVIDIA H100 SXM5 80GB": (132, _CUBLAS_TILES),
    "NVIDIA H100 SXM5 96GB HBM2e": (132, _CUBLAS_TILES),
    "NVIDIA H200 SXM 141GB": (132, _CUBLAS_TILES),
    "NVIDIA Tesla V100 SXM2 32GB": (80, _CUBLAS_TILES),
}

# Chip name -> (GEMM ceiling, fused-attention efficiency, source): the fractions of the
# chip's dense peak that a full wave of the largest GEMM tiles, and a fused (flash)
# attention kernel forward and backward together, reach in current libraries. The training
# step model uses them where its TrainingParams knobs are None (the stacks of
# explorer.training.stacks leave them None; TrainingParams() keeps the 2021 values).
_FA2 = (
    "FlashAttention-2 reaches 50-73% of A100 peak forward and up to 72% forward+backward "
    "(Dao 2023, arXiv:2307.08691, section 4.1)"
)
_FA3 = (
    "FlashAttention-3 reaches 75% of H100 BF16 peak forward, its backward 1.5-1.75x "
    "FlashAttention-2's (Shah et al. 2024, arXiv:2407.08608); forward and backward "
    "together (backward 2.5x the FLOPs) about 0.55 (assumption within it)"
)
# Fitted (issue 24) by least squares (bench/accuracy.py --fit: scipy.optimize.least_squares,
# residuals log(predicted / measured), soft_l1 loss at 10%) on the FIT rows of the stack files
# of datasets/published only (check rows never read), each row predicted uncalibrated with its
# stack preset (explorer.training.stacks.row_params, multi-rail collectives) and estimate: one
# scale per chip on its starting (GEMM ceiling, fused-attention) pair (the one-step values
# 0.76/0.57 A100, 0.6/0.44 H100 SXM, 0.37/0.29 H100 HBM2e, 0.48/0.35 B200, 0.68/0.5 GB200),
# jointly with torchtitan's kernel_overhead_s and the stacks' fp8_matmul_efficiency_ratio and
# overlap_interference and moe_layer_overhead_s, the H100 SXM's attention with a scale of
# its own; 113 fit rows (eight passes, each from the last one's values, after each physics
# fix: multi-rail collectives, the FP8 ratio, the interference, NVLink domains aligned to the
# job, all-to-alls split by level, the MoE layer overhead; the last: bench/results/
# accuracy.json today_fit).
_FIT = "fitted by least squares (bench/accuracy.py --fit) on datasets/published"
EFFICIENCY_FACTS: dict[str, tuple[float, float, str]] = {
    "NVIDIA A100 SXM4 80GB": (0.662, 0.497, f"{_FA2}; {_FIT} a100-80g fit rows (4, torchtitan "
                             "2024 Llama on 64 A100): 0.76 and 0.57 x 0.871"),
    "NVIDIA A100 SXM4 40GB": (0.662, 0.497, f"{_FA2}; as the A100 80GB (same GA100 chip)"),
    "NVIDIA H100 SXM5 80GB": (0.635, 0.34, f"{_FA3}; {_FIT} h100-sxm and h200 fit rows (68: "
                             "NeMo, DGX Cloud, Megatron-LM, Megatron-Bridge, NeMo AutoModel, "
                             "MaxText, torchtitan on H200): 0.6 x 1.058 and 0.44 x 0.773 (the attention "
                             "scaled on its own: the NeMo 16K-128K-token fit rows)"),
    "NVIDIA H100 SXM5 96GB HBM2e": (0.556, 0.205, f"{_FA3}; {_FIT} h100-hbm2e-96g fit rows (17, "
                                   "all torchtitan on Grand Teton at 500 W; bench/accuracy.py "
                                   "--fit-chip h100-hbm2e-96g, the chip's two scales alone, "
                                   "every other value as stored, after TP layouts became "
                                   "Megatron-LM's (tp_layout='megatron'): 0.368 x 1.510 and "
                                   "0.288 x 0.711. The attention value carries what the step "
                                   "model misses of the 32K-262K-token context-parallel rows"),
    "NVIDIA H200 SXM 141GB": (0.635, 0.34, f"{_FA3}; the H100 SXM's fitted values (same "
                             "GH100 chip; its fit row was one of the H100 SXM's fit rows)"),
    "NVIDIA B200 SXM 180GB": (0.466, 0.339, f"{_FIT} b200 fit rows (5, Megatron-Bridge MoE and "
                             "Llama, jointly with moe_layer_overhead_s): 0.48 and 0.35 x 0.971"),
    "NVIDIA GB200 Blackwell GPU 186GB": (0.456, 0.568, f"{_FIT} gb200-nvl72 fit rows (19, "
                                        "Megatron-Bridge and DGX Cloud): 0.68 and 0.5 x "
                                        "0.725; then alone (bench/accuracy.py --fit-chip "
                                        "gb200-nvl72, every other value as stored) after TP "
                                        "layouts became Megatron-LM's (tp_layout='megatron'): "
                                        "0.493 x 0.926 and 0.361 x 1.573. The attention value is "
                                        "weakly determined: a second pass from these values "
                                        "drifts to the bound 1.0 at a higher rms log error"),
    "AMD Instinct MI300X 192GB": (0.6, 0.4, "assumption: hipBLASLt and CK flash attention "
                                 "reach a smaller share of the larger MI300X peak"),
    "Google TPU v4": (0.75, 0.5, "assumption (XLA GEMMs; Pallas flash attention)"),
    "Google TPU v5p": (0.75, 0.5, "assumption (XLA GEMMs; Pallas splash attention)"),
    "Huawei Ascend 910": (0.6, 0.4, "assumption (CANN GEMMs and fused attention)"),
    "Huawei Ascend 910B": (0.6, 0.4, "assumption (CANN GEMMs and FlashAttentionScore)"),
    "Huawei Ascend 910C": (0.6, 0.4, "assumption (CANN GEMMs and FlashAttentionScore)"),
    "NVIDIA Tesla V100 SXM2 32GB": (0.75, 0.4, "assumption (no FlashAttention-2 on Volta)"),
}  # fmt: skip
#: A chip without an `EFFICIENCY_FACTS` entry nor its own figures.
DEFAULT_EFFICIENCY = (0.7, 0.5, "assumption: chip not in EFFICIENCY_FACTS")
_TERA = 1e12
_GIB = 2**30
_GIGA = 1e9


@dataclass(frozen=True)
class Chip:
    """One accelerator chip, in SI units.

    Args:
        name: marketing name, e.g. ``"NVIDIA A100 SXM4 80GB"``.
        peak_flops_per_s: dense (not 2:4 sparse) peak FLOP/s per dtype name, as a mapping or
            as ``(dtype, value)`` pairs; stored as pairs in `DTYPES` order so the chip stays
            hashable.
        memory_bytes: device memory capacity in bytes.
        memory_bandwidth_bytes_per_s: device memory (HBM) bandwidth in bytes/s.
        compute_units: streaming multiprocessors (or AI cores) that run one GEMM tile each
            at a time; a GEMM runs in waves of ``compute_units`` tiles. None: unknown (the
            matmul model then skips wave quantization). Filled from `KERNEL_FACTS` for the
            chips it names when not given.
        matmul_tile_shapes: (rows, columns) of the output tiles the vendor's GEMM library
            picks from, largest first; ``()``: unknown (no tile quantization).
        price_per_chip_hour: what one chip costs per hour, in US dollars (a rental list
            price); None: unknown (plans then have no cost objective).
        price_source: where the price comes from, or "assumption: ..." saying how it was
            chosen; required with a price.
        matmul_efficiency: the fraction of the dense peak a full wave of the largest GEMM
            tiles reaches (the training step model's GEMM ceiling where its knob is None);
            ``attention_efficiency``: a fused attention kernel's forward and backward.
            Filled from `EFFICIENCY_FACTS` (else `DEFAULT_EFFICIENCY`) when not given;
            ``efficiency_source`` says where they come from.

    >>> chip = Chip("toy", {"bf16": 1e12}, memory_bytes=2**30, memory_bandwidth_bytes_per_s=1e11)
    >>> chip.peak_flops("bf16")
    1000000000000.0
    """

    name: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    compute_units: int | None = None
    matmul_tile_shapes: tuple[tuple[int, int], ...] = ()
    price_per_chip_hour: float | None = None
    price_source: str = ""
    matmul_efficiency: float | None = None
    attention_efficiency: float | None = None
    efficiency_source: str = ""

    def __post_init__(self) -> None:
        pairs = _normalize_peaks(self.name, self.peak_flops_per_s)
        object.__setattr__(self, "peak_flops_per_s", pairs)
        facts = KERNEL_FACTS.get(self.name) if isinstance(self.name, str) else None
        if facts is not None:
            if self.compute_units is None:
                object.__setattr__(self, "compute_units", facts[0])
            if not self.matmul_tile_shapes:
                object.__setattr__(self, "matmul_tile_shapes", facts[1])
        _fill_efficiencies(self)
        _check_kernel_facts(self)
        _check_price(self)
        if not isinstance(self.name, str) or not self.name:
            raise HardwareError(f"Chip name must be a non-empty string, got {self.name!r}")
        positive_int(self.memory_bytes, f"Chip {self.name!r}: memory_bytes", error=HardwareError)
        _check_positive(
            self.name, "memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s
        )

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtype names this chip has a published peak rate for, in `DTYPES` order."""
        return tuple(dtype for dtype, _ in self.peak_flops_per_s)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``.

        Args:
            dtype: a dtype name such as ``"bf16"``.

        Raises:
            HardwareError: the chip has no published rate for ``dtype``.

        >>> Chip("toy", {"fp16": 2e12}, 2**30, 1e11).peak_flops("fp16")
        2000000000000.0
        """
        for name, value in self.peak_flops_per_s:
            if name == dtype:
                return value
        raise HardwareError(
            f"chip {self.name!r} has no peak FLOP/s for dtype {dtype!r}; "
            f"it has {', '.join(self.dtypes)}. Pick one of those or add the rate to its "
            f"datasets/hardware profile."
        )

    def __str__(self) -> str:
        # Headline rate: the usual training dtype first, whatever the chip has otherwise.
        dtype = next(d for d in (*_HEADLINE, *self.dtypes) if d in self.dtypes)
        return (
            f"{self.name} ({self.peak_flops(dtype) / _TERA:g} TFLOP/s {dtype}, "
            f"{self.memory_bytes / _GIB:g} GiB, {self.memory_bandwidth_bytes_per_s / _GIGA:g} GB/s)"
        )


def _normalize_peaks(
    chip: str, peaks: Mapping[str, float] | Iterable[tuple[str, float]]
) -> tuple[tuple[str, float], ...]:
    items = list(peaks.items()) if isinstance(peaks, Mapping) else list(peaks)
    if not items:
        raise HardwareError(f"Chip {chip!r}: peak_flops_per_s is empty; give at least one dtype")
    seen: dict[str, float] = {}
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise HardwareError(
                f"Chip {chip!r}: peak_flops_per_s entries must be (dtype, FLOP/s) pairs, "
                f"got {item!r}"
            )
        dtype, value = item
        if dtype not in DTYPES:
            raise HardwareError(
                f"Chip {chip!r}: unknown dtype {dtype!r} in peak_flops_per_s; "
                f"expected one of {', '.join(DTYPES)}"
            )
        if dtype in seen:
            raise HardwareError(f"Chip {chip!r}: dtype {dtype!r} appears twice in peak_flops_per_s")
        _check_positive(chip, f"peak_flops_per_s[{dtype!r}]", value)
        seen[dtype] = float(value)
    return tuple((dtype, seen[dtype]) for dtype in DTYPES if dtype in seen)


def _check_positive(owner: str, field: str, value: object) -> None:
    positive_number(value, f"{owner!r}: {field}", error=HardwareError)


def _check_price(chip: Chip) -> None:
    price = chip.price_per_chip_hour
    if price is None:
        return
    if not is_number(price, above=0):
        raise HardwareError(
            f"Chip {chip.name!r}: price_per_chip_hour={price!r}; expected a positive finite "
            "number of US dollars per chip-hour, or None when unknown"
        )
    if not isinstance(chip.price_source, str) or not chip.price_source.strip():
        raise HardwareError(
            f"Chip {chip.name!r}: price_per_chip_hour={price!r} has no price_source; cite "
            "where the price comes from, or write 'assumption: ...' saying how it was chosen"
        )


def _check_kernel_facts(chip: Chip) -> None:
    u = chip.compute_units
    if u is not None and not is_int(u, minimum=1):
        raise HardwareError(
            f"Chip {chip.name!r}: compute_units={u!r}; expected an int >= 1 (SMs or AI cores) "
            "or None when unknown"
        )
    tiles = chip.matmul_tile_shapes
    ok = isinstance(tiles, tuple) and all(
        isinstance(t, tuple) and len(t) == 2 and all(is_int(x, minimum=1) for x in t) for t in tiles
    )
    if not ok:
        raise HardwareError(
            f"Chip {chip.name!r}: matmul_tile_shapes={tiles!r}; expected a tuple of (rows, "
            "columns) int pairs >= 1, e.g. ((256, 128), (128, 128)), or () when unknown"
        )


def _fill_efficiencies(chip: Chip) -> None:
    """Fill ``matmul_efficiency`` / ``attention_efficiency`` left None from
    `EFFICIENCY_FACTS` (else `DEFAULT_EFFICIENCY`), then check both are in (0, 1]."""
    known = isinstance(chip.name, str) and chip.name in EFFICIENCY_FACTS
    mm, att, src = EFFICIENCY_FACTS[chip.name] if known else DEFAULT_EFFICIENCY
    given = []
    for name, value in (("matmul_efficiency", mm), ("attention_efficiency", att)):
        if getattr(chip, name) is None:
            object.__setattr__(chip, name, value)
        else:
            given.append(name)
    if not chip.efficiency_source:
        note = f"{', '.join(given)} given; " if given else ""
        object.__setattr__(chip, "efficiency_source", note + src)
    for name in ("matmul_efficiency", "attention_efficiency"):
        v = getattr(chip, name)
        if not is_number(v, above=0, maximum=1):
            raise HardwareError(
                f"Chip {chip.name!r}: {name}={v!r}; expected a fraction of the dense peak in "
                "(0, 1], or None for the EFFICIENCY_FACTS figure"
            )
