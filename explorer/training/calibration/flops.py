"""FLOP conventions: how each published source turned a step time into TFLOP/s.

`FLOP_CONVENTIONS` names one entry per convention that the published CSVs' ``flops_convention``
column uses, each with its formula and its source; `flops_per_step` evaluates the ones with a
closed form (`megatron_flops_per_iteration`, `palm_flops_per_step`,
`megatron2024_flops_per_step`). Private: import from ``explorer.training`` or
``calibration.published``, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...models import load  # noqa: F401 -- the doctests use it
from ...models.config import ModelConfig
from ..errors import CalibrationError, TrainingError
from ..simulate import estimate

__all__ = [
    "FlopConvention",
    "FLOP_CONVENTIONS",
    "flops_per_step",
    "step_flops",
    "megatron_flops_per_iteration",
    "palm_flops_per_step",
    "megatron2024_flops_per_step",
]


def megatron_flops_per_iteration(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Narayanan et al. 2021's FLOPs per iteration (with full recomputation):
    ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``.

    >>> round(megatron_flops_per_iteration(load("megatron-1.7b"), 512, 2048) / 1e15, 1)
    15.5
    """
    h, l, V = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    return 96 * batch * seq * l * h**2 * (1 + seq / (6 * h) + V / (16 * l * h))


# ----- FLOP conventions: how each source turned a step time into TFLOP/s -----------------
@dataclass(frozen=True)
class FlopConvention:
    """One way of counting a training step's FLOPs, as a published paper did.

    Attributes:
        name: the key used in the CSVs' ``flops_convention`` column.
        formula: the count, in words and symbols (B sequences of s tokens, l layers,
            hidden h, vocabulary V, N parameters).
        source: where the formula is stated.
    """

    name: str
    formula: str
    source: str

    def flops(self, cfg: ModelConfig, batch: int, seq: int) -> float:
        """FLOPs of one step of ``batch`` sequences of ``seq`` tokens."""
        closed = _CLOSED_FORMS.get(self.name)
        if closed is None:
            raise TrainingError(
                f"flops convention {self.name!r} has no closed form here; expected one of "
                f"{', '.join(_CLOSED_FORMS)} (a row counted with {self.name!r} carries its "
                "tokens/s per GPU, which gives the step time without a FLOP count)"
            )
        return closed(cfg, batch, seq)


