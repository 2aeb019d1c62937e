"""Hardware profiles from ``datasets/hardware/*.json``: `load`, `names`, `load_file`, `resolve`.

File schema (units in field names; GB = 1e9 bytes, GiB = 2**30 bytes)::

    {
      "name": "a100-80g",                      # must equal the file stem
      "source": "NVIDIA A100 datasheet ...",   # where every number comes from
      "notes": "...",                          # optional, free text
      "chip": {
        "name": "NVIDIA A100 SXM4 80GB",
        "peak_tflops": {"fp32": 19.5, "bf16": 312, ...},   # dense, not 2:4 sparse
        "memory_gib": 80,                      # or "memory_gb" (exactly one of the two)
        "memory_bandwidth_gb_per_s": 2039
      },
      "cluster": {
        "chips_per_node": 8,
        "intra_node_bandwidth_gb_per_s": 300,  # per chip, per direction
        "intra_node_latency_us": 5,
        "inter_node_bandwidth_gb_per_s": 25,   # per chip, per direction
        "inter_node_latency_us": 10,
        "max_nodes": 1024
      }
    }

Memory capacity is usually given in GiB because vendors' "80GB" parts hold 80 GiB
(nvidia-smi reports 81920 MiB for an A100 80GB); bandwidths are decimal GB/s as on spec sheets.
"""

from __future__ import annotations

import difflib
import math
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from explorer.hardware.chip import DTYPES, Chip
from explorer.hardware.cluster import Cluster
from explorer.hardware.errors import HardwareError
from explorer.jsonfile import as_path, read_json

__all__ = ["datasets_dir", "load", "load_file", "names", "resolve"]

ENV_VAR = "EXPLORER_DATASETS"
#: Largest number a profile field may hold (in its unit: TFLOP/s, GiB, GB/s, us); real
#: figures are below 1e6, and larger ones would overflow once scaled to bytes and FLOP/s.
MAX_FIGURE = 1e30
_GIB = 2**30

_TOP_FIELDS = {"name", "source", "notes", "chip", "cluster"}
_CHIP_FIELDS = {"name", "peak_tflops", "memory_gib", "memory_gb", "memory_bandwidth_gb_per_s"}
_CLUSTER_FIELDS = {
    "chips_per_node",
    "intra_node_bandwidth_gb_per_s",
    "intra_node_latency_us",
    "inter_node_bandwidth_gb_per_s",
    "inter_node_latency_us",
    "max_nodes",
}


def datasets_dir() -> Path:
    """The datasets folder: ``$EXPLORER_DATASETS`` if set, else ``<repo>/datasets``.

    >>> datasets_dir().name
    'datasets'
    """
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "datasets"


def names() -> tuple[str, ...]:
    """Names of the hardware profiles in ``datasets/hardware``, sorted.

    >>> "a100-80g" in names()
    True
    """
    folder = datasets_dir() / "hardware"
    return tuple(sorted(path.stem for path in folder.glob("*.json")))


def load(name: str) -> Cluster:
    """Load the hardware profile ``datasets/hardware/NAME.json``.

    Args:
        name: a profile name such as ``"a100-80g"``; see `names()`.

    Raises:
        HardwareError: unknown name (close matches and all names are listed), or a malformed file.

    >>> load("a100-80g").chip.peak_flops("bf16")
    312000000000000.0
    """
    if not isinstance(name, str):
        raise HardwareError(f"hardware name must be a string, got {name!r}")
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        raise HardwareError(
            f"unknown hardware {name!r}; {hint}known profiles: {', '.join(known)} "
            f"(in {datasets_dir() / 'hardware'})"
        )
    path = datasets_dir() / "hardware" / f"{name}.json"
    cluster = load_file(path)
    if cluster.name != name:
        raise HardwareError(
            f"{_display(path)}: field 'name' is {cluster.name!r}; expected {name!r} (the file stem)"
        )
    return cluster


def resolve(hw: str | Cluster) -> Cluster:
    """Return ``hw`` itself if it is a `Cluster`, else `load` it by name.

    >>> resolve("a100-80g") == resolve(load("a100-80g"))
    True
    """
    if isinstance(hw, Cluster):
        return hw
    if isinstance(hw, str):
        return load(hw)
    raise HardwareError(
        f"hardware must be a profile name (one of {', '.join(names())}) or a Cluster, "
        f"got {type(hw).__name__} {hw!r}"
    )


def load_file(path: str | os.PathLike[str]) -> Cluster:
    """Load a hardware profile from any JSON file following the schema in this module.

    Raises:
        HardwareError: unreadable or invalid JSON, or a missing, unknown or ill-typed field;
            the message names the file, the field and what is expected.

    >>> load_file(datasets_dir() / "hardware" / "h100-sxm.json").chips_per_node
    8
    """
    path = as_path(path, HardwareError, "hardware profile")
    where = _display(path)
    try:
        data = read_json(path, HardwareError, "hardware profile")
    except HardwareError as err:  # the reader names the full path; keep the short one
        raise HardwareError(str(err).replace(str(path), where, 1)) from None
    try:
        return _parse(data, where)
    except HardwareError as err:  # Chip and Cluster checks do not know the file: add it
        if str(err).startswith(where):
            raise
        raise HardwareError(f"{where}: {err}") from None


