"""Human units and names for every readout, label, legend and hover of the views.

>>> fmt_bytes(1000), fmt_bytes(15.9 * 2**30), fmt_bytes(3 * 2**40)
('1000 B', '15.9 GiB', '3.00 TiB')
>>> fmt_seconds(3.8), fmt_seconds(0.01236), fmt_seconds(85e-6), fmt_seconds(7200)
('3.80 s', '12.4 ms', '85.0 us', '2.00 h')
>>> fmt_number(3.16), fmt_number(398), fmt_number(1e-3), fmt_number(2.5e9)
('3.16', '398', '0.001', '2.5e+09')
>>> human_label("beta_communication"), human_label("device_memory_cap_bytes")
('Beta (communication)', 'Device memory cap')
"""

from __future__ import annotations

import math

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_number", "fmt_percent", "human_label", "HUMAN_LABELS"]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _digits(x: float) -> str:
    """Three significant digits, no exponent for 0.01 <= |x| < 1000."""
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_bytes(n: float | None) -> str:
    """Bytes in binary units chosen by magnitude ("1000 B", "15.9 GiB"); None -> "none"."""
    if n is None:
        return "none"
    if not math.isfinite(n):
        return str(n)
    ax, k = abs(n), 0
    while ax >= 1024 and k < len(_BYTE_UNITS) - 1:
        ax /= 1024
        k += 1
    if k == 0:
        return f"{n:.0f} B"
    return f"{_digits(math.copysign(ax, n))} {_BYTE_UNITS[k]}"


def fmt_seconds(s: float | None) -> str:
    """Seconds in the unit that fits (ns, us, ms, s, min, h)."""
    if s is None:
        return "none"
    if not math.isfinite(s):
        return str(s)
    a = abs(s)
    if a == 0:
        return "0 s"
    for unit, scale in (("h", 3600.0), ("min", 60.0)):
        if a >= 2 * scale:
            return f"{_digits(s / scale)} {unit}"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if a >= scale:
            return f"{_digits(s / scale)} {unit}"
    return f"{_digits(s / 1e-9)} ns"


def fmt_number(x: float, digits: int = 3) -> str:
    """A plain number with ``digits`` significant digits (exponent only when needed)."""
    if x == 0 or not math.isfinite(x):
        return str(x if x else 0)
    if 1e-3 <= abs(x) < 1e6:
        return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.0f}"
    return f"{x:.{max(digits - 2, 0)}e}"


def fmt_percent(frac: float, digits: int = 1) -> str:
    """A fraction as a percentage: 0.273 -> "27.3%"."""
    return f"{100 * frac:.{digits}f}%"


# Names a person reads instead of field names; everything else goes through human_label's rule.
HUMAN_LABELS: dict[str, str] = {
    "alpha_compute": "Alpha (compute)",
    "beta_communication": "Beta (communication)",
    "gamma_memory": "Gamma (memory)",
    "device_memory_cap_bytes": "Device memory cap",
    "microbatches": "Microbatches",
    "microbatch_size": "Microbatch size",
    "global_batch": "Global batch",
    "zero": "ZeRO stage",
    "recompute": "Recomputation",
    "dp": "Data parallel (dp)",
    "tp": "Tensor parallel (tp)",
    "pp": "Pipeline parallel (pp)",
    "sp": "Sequence parallel (sp)",
    "ep": "Expert parallel (ep)",
    "etp": "Expert tensor parallel (etp)",
    "edp": "Expert data parallel (edp)",
    "cp": "Context parallel (cp)",
    "runtime_context": "Runtime context",
    "comm_buffers": "Communication buffers",
    "optimizer_states": "Optimizer states",
    "weights": "Weights",
    "grads": "Gradients",
    "activations": "Activations",
}


def human_label(name: str) -> str:
    """A snake_case field name as words: known names from ``HUMAN_LABELS``, else
    "inter_node_bw_ratio" -> "Inter node bw ratio" (a trailing unit suffix is dropped)."""
    if name in HUMAN_LABELS:
        return HUMAN_LABELS[name]
    words = name.split("_")
    if len(words) > 1 and words[-1] in {"bytes", "s", "ms", "us", "gbps", "flops"}:
        words = words[:-1]
    text = " ".join(words)
    return text[:1].upper() + text[1:]