def palm_flops_per_step(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Model FLOPs as PaLM counts them for MFU: ``B s (6 N + 12 l h s)`` (non-causal
    attention, no recomputation), N the parameters without the input embedding table (a
    lookup; the untied output head is a matmul and counts).

    >>> f = palm_flops_per_step(load("llama3-405b"), 2048, 8192)
    >>> round(f / 1e19, 2)
    4.4
    """
    h, l = cfg.hidden_size, cfg.num_layers
    n = cfg.num_params() - cfg.vocab_size * h
    return batch * seq * (6 * n + 12 * l * h * seq)


def megatron2024_flops_per_step(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Megatron-LM's ``num_floating_point_operations`` (f2e5db40, 2024-07):
    ``12 B s l h^2 [(1 + g/a + s/h) q/h + (f/h) k m + V/(2 l h)]`` with g key-value heads,
    a heads, q = a x head size, f the MLP width (a routed expert's for MoE), k experts per
    token (1 dense), m = 3/2 for a gated MLP; forward and backward, no recomputation,
    non-causal attention, every layer alike (no MLA, shared experts or dense first layers).
    For a dense GPT its layers count 3/4 of `megatron_flops_per_iteration`'s (no recomputed
    forward) and its logits the same.

    >>> cfg = load("gpt3-175b")
    >>> r = megatron2024_flops_per_step(cfg, 8, 2048) / megatron_flops_per_iteration(cfg, 8, 2048)
    >>> round(r, 3)
    0.751
    """
    h, l, V = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    a, g, q = cfg.num_heads, cfg.kv_heads, cfg.num_heads * cfg.dim_head
    f, k = (cfg.moe_ffn, cfg.experts_top_k) if cfg.is_moe else (cfg.ffn, 1)
    m = 1.5 if cfg.activation == "swiglu" else 1.0
    attention = (1 + g / a + seq / h) * q / h
    return 12 * batch * seq * l * h**2 * (attention + f / h * k * m + V / (2 * l * h))


_CLOSED_FORMS: dict[str, Callable[[ModelConfig, int, int], float]] = {
    "megatron2021": megatron_flops_per_iteration,
    "palm": palm_flops_per_step,
    "megatron2024": megatron2024_flops_per_step,
    "nemo2407": megatron2024_flops_per_step,
    "nemo2403": megatron2024_flops_per_step,
}

_NEMO_TABLE = (
    "NVIDIA/NeMo docs/source/performance/performance_summary.md at 8e3d65dc (NeMo 24.07), "
    "'Model TFLOP / sec / GPU'; the table gives no formula"
)

FLOP_CONVENTIONS: dict[str, FlopConvention] = {
    c.name: c
    for c in (
        FlopConvention(
            "megatron2021",
            "96 B s l h^2 (1 + s/(6h) + V/(16 l h)): forward, backward and one more forward "
            "(full recomputation); non-causal attention",
            "Narayanan et al. 2021 (SC21), section 5.1, eq. (3); Megatron-DeepSpeed's "
            "throughput log (BLOOM) computes the same with its checkpoint factor 4",
        ),
        FlopConvention(
            "palm",
            "B s (6 N + 12 l h s): model FLOPs, no recomputation, non-causal attention",
            "Chowdhery et al. 2022 (PaLM), appendix B (the MFU definition)",
        ),
        FlopConvention(
            "model",
            "the simulator's model FLOPs (forward + backward of every op, no recomputation)",
            "this project (explorer.training.simulate.SimResult.tflops_per_device)",
        ),
        FlopConvention(
            "megatron2024",
            "12 B s l h^2 [(1 + g/a + s/h) q/h + (f/h) k m + V/(2 l h)]: forward and backward, "
            "no recomputation, non-causal attention (megatron2024_flops_per_step)",
            "Megatron-LM megatron/training/training.py at f2e5db40 (2024-07-15), "
            "num_floating_point_operations, lines 73-108",
        ),
        FlopConvention(
            "nemo2407",
            "as megatron2024: the table's own TFLOP/s over its tokens/s per GPU gives the FLOPs "
            "per token, which equal megatron2024's on its rows (bench/accuracy.py prints the "
            "ratio per row; rows carry tokens/s, which give their step times)",
            _NEMO_TABLE,
        ),
        FlopConvention(
            "nemo2403",
            "assumption: as nemo2407 (megatron2024's count; NeMo 24.03 ran on the same "
            "Megatron-Core accounting); these rows publish TFLOP/s only, so their step times "
            "rest on it",
            "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md at 19fadb67 "
            "(NeMo 24.03.01), 'TFLOPS/GPU'; the page gives no formula",
        ),
        FlopConvention(
            "megatron_bridge",
            "Megatron-Bridge's per-model count (no closed form here; its rows carry tokens/s "
            "per GPU, which give their step times)",
            "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/utils/flop_utils.py at "
            "the release (docs/performance-summary-archive.md at 4ab94dfa)",
        ),
        FlopConvention(
            "nemo_automodel",
            "NeMo AutoModel's model FLOPs for MFU against 989 TFLOP/s BF16 (no closed form "
            "here; its rows publish step times)",
            "NVIDIA-NeMo/Automodel docs/performance-summary.mdx at cb976544",
        ),
    )
}


def flops_per_step(convention: str, cfg: ModelConfig, batch: int, seq: int) -> float:
    """FLOPs of one step under a named `FLOP_CONVENTIONS` entry (``model`` needs the
    simulator: `explorer.training.calibration.published` computes it; ``megatron_bridge``
    and ``nemo_automodel`` have no closed form here)."""
    if convention not in FLOP_CONVENTIONS:
        raise TrainingError(
            f"flops_convention={convention!r}; expected one of {', '.join(FLOP_CONVENTIONS)}"
        )
    return FLOP_CONVENTIONS[convention].flops(cfg, batch, seq)


def step_flops(convention, cfg, config, hw, gb, seq) -> float:
    """FLOPs of one step of a run under ``convention``; ``model`` asks the simulator
    (`estimate`: model FLOPs do not depend on the efficiencies)."""
    if convention in FLOP_CONVENTIONS and convention != "model":
        return flops_per_step(convention, cfg, gb, seq)
    if convention == "model":
        sim = estimate(cfg, config, hw, gb, seq)
        return sim.tflops_per_device * 1e12 * sim.step_time_s * config.devices
    raise CalibrationError(
        f"flops_convention={convention!r}; expected one of {', '.join(FLOP_CONVENTIONS)}"
    )
