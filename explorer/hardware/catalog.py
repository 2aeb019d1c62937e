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
        "memory_bandwidth_gb_per_s": 2039,
        "price_usd_per_chip_hour": 1.99,       # optional, with "price_source" (a citation
        "price_source": "assumption: ...",     # or "assumption: ..." saying how it was chosen)
        "matmul_efficiency": 0.8,              # optional: GEMM ceiling, fraction of peak;
        "attention_efficiency": 0.6,           # fused attention's; both with
        "efficiency_source": "..."             # (default: chip.EFFICIENCY_FACTS)
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

A cluster with more than the two default levels lists them, innermost first, in
``cluster.levels`` (see `explorer.hardware.levels` for what each figure means); the four
``intra_node_*``/``inter_node_*`` fields may then be left out (they are read off the level
grouping ``chips_per_node`` chips and the one above it) or given, and must then agree::

      "cluster": {
        "chips_per_node": 8,
        "max_nodes": 127,
        "levels": [
          {"name": "nvlink", "group_size": 8, "bandwidth_gb_per_s": 450, "latency_us": 5,
           "source": "..."},
          {"name": "ib-leaf", "group_size": 256, "bandwidth_gb_per_s": 50, "latency_us": 10,
           "rails": 8, "source": "..."},                 # rails: NICs per node; default 1
          {"name": "ib-spine", "group_size": 1024, "bandwidth_gb_per_s": 50,
           "latency_us": 10, "rails": 8, "oversubscription": 1, "source": "..."}
        ]
      }

Every level names its ``source``; a figure that is not in the cited document says
"assumption" there.

``chips_per_node`` is a host's chips (what one OS image drives, what a failure removes); a
fast domain larger than a node is a level above it like any other (``gb200-nvl72.json``:
compute trays of 4 GPUs in a 72-GPU NVLink rack). ``max_nodes`` is the size of the system
the profile describes (a reference architecture, a pod), not a ceiling on a job: a job on
more chips gets the profile `Cluster.extended`, its outermost level repeated. A profile
whose outermost level is a bounded domain (an NVLink rack, a TPU pod, a supernode) therefore
lists the network that joins such domains as a level of its own (``tpu-v5p.json``: two pods
over the data-center network), so that this network is the level that repeats.

Memory capacity is usually given in GiB because vendors' "80GB" parts hold 80 GiB
(nvidia-smi reports 81920 MiB for an A100 80GB); bandwidths are decimal GB/s as on spec sheets.
"""

from __future__ import annotations

import difflib
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from explorer.checks import is_int, is_number
from explorer.hardware.chip import DTYPES, Chip
from explorer.hardware.cluster import Cluster
from explorer.hardware.errors import HardwareError
from explorer.hardware.levels import Level
from explorer.jsonfile import as_path, read_json

__all__ = ["datasets_dir", "load", "load_file", "names", "resolve"]

ENV_VAR = "EXPLORER_DATASETS"
#: Largest number a profile field may hold (in its unit: TFLOP/s, GiB, GB/s, us); real
#: figures are below 1e6, and larger ones would overflow once scaled to bytes and FLOP/s.
MAX_FIGURE = 1e30
_GIB = 2**30

_TOP_FIELDS = {"name", "source", "notes", "chip", "cluster"}
_CHIP_FIELDS = {
    "name", "peak_tflops", "memory_gib", "memory_gb", "memory_bandwidth_gb_per_s",
    "price_usd_per_chip_hour", "price_source", "matmul_efficiency", "attention_efficiency",
    "efficiency_source",
}  # fmt: skip
_CLUSTER_FIELDS = {
    "chips_per_node",
    "intra_node_bandwidth_gb_per_s",
    "intra_node_latency_us",
    "inter_node_bandwidth_gb_per_s",
    "inter_node_latency_us",
    "max_nodes",
    "levels",
}
_LEGACY_LINK_FIELDS = (
    "intra_node_bandwidth_gb_per_s",
    "intra_node_latency_us",
    "inter_node_bandwidth_gb_per_s",
    "inter_node_latency_us",
)
_LEVEL_FIELDS = {
    "name",
    "group_size",
    "bandwidth_gb_per_s",
    "latency_us",
    "rails",
    "oversubscription",
    "source",
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
        **_price(reader, chip_data),
        **_efficiencies(reader, chip_data),
    )
    per_dir = "a positive number (GB/s per chip, one direction)"
    latency = "a non-negative number (microseconds per step)"
    chips_per_node = reader.integer(cluster_data, "cluster.chips_per_node")
    levels: tuple[Level, ...] = ()
    if "levels" in cluster_data:
        levels = _parse_levels(reader, cluster_data["levels"])
    links: dict[str, float] = {}
    for key in _LEGACY_LINK_FIELDS:
        field = f"cluster.{key}"
        if key not in cluster_data and levels:
            links[key] = _from_levels(reader, levels, key, chips_per_node)
        elif key.endswith("_us"):
            links[key] = _scale(reader.number(cluster_data, field, latency, allow_zero=True), -6)
        else:
            links[key] = _scale(reader.number(cluster_data, field, per_dir), 9)
    return Cluster(
        name=name,
        chip=chip,
        chips_per_node=chips_per_node,
        intra_node_bandwidth_bytes_per_s=links["intra_node_bandwidth_gb_per_s"],
        intra_node_latency_s=links["intra_node_latency_us"],
        inter_node_bandwidth_bytes_per_s=links["inter_node_bandwidth_gb_per_s"],
        inter_node_latency_s=links["inter_node_latency_us"],
        max_nodes=reader.integer(cluster_data, "cluster.max_nodes"),
        source=source,
        link_levels=levels,
    )


def _price(reader: _Reader, chip_data: dict[str, Any]) -> dict[str, Any]:
    """The optional chip price: ``price_usd_per_chip_hour`` with its ``price_source``."""
    has_price, has_source = "price_usd_per_chip_hour" in chip_data, "price_source" in chip_data
    if not has_price and not has_source:
        return {}
    if not has_price:
        reader.fail(
            "chip.price_usd_per_chip_hour", "is missing while chip.price_source is given",
            "a positive number (US dollars per chip-hour) or neither field",
        )  # fmt: skip
    price = reader.number(
        chip_data, "chip.price_usd_per_chip_hour", "a positive number (US dollars per chip-hour)"
    )
    source = reader.text(
        chip_data, "chip.price_source",
        "a non-empty string citing the price, or 'assumption: ...' saying how it was chosen",
    )  # fmt: skip
    return {"price_per_chip_hour": price, "price_source": source}


def _efficiencies(reader: _Reader, chip_data: dict[str, Any]) -> dict[str, Any]:
    """The optional GEMM ceiling and fused-attention efficiency (fractions of the dense
    peak) with their ``efficiency_source``; absent: the chip's `EFFICIENCY_FACTS` entry."""
    out: dict[str, Any] = {}
    for key in ("matmul_efficiency", "attention_efficiency"):
        if key in chip_data:
            v = reader.number(chip_data, f"chip.{key}", "a fraction of the dense peak in (0, 1]")
            if v > 1:
                reader.fail(f"chip.{key}", f"is {v!r}", "a fraction of the dense peak in (0, 1]")
            out[key] = v
    if out or "efficiency_source" in chip_data:
        out["efficiency_source"] = reader.text(
            chip_data, "chip.efficiency_source",
            "a non-empty string citing the efficiencies, or 'assumption: ...'",
        )  # fmt: skip
    return out


