"""Exercises on memory per device: model states under each ZeRO stage, activations under
each recompute policy."""

from __future__ import annotations

from ...training import (
    ActivationTerms,
    StateBytes,
    activation_bytes_per_layer,
    model_state_bytes,
)
from ..errors import TeachError
from ..exercises import Exercise, Mistake
from .common import GIB, _int, _size

__all__ = ["zero_memory", "activation_memory"]

_RECOMPUTE = ("none", "selective", "full")
_STATE = StateBytes()  # mixed-precision Adam, 16 bytes per parameter


def zero_memory(
    params: float, dp: int, stage: int, *, key: str = "", model: str = "",
    state: StateBytes = _STATE,
) -> Exercise:  # fmt: skip
    """Model-state bytes per device (weights, gradients, Adam states) under ZeRO ``stage``
    with ``dp`` data-parallel replicas: `explorer.training.model_state_bytes`."""
    dp = _int(dp, "dp")
    if stage not in (0, 1, 2, 3):
        raise TeachError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    w, g, o = model_state_bytes(params, dp, stage, state)
    truth = (w + g + o) / GIB
    per = state.weight_bytes + state.gradient_bytes + state.optimizer_bytes
    what = {0: "nothing", 1: "the optimizer states", 2: "optimizer states and gradients",
            3: "optimizer states, gradients and weights"}  # fmt: skip
    mistakes = [
        Mistake("forgot the optimizer states", (w + g) / GIB,
                f"Adam keeps {state.optimizer_bytes:g} bytes per parameter (fp32 master weights, "
                "momentum and variance): usually the largest part."),
        Mistake("counted the bf16 weights only", w / GIB,
                "training also keeps the gradients and the optimizer states."),
        Mistake("divided everything by dp", params * per / dp / GIB,
                f"ZeRO stage {stage} shards {what[stage]} over dp; the rest stays whole."),
    ]  # fmt: skip
    for other in (0, 1, 2, 3):
        if other != stage:
            value = sum(model_state_bytes(params, dp, other, state)) / GIB
            mistakes.append(
                Mistake(
                    f"used ZeRO stage {other}'s rule",
                    value,
                    f"stage {other} shards {what[other]}; stage {stage} shards {what[stage]}.",
                )
            )
    name = f"{model} ({params / 1e9:.3g} B parameters)" if model else f"{params:.4g} parameters"
    return Exercise(
        key=key or f"zero-{stage}-dp{dp}", kind="zero_memory",
        question=(f"How many GiB of model states (weights, gradients, Adam states) does one "
                  f"device hold for {name} with ZeRO stage {stage} over {dp} data-parallel "
                  "devices? (activations not counted)"),
        given=(("parameters", f"{params:,.0f}"), ("dp", str(dp)), ("ZeRO stage", str(stage)),
               ("bytes per parameter", f"{state.weight_bytes:g} weights + "
                f"{state.gradient_bytes:g} gradients + {state.optimizer_bytes:g} Adam")),
        unit="GiB", truth=truth, mistakes=tuple(mistakes),
        hint=(f"Mixed-precision Adam keeps {per:g} bytes per parameter. Stage 1 divides the "
              "optimizer states by dp, stage 2 the gradients too, stage 3 the weights too."),
        worked=(f"weights {_size(w)} + gradients {_size(g)} + optimizer states {_size(o)} = "
                f"{truth:.4g} GiB (ZeRO {stage} shards {what[stage]} over dp = {dp})."),
    )  # fmt: skip


def activation_memory(
    seq: int, microbatch: int, hidden: int, heads: int, *, layers: int = 1, tp: int = 1,
    sp: bool = False, recompute: str = "none", key: str = "", model: str = "",
) -> Exercise:  # fmt: skip
    """Activation bytes kept for the backward by ``layers`` transformer layers of one
    microbatch on one device: `explorer.training.activation_bytes_per_layer` (Korthikanti
    et al. 2022)."""
    if recompute not in _RECOMPUTE:
        raise TeachError(f"recompute must be one of {_RECOMPUTE}, got {recompute!r}")
    layers, tp = _int(layers, "layers"), _int(tp, "tp")

    def act(policy: str, t: int = tp, s: bool = sp) -> float:
        per = activation_bytes_per_layer(seq, microbatch, hidden, heads, tp=t, sp=s,
                                         recompute=policy)  # fmt: skip
        return layers * per / GIB

    truth = act(recompute)
    t = ActivationTerms()  # the coefficients activation_bytes_per_layer uses by default
    mistakes = [Mistake(f"used the '{p}' policy", act(p),
                        f"with recompute '{p}' a layer keeps "
                        + {"none": "every activation, attention scores included.",
                           "selective": "everything but the attention scores and softmax "
                           "(recomputed in the backward).",
                           "full": "only its input; the forward runs again in the backward."}[p])
                for p in _RECOMPUTE if p != recompute]  # fmt: skip
    if tp > 1:
        mistakes.append(Mistake("forgot that tensor parallelism splits activations",
                                act(recompute, 1, False),
                                f"tp = {tp} splits the QKV, attention and MLP activations "
                                f"over {tp} devices."))  # fmt: skip
    who = f" of {model}" if model else ""
    return Exercise(
        key=key or f"activations-{recompute}-tp{tp}", kind="activation_memory",
        question=(f"How many GiB of activations do {layers} transformer layers{who} keep for the "
                  f"backward, for one microbatch on one device, with recompute '{recompute}'?"),
        given=(("sequence s", str(seq)), ("microbatch b", str(microbatch)),
               ("hidden h", str(hidden)), ("heads a", str(heads)), ("layers", str(layers)),
               ("tp", str(tp)), ("sequence parallel", "yes" if sp else "no"),
               ("recompute", recompute)),
        unit="GiB", truth=truth, mistakes=tuple(mistakes),
        hint=(f"Per layer, Korthikanti et al. 2022: s*b*h*({t.replicated_bytes + t.split_bytes:g}"
              f" + {t.attention_bytes:g}*a*s/h) bytes without recompute; selective drops the "
              f"{t.attention_bytes:g}*a*s/h attention part; full keeps only the layer input, "
              f"{t.checkpoint_bytes:g}*s*b*h. Tensor parallelism divides the split parts "
              f"({t.split_bytes:g} of the {t.replicated_bytes + t.split_bytes:g}, and the "
              "attention part) by tp."),
        worked=(f"{layers} x {_size(truth * GIB / layers)} per layer = {truth:.4g} GiB "
                f"(recompute '{recompute}', tp {tp}{', sequence parallel' if sp else ''})."),
    )  # fmt: skip
