"""Exercises on whole models and steps: parameters, the fastest of a few layouts (simulated),
MFU, the error of a prediction."""

from __future__ import annotations

from collections.abc import Sequence

from ...models import ModelConfig
from ...training import (
    ParallelConfig,
    TrainingParams,
    estimate,
    simulate,
)
from ..errors import TeachError
from ..exercises import Exercise, Mistake
from .common import GIB, _cfg

__all__ = ["model_params", "fastest_layout", "mfu", "prediction_error"]


def model_params(model: str | ModelConfig, *, key: str = "") -> Exercise:
    """Parameters of a model, in billions: `ModelConfig.num_params` (equal to the built
    graph's count)."""
    cfg = _cfg(model)
    truth = cfg.num_params() / 1e9
    h, L, V = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    ffn = cfg.ffn_hidden_size or 4 * h
    mats = 3 if cfg.activation == "swiglu" else 2
    embed = V * h * (1 if cfg.tied_embeddings else 2)
    return Exercise(
        key=key or f"params-{cfg.name}", kind="model_params",
        question=f"How many billion parameters does {cfg.name} have?",
        given=(("layers L", str(L)), ("hidden h", str(h)), ("heads", str(cfg.num_heads)),
               ("kv heads", str(cfg.kv_heads)), ("MLP size", f"{ffn} ({cfg.activation})"),
               ("vocabulary V", str(V)),
               ("embeddings", "tied" if cfg.tied_embeddings else "separate head")),
        unit="B", truth=truth, digits=4,
        mistakes=(
            Mistake("left out the embeddings", (cfg.num_params() - embed) / 1e9,
                    f"the token embedding holds V x h = {V * h / 1e9:.3g} B parameters"
                    + ("" if cfg.tied_embeddings else ", and the output head as many again")
                    + "."),
            Mistake("left out the MLP", (cfg.num_params() - L * mats * h * ffn) / 1e9,
                    f"each layer's MLP has {mats} matrices of h x {ffn}: most of the layer."),
            Mistake("used 12 L h^2 alone", 12 * L * h * h / 1e9,
                    "12 L h^2 holds for an MLP of 4h without gates and full attention heads; "
                    "it also leaves out the embeddings."),
        ),
        hint=("Per layer: attention (Q, K, V, output projections) plus the MLP matrices; then "
              "the embedding V x h (and the head, if not tied). Norms and biases are small."),
        worked=f"{cfg.name}: {cfg.num_params():,} parameters = {truth:.4g} B.",
    )  # fmt: skip


def fastest_layout(
    model: str | ModelConfig, configs: Sequence[ParallelConfig], hardware: str,
    global_batch: int, seq: int, *, key: str = "",
) -> Exercise:  # fmt: skip
    """The fastest of a few layouts that fit, by `explorer.simulate`; labelled A, B, C..."""
    if not 2 <= len(configs) <= 5:
        raise TeachError(f"fastest_layout compares 2 to 5 layouts, got {len(configs)}")
    labels = tuple("ABCDE"[: len(configs)])
    sims = {lab: simulate(model, c, hardware=hardware, global_batch=global_batch, seq=seq)
            for lab, c in zip(labels, configs, strict=True)}  # fmt: skip
    fits = {lab: s for lab, s in sims.items() if s.fits}
    if not fits:
        raise TeachError("none of the layouts fits in memory; give at least one that fits")
    truth = min(fits, key=lambda lab: fits[lab].step_time_s)
    best = sims[truth]

    def why(lab: str) -> str:
        s = sims[lab]
        if not s.fits:
            return (
                f"{lab} does not fit: it needs {s.memory.total / GIB:.3g} GiB per device "
                f"against {s.memory_cap_bytes / GIB:.3g} GiB."
            )
        kinds = dict(s.time_by_kind)
        mine = dict(best.time_by_kind)
        worst = max((k for k in kinds if k != "compute"),
                    key=lambda k: kinds[k] - mine.get(k, 0.0), default="compute")  # fmt: skip
        return (
            f"{lab} takes {s.step_time_s:.3g} s per step against {best.step_time_s:.3g} s "
            f"for {truth}; its {worst} time is {kinds.get(worst, 0.0):.3g} s against "
            f"{mine.get(worst, 0.0):.3g} s."
        )

    name = model if isinstance(model, str) else model.name
    return Exercise(
        key=key or f"fastest-{name}", kind="fastest_layout",
        question=(f"{name} on {hardware}, global batch {global_batch}, sequence {seq}: which "
                  "layout has the shortest step?"),
        given=tuple((lab, str(c)) for lab, c in zip(labels, configs, strict=True)),
        unit="", truth=truth, choices=labels,
        mistakes=tuple(Mistake(lab, lab, why(lab)) for lab in labels if lab != truth),
        hint=("Tensor parallelism talks on every layer (keep it inside a node); pipeline "
              "parallelism idles in the bubble; data parallelism pays one gradient all-reduce "
              "per step and keeps a full copy of the states."),
        worked="; ".join(f"{lab}: {s.step_time_s:.3g} s" + ("" if s.fits else " (does not fit)")
                         for lab, s in sims.items()) + f". Fastest: {truth}.",
    )  # fmt: skip