def _parse(data: Any, where: str) -> Cluster:
    reader = _Reader(where)
    top = reader.obj(data, "", _TOP_FIELDS)
    name = reader.text(top, "name", "a non-empty string (the profile name)")
    source = reader.text(top, "source", "a non-empty string citing the spec sheets used")
    chip_data = reader.obj(reader.get(top, "chip", "an object"), "chip", _CHIP_FIELDS)
    cluster_data = reader.obj(reader.get(top, "cluster", "an object"), "cluster", _CLUSTER_FIELDS)

    peaks_data = reader.get(chip_data, "chip.peak_tflops", "an object of dtype -> TFLOP/s")
    peaks = reader.obj(peaks_data, "chip.peak_tflops", set(DTYPES))
    if not peaks:
        reader.fail("chip.peak_tflops", "is empty", "at least one dtype -> TFLOP/s entry")
    peak_flops = {
        dtype: _scale(
            reader.number(peaks, f"chip.peak_tflops.{dtype}", "a positive number (TFLOP/s)"), 12
        )
        for dtype in peaks
    }
    has_gib, has_gb = "memory_gib" in chip_data, "memory_gb" in chip_data
    if has_gib == has_gb:
        problem = "and 'chip.memory_gb' are both given" if has_gib else "is missing"
        reader.fail(
            "chip.memory_gib",
            problem,
            "exactly one of memory_gib (GiB, 2**30 bytes) or memory_gb (GB, 1e9 bytes)",
        )
    if has_gib:
        gib = reader.number(chip_data, "chip.memory_gib", "a positive number (GiB of memory)")
        memory_bytes = round(gib * _GIB)
    else:
        gb = reader.number(chip_data, "chip.memory_gb", "a positive number (GB of memory)")
        memory_bytes = round(_scale(gb, 9))
    chip = Chip(
        name=reader.text(chip_data, "chip.name", "a non-empty string (the chip's name)"),
        peak_flops_per_s=peak_flops,
        memory_bytes=memory_bytes,
        memory_bandwidth_bytes_per_s=_scale(
            reader.number(
                chip_data, "chip.memory_bandwidth_gb_per_s", "a positive number (GB/s of HBM)"
            ),
            9,
        ),
    )
    per_dir = "a positive number (GB/s per chip, one direction)"
    latency = "a non-negative number (microseconds per step)"
    return Cluster(
        name=name,
        chip=chip,
        chips_per_node=reader.integer(cluster_data, "cluster.chips_per_node"),
        intra_node_bandwidth_bytes_per_s=_scale(
            reader.number(cluster_data, "cluster.intra_node_bandwidth_gb_per_s", per_dir), 9
        ),
        intra_node_latency_s=_scale(
            reader.number(cluster_data, "cluster.intra_node_latency_us", latency, allow_zero=True),
            -6,
        ),
        inter_node_bandwidth_bytes_per_s=_scale(
            reader.number(cluster_data, "cluster.inter_node_bandwidth_gb_per_s", per_dir), 9
        ),
        inter_node_latency_s=_scale(
            reader.number(cluster_data, "cluster.inter_node_latency_us", latency, allow_zero=True),
            -6,
        ),
        max_nodes=reader.integer(cluster_data, "cluster.max_nodes"),
        source=source,
    )


class _Reader:
    """Typed field access whose errors name the file, the dotted field path and the expectation."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, problem: str, expected: str) -> None:
        raise HardwareError(f"{self.where}: field '{field}' {problem}; expected {expected}")

    def obj(self, value: Any, field: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            label = f"field '{field}'" if field else "the top level"
            raise HardwareError(
                f"{self.where}: {label} is {type(value).__name__}; expected a JSON object"
            )
        unknown = sorted(set(value) - allowed)
        if unknown:
            prefix = f"{field}." if field else ""
            self.fail(
                prefix + unknown[0],
                "is not a known field",
                f"only {', '.join(sorted(allowed))} (check the spelling)",
            )
        return value

    def get(self, data: dict[str, Any], field: str, expected: str) -> Any:
        key = field.rsplit(".", 1)[-1]
        if key not in data:
            self.fail(field, "is missing", expected)
        return data[key]

    def text(self, data: dict[str, Any], field: str, expected: str) -> str:
        value = self.get(data, field, expected)
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"is {value!r}", expected)
        return value

    def number(
        self, data: dict[str, Any], field: str, expected: str, *, allow_zero: bool = False
    ) -> float:
        value = self.get(data, field, expected)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            self.fail(field, f"is {value!r}", expected)
        if value >= MAX_FIGURE:
            self.fail(field, f"is {value!r}", f"{expected} below MAX_FIGURE={MAX_FIGURE:g}")
        return float(value)

    def integer(self, data: dict[str, Any], field: str) -> int:
        expected = "a positive integer"
        value = self.get(data, field, expected)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.fail(field, f"is {value!r}", expected)
        return value


def _scale(value: float, exponent: int) -> float:
    """``value * 10**exponent`` correctly rounded (5 us -> 5e-06, not 4.9999999999999996e-06)."""
    return float(Decimal(repr(float(value))).scaleb(exponent))


def _display(path: Path) -> str:
    """A short path for messages: relative to the datasets' parent when inside it."""
    try:
        return str(path.resolve().relative_to(datasets_dir().resolve().parent))
    except ValueError:
        return str(path)