def _parse_levels(reader: _Reader, data: Any) -> tuple[Level, ...]:
    if not isinstance(data, list) or not data:
        reader.fail(
            "cluster.levels", f"is {data!r}", "a non-empty list of level objects, innermost first"
        )
    levels = []
    for i, item in enumerate(data):
        where = f"cluster.levels[{i}]"
        entry = reader.obj(item, where, _LEVEL_FIELDS)
        rails = entry.get("rails", 1)
        if not is_int(rails, minimum=1):
            reader.fail(f"{where}.rails", f"is {rails!r}", "a positive integer (NICs or rails)")
        over = entry.get("oversubscription", 1.0)
        if not is_number(over, minimum=1, finite=False):
            reader.fail(
                f"{where}.oversubscription", f"is {over!r}", "a number >= 1 (1 = non-blocking)"
            )
        levels.append(
            Level(
                name=reader.text(entry, f"{where}.name", "a non-empty string (the level's name)"),
                group_size=reader.integer(entry, f"{where}.group_size"),
                bandwidth_bytes_per_s=_scale(
                    reader.number(
                        entry,
                        f"{where}.bandwidth_gb_per_s",
                        "a positive number (GB/s per chip, one direction)",
                    ),
                    9,
                ),  # fmt: skip
                latency_s=_scale(
                    reader.number(
                        entry,
                        f"{where}.latency_us",
                        "a non-negative number (microseconds per step)",
                        allow_zero=True,
                    ),
                    -6,
                ),  # fmt: skip
                rails=rails,
                oversubscription=float(over),
                source=reader.text(
                    entry,
                    f"{where}.source",
                    "a non-empty string citing the document, or saying 'assumption'",
                ),  # fmt: skip
            )
        )
    return tuple(levels)


def _from_levels(reader: _Reader, levels: tuple[Level, ...], key: str, per_node: int) -> float:
    """A two-level figure read off the level stack: ``intra_*`` from the level grouping one
    node, ``inter_*`` from the level above it (the node level again on a one-level stack)."""
    node = [i for i, lv in enumerate(levels) if lv.group_size == per_node]
    if not node:
        reader.fail(
            "cluster.levels",
            f"has no level of group_size {per_node} (chips_per_node)",
            "one level grouping exactly the chips of a node",
        )
    i = node[0] + (1 if key.startswith("inter") and node[0] + 1 < len(levels) else 0)
    level = levels[i]
    return level.latency_s if key.endswith("_us") else level.bandwidth_bytes_per_s


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
        if not is_number(value, minimum=0) or (value == 0 and not allow_zero):
            self.fail(field, f"is {value!r}", expected)
        if value >= MAX_FIGURE:
            self.fail(field, f"is {value!r}", f"{expected} below MAX_FIGURE={MAX_FIGURE:g}")
        return float(value)

    def integer(self, data: dict[str, Any], field: str) -> int:
        expected = "a positive integer"
        value = self.get(data, field, expected)
        if not is_int(value, minimum=1):
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