def mfu(model: str | ModelConfig, config: ParallelConfig, hardware: str, global_batch: int,
        seq: int, *, key: str = "") -> Exercise:  # fmt: skip
    """Model FLOPs utilisation of a simulated step: `SimResult.mfu`, from the step time and
    the model FLOPs it shows."""
    sim = simulate(model, config, hardware=hardware, global_batch=global_batch, seq=seq)
    devices = config.devices
    flops = sim.tflops_per_device * 1e12 * sim.step_time_s * devices
    peak = sim.tflops_per_device / sim.mfu
    truth = sim.mfu * 100
    hfu = sim.hardware_tflops_per_device / peak * 100
    name = model if isinstance(model, str) else model.name
    return Exercise(
        key=key or f"mfu-{name}", kind="mfu",
        question=(f"{name}, {config} on {hardware}: the simulated step takes "
                  f"{sim.step_time_s:.4g} s. What is the model FLOPs utilisation (MFU), in %?"),
        given=(("model FLOPs per step (forward + backward)", f"{flops:.4g}"),
               ("devices", str(devices)), ("peak per device", f"{peak:.4g} TFLOP/s"),
               ("step time", f"{sim.step_time_s:.4g} s")),
        unit="%", truth=truth,
        mistakes=(
            Mistake("counted the recomputed forward too (that is HFU)", hfu,
                    "MFU counts the model's FLOPs only; recomputation is extra hardware work."),
            Mistake("forgot to divide by the devices", truth * devices,
                    "the FLOPs are the whole step's, shared by every device."),
            Mistake("counted the forward FLOPs only", truth / 3,
                    "the FLOPs given already include the backward (about twice the forward)."),
        ),
        hint="MFU = model FLOPs per step / (step time x devices x peak FLOP/s per device).",
        worked=(f"{flops:.4g} / ({sim.step_time_s:.4g} s x {devices} x {peak:.4g}e12) = "
                f"{truth:.4g}%."),
    )  # fmt: skip


def prediction_error(model: str | ModelConfig, config: ParallelConfig, hardware: str,
                     global_batch: int, seq: int, measured_s: float, *, label: str = "",
                     params: TrainingParams | None = None, key: str = "") -> Exercise:  # fmt: skip
    """The relative error of the step model's prediction against a measured step:
    ``estimate(...).step_time_s / measured - 1``, in %; ``params`` default: the uncalibrated
    ``TrainingParams()`` (as notebook 08 compares)."""
    params = TrainingParams() if params is None else params
    predicted = estimate(model, config, hardware, global_batch, seq, params).step_time_s
    truth = (predicted / measured_s - 1) * 100
    name = label or (model if isinstance(model, str) else model.name)
    return Exercise(
        key=key or f"error-{name}", kind="prediction_error",
        question=(f"{name}: measured {measured_s:.4g} s per step, the uncalibrated step model "
                  f"predicts {predicted:.4g} s. What is the prediction's error, in % "
                  "(negative when it is optimistic)?"),
        given=(("measured", f"{measured_s:.4g} s"), ("predicted", f"{predicted:.4g} s")),
        unit="%", truth=truth, tolerance=0.05,
        mistakes=(
            Mistake("divided by the prediction instead of the measurement",
                    (measured_s / predicted - 1) * 100 if predicted else 0.0,
                    "the error is measured against the measurement: predicted / measured - 1."),
            Mistake("flipped the sign", -truth,
                    "a prediction shorter than the measurement is optimistic: negative."),
        ),
        hint="error = predicted / measured - 1.",
        worked=f"{predicted:.4g} / {measured_s:.4g} - 1 = {truth:.4g}%.",
    )  # fmt: skip
