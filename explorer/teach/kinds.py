"""The exercise generators: one function per kind of question, each taking the numbers a
notebook shows and computing the truth (and the typical wrong answers) with the project's
own functions: `explorer.training` memory and schedules, `explorer.hardware` collectives,
`explorer.sharding` redistribution, `explorer.simulate`.

>>> q = bubble("1f1b", pp=4, microbatches=8)
>>> q.answer_text, q.check("37.5").mistake
('27.3%', 'divided the bubble by the compute, not by the whole step')
"""

from __future__ import annotations

from collections.abc import Sequence

from ..checks import is_int
from ..hardware import Mesh, bytes_sent_per_device, load, ring_time
from ..ir import TensorType
from ..models import ModelConfig
from ..models import load as load_model
from ..sharding import Layout, redistribute
from ..training import (
    ActivationTerms,
    ParallelConfig,
    StateBytes,
    TrainingParams,
    activation_bytes_per_layer,
    bubble_fraction,
    estimate,
    model_state_bytes,
    simulate,
)
from .errors import TeachError
from .exercises import Exercise, Mistake
from .ranks import LAUNCHERS, RankLayout, rank_map

__all__ = [
    "zero_memory", "collective_bytes", "bubble", "redistribution", "redistribution_bytes",
    "fastest_layout", "activation_memory", "tp_allreduce", "model_params", "collective_time",
    "mfu", "prediction_error", "rank_nodes", "COLLECTIVE_CHOICES", "GIB", "MIB",
]  # fmt: skip

GIB = 2**30
MIB = 2**20
_RECOMPUTE = ("none", "selective", "full")
_STATE = StateBytes()  # mixed-precision Adam, 16 bytes per parameter
COLLECTIVE_CHOICES = ("none (a local slice)", "all-reduce", "all-gather", "reduce-scatter",
                      "all-to-all")  # fmt: skip


def _int(value: object, name: str, minimum: int = 1) -> int:
    if not is_int(value, minimum=minimum, numpy=True):
        raise TeachError(f"{name} must be an int >= {minimum}, got {value!r}; pass a whole number")
    return int(value)  # type: ignore[call-overload]


def _size(nbytes: float) -> str:
    for scale, unit in ((GIB, "GiB"), (MIB, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def _cfg(model: str | ModelConfig) -> ModelConfig:
    return load_model(model) if isinstance(model, str) else model


# --- memory ---------------------------------------------------------------------------------
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


# --- collectives ----------------------------------------------------------------------------
_RING = {"all-reduce": "2(n-1)/n x S", "all-gather": "(n-1)/n x S",
         "reduce-scatter": "(n-1)/n x S", "all-to-all": "(n-1)/n x S"}  # fmt: skip


def _collective_mistakes(kind: str, size: float, n: int, scale: float) -> list[Mistake]:
    once = bytes_sent_per_device("all-gather", size, n) / scale
    out = [
        Mistake(
            "sent the whole buffer once",
            size / scale,
            f"a ring sends chunks of S/n in n-1 steps: {_RING[kind]}, not S.",
        ),
        Mistake(
            "sent the whole buffer to every other device",
            (n - 1) * size / scale,
            "a ring forwards one chunk per step to one neighbour; nobody sends all of S "
            "to everyone.",
        ),
        Mistake(
            "counted only your own shard",
            size / n / scale,
            "every device sends n-1 chunks of S/n, one per ring step, not one.",
        ),
    ]
    if kind == "all-reduce":
        out.insert(
            0,
            Mistake(
                "counted the all-reduce once",
                once,
                "a ring all-reduce is a reduce-scatter then an all-gather: "
                "each device sends (n-1)/n x S twice, 2(n-1)/n x S in all.",
            ),
        )
    else:
        out.append(
            Mistake(
                "used the all-reduce's 2(n-1)/n",
                2 * once,
                f"only an all-reduce sends twice; a {kind} sends (n-1)/n x S.",
            )
        )
    return out


def collective_bytes(kind: str, size_bytes: float, n: int, *, key: str = "",
                     what: str = "") -> Exercise:  # fmt: skip
    """Bytes one device sends in a ring ``kind`` of a ``size_bytes`` buffer over ``n``
    devices: `explorer.hardware.bytes_sent_per_device`."""
    n = _int(n, "n", 2)
    truth = bytes_sent_per_device(kind, size_bytes, n) / MIB
    formula = _RING.get(kind, "S")
    numbers = formula.replace("S", _size(size_bytes)).replace("n", str(n))
    role = {"all-gather": "the gathered (whole) tensor", "reduce-scatter": "the whole tensor "
            "before the scatter", "all-reduce": "the buffer each device holds",
            "all-to-all": "the buffer each device holds"}.get(kind, "the buffer")  # fmt: skip
    return Exercise(
        key=key or f"{kind}-n{n}", kind="collective_bytes",
        question=(f"A ring {kind} over {n} devices{' of ' + what if what else ''}: S = "
                  f"{_size(size_bytes)} is {role}. How many MiB does one device send?"),
        given=(("collective", kind), ("devices n", str(n)), ("S", _size(size_bytes))),
        unit="MiB", truth=truth, mistakes=tuple(_collective_mistakes(kind, size_bytes, n, MIB)),
        hint=("In a ring, the buffer is cut into n chunks; each step every device sends one "
              "chunk to its neighbour. Count the steps (an all-reduce is two passes)."),
        worked=f"{formula} = {numbers} = {truth:.4g} MiB.",
    )  # fmt: skip


def tp_allreduce(model: str | ModelConfig, microbatch: int, seq: int, tp: int, *,
                 key: str = "") -> Exercise:  # fmt: skip
    """Bytes one device sends for the tensor-parallel all-reduces of one transformer layer's
    forward (Megatron-LM: one after attention, one after the MLP, each of the b x s x h
    activation): `bytes_sent_per_device`."""
    cfg = _cfg(model)
    tp = _int(tp, "tp", 2)
    act = microbatch * seq * cfg.hidden_size * TensorType((1,), cfg.dtype).dtype.itemsize
    one = bytes_sent_per_device("all-reduce", act, tp)
    truth = 2 * one / MIB
    once = bytes_sent_per_device("all-gather", act, tp)
    return Exercise(
        key=key or f"tp-allreduce-{cfg.name}-tp{tp}", kind="tp_allreduce",
        question=(f"{cfg.name}, tensor parallel over {tp} devices: how many MiB does one device "
                  f"send in the forward of one transformer layer (microbatch {microbatch}, "
                  f"sequence {seq})?"),
        given=(("hidden h", str(cfg.hidden_size)), ("microbatch b", str(microbatch)),
               ("sequence s", str(seq)), ("tp", str(tp)),
               ("activation b x s x h", _size(act))),
        unit="MiB", truth=truth,
        mistakes=(
            Mistake("counted half the traffic", one / MIB,
                    "Megatron's layer has two row-parallel matmuls (attention output and "
                    "MLP fc2), each ending in an all-reduce, and each ring all-reduce sends "
                    "2(n-1)/n x S (a reduce-scatter then an all-gather), not (n-1)/n x S."),
            Mistake("counted one all-reduce, once", once / MIB,
                    "two all-reduces per layer, each sending 2(n-1)/n x S."),
            Mistake("sent the whole activation per all-reduce", 2 * act / MIB,
                    "a ring sends chunks: 2(n-1)/n x S per all-reduce."),
            Mistake("counted fp32 activations", 4 * one / MIB,
                    f"activations are {cfg.dtype} here, not fp32."),
        ),
        hint=("Two all-reduces per layer in the forward; each is a ring all-reduce of the "
              "b x s x h activation."),
        worked=(f"2 all-reduces x 2({tp}-1)/{tp} x {_size(act)} = {truth:.4g} MiB."),
    )  # fmt: skip


def collective_time(kind: str, size_bytes: float, n: int, hardware: str = "a100-80g", *,
                    link: str = "intra", bandwidth_scale: float = 1.0,
                    key: str = "") -> Exercise:  # fmt: skip
    """Seconds of a ring collective on one link level of ``hardware`` (alpha-beta):
    `explorer.hardware.ring_time`, answered in microseconds."""
    n = _int(n, "n", 2)
    hw = load(hardware)
    if link not in ("intra", "inter"):
        raise TeachError(f"link must be 'intra' or 'inter', got {link!r}")
    bw = getattr(hw, f"{link}_node_bandwidth_bytes_per_s") * bandwidth_scale
    alpha = getattr(hw, f"{link}_node_latency_s")
    us = 1e6
    truth = ring_time(kind, size_bytes, n, bw, alpha) * us
    steps = ring_time(kind, 0.0, n, bw, alpha) * us
    sent = bytes_sent_per_device(kind, size_bytes, n)
    name = {"intra": "inside a node", "inter": "between nodes"}[link]
    return Exercise(
        key=key or f"time-{kind}-{link}-n{n}", kind="collective_time",
        question=(f"How many microseconds does a ring {kind} of {_size(size_bytes)} over {n} "
                  f"devices {name} take on {hardware} (alpha-beta model)?"),
        given=(("bandwidth B", f"{bw / 1e9:.4g} GB/s per device"),
               ("latency alpha", f"{alpha * us:.3g} us per step"), ("S", _size(size_bytes)),
               ("devices n", str(n))),
        unit="us", truth=truth,
        mistakes=(
            Mistake("left out the latency", sent / bw * us,
                    f"each of the ring's steps pays alpha: {steps:.3g} us here."),
            Mistake("left out the bandwidth term", steps,
                    "the bytes take time too: bytes sent / B."),
            Mistake("sent the whole buffer once", (size_bytes / bw + alpha) * us,
                    f"a ring sends {_RING.get(kind, 'S')} over its steps."),
            Mistake("counted the all-reduce once",
                    ring_time("all-gather", size_bytes, n, bw, alpha) * us,
                    "a ring all-reduce is two passes: 2(n-1) steps, 2(n-1)/n x S."),
        ),
        hint="time = (number of ring steps) x alpha + (bytes one device sends) / B.",
        worked=(f"{steps:.3g} us of latency + {_size(sent)} / {bw / 1e9:.4g} GB/s = "
                f"{truth:.4g} us."),
    )  # fmt: skip


# --- pipelines ------------------------------------------------------------------------------
def bubble(schedule: str, pp: int, microbatches: int, chunks: int = 1, *,
           key: str = "") -> Exercise:  # fmt: skip
    """Idle fraction of a pipeline step: `explorer.training.bubble_fraction`."""
    pp, m, v = _int(pp, "pp", 2), _int(microbatches, "microbatches"), _int(chunks, "chunks")
    truth = bubble_fraction(schedule, pp, m, v) * 100
    mistakes = [
        Mistake("divided the bubble by the compute, not by the whole step", (pp - 1) / m / v * 100,
                "the bubble is a fraction of the step, which is the compute plus the bubble: "
                "(p-1)/(m+p-1)."),
        Mistake("counted p instead of p-1 idle slots", pp / (m + pp) * 100,
                "the first stage starts at once: p-1 stages wait, not p."),
    ]  # fmt: skip
    if schedule == "interleaved_1f1b":
        mistakes.append(
            Mistake(
                "forgot that virtual stages shrink the bubble",
                bubble_fraction("1f1b", pp, m) * 100,
                f"with {v} virtual stages per device each slot of the fill "
                f"and drain is 1/{v} as long: the bubble is divided by v.",
            )
        )
    else:
        mistakes.append(
            Mistake(
                "divided by a number of virtual stages",
                bubble_fraction("interleaved_1f1b", pp, m, 2) * 100,
                "plain 1F1B has one chunk per device: nothing divides the bubble.",
            )
        )
    name = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved_1f1b": "interleaved 1F1B"}.get(
        schedule, schedule
    )
    given = (("stages p", str(pp)), ("microbatches m", str(m)))
    if schedule == "interleaved_1f1b":
        given += (("virtual stages v", str(v)),)
    return Exercise(
        key=key or f"bubble-{schedule}-p{pp}-m{m}-v{v}", kind="bubble_fraction",
        question=(f"{name} with {pp} stages and {m} microbatches"
                  + (f", {v} virtual stages per device" if schedule == "interleaved_1f1b" else "")
                  + ": what percentage of the step is bubble (idle)?"),
        given=given, unit="%", truth=truth, mistakes=tuple(mistakes),
        hint=("The fill and the drain leave p-1 microbatch slots idle on each device; the step "
              "lasts m + p - 1 slots. Interleaving v chunks makes each idle slot 1/v as long."),
        worked=(f"b = (p-1)/v = {(pp - 1) / (v if schedule == 'interleaved_1f1b' else 1):.4g}; "
                f"b / (m + b) = {truth:.4g}%."),
    )  # fmt: skip


# --- sharding -------------------------------------------------------------------------------
_WHY_NOT = {
    ("all-reduce", "reduce-scatter"): "an all-reduce leaves the whole sum on every device, but "
    "the target keeps only its slice: a reduce-scatter sums and splits at once, half the bytes.",
    ("all-gather", "reduce-scatter"): "the source holds partial sums (marked U): gathering "
    "blocks would not add them up.",
    ("all-gather", "all-reduce"): "the source holds partial sums (marked U): they must be added, "
    "not gathered.",
    ("reduce-scatter", "all-reduce"): "the target is whole on every device; a reduce-scatter "
    "would leave each device one slice of the sum.",
    ("reduce-scatter", "all-gather"): "nothing is a pending sum (no U in the source): there is "
    "nothing to reduce, only blocks to collect.",
    ("all-reduce", "all-gather"): "nothing is a pending sum (no U in the source): the devices "
    "only need each other's blocks.",
    ("all-to-all", "all-gather"): "an all-to-all moves a split from one dim to another; here "
    "the split goes away, so every device needs every block.",
    ("all-gather", "all-to-all"): "the target is still split (on another dim): gathering "
    "everything would send n times more than the all-to-all that swaps the split.",
    ("all-reduce", "all-to-all"): "there is no pending sum; the split only moves to another dim.",
    ("reduce-scatter", "all-to-all"): "there is no pending sum; the split only moves to another "
    "dim.",
    ("all-to-all", "reduce-scatter"): "the source holds partial sums (marked U): an all-to-all "
    "moves blocks but never adds them.",
    ("all-to-all", "all-reduce"): "the source holds partial sums (marked U): an all-to-all moves "
    "blocks but never adds them.",
}


def _why_not(wrong: str, truth: str) -> str:
    if wrong == COLLECTIVE_CHOICES[0]:
        return ("a slice only drops data a device already has; the target needs data that "
                "lives on other devices.")  # fmt: skip
    if truth == COLLECTIVE_CHOICES[0]:
        return ("every device already holds the block it needs (the source is whole along the "
                "dim the target splits): it only slices, no communication.")  # fmt: skip
    return _WHY_NOT.get((wrong, truth), f"the change needs a {truth}.")


def _plan(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh):
    plan = redistribute(src, dst, ttype, mesh)
    if len(plan.steps) > 1:
        raise TeachError(
            f"{plan} takes {len(plan.steps)} collectives; an exercise asks about one: pick "
            "layouts one collective apart"
        )
    return plan


def redistribution(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh, *,
                   key: str = "") -> Exercise:  # fmt: skip
    """Which collective turns layout ``src`` into ``dst``: `explorer.sharding.redistribute`."""
    plan = _plan(src, dst, ttype, mesh)
    truth = plan.steps[0].kind.value if plan.steps else COLLECTIVE_CHOICES[0]
    if truth not in COLLECTIVE_CHOICES:
        raise TeachError(f"{plan} needs a {truth}; exercises ask about {COLLECTIVE_CHOICES}")
    axes = ",".join(plan.moves[0].axes) if plan.moves else ""
    return Exercise(
        key=key or f"move-{src.format(ttype)}-{dst.format(ttype)}", kind="redistribution",
        question=(f"On the mesh {_mesh_text(mesh)}, a tensor "
                  f"laid out as {src.format(ttype)} must become {dst.format(ttype)}. Which "
                  "collective does that? (A_x: dim A split over axis x; {U_x}: a pending sum "
                  "over x)"),
        given=(("from", src.format(ttype)), ("to", dst.format(ttype))),
        unit="", truth=truth, choices=COLLECTIVE_CHOICES,
        mistakes=tuple(Mistake(c, c, _why_not(c, truth)) for c in COLLECTIVE_CHOICES
                       if c != truth),
        hint=("Ask two things: is the source a pending sum ({U_x})? Does the target keep a dim "
              "split, drop a split, or move it to another dim?"),
        worked=f"{plan}" + (f" (over {axes})" if axes else ""),
    )  # fmt: skip


def redistribution_bytes(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh, *,
                         key: str = "") -> Exercise:  # fmt: skip
    """Bytes per device of the collective that turns ``src`` into ``dst`` (KiB)."""
    plan = _plan(src, dst, ttype, mesh)
    if not plan.steps:
        raise TeachError(f"{plan} sends nothing; pick layouts a collective apart")
    step = plan.steps[0]
    kind, size = step.kind.value, step.size_bytes
    n = 1
    for a in step.axes:
        n *= mesh.axis_size(a)
    kib = 2**10
    truth = plan.bytes_per_device / kib
    return Exercise(
        key=key or f"bytes-{src.format(ttype)}-{dst.format(ttype)}", kind="redistribution_bytes",
        question=(f"{src.format(ttype)} -> {kind} -> {dst.format(ttype)} on the mesh "
                  f"{_mesh_text(mesh)}: how many KiB does "
                  "one device send?"),
        given=(("tensor", f"{ttype.dtype} {list(ttype.shape)} = {_size(ttype.nbytes)}"),
               ("collective", f"{kind} over {n} devices")),
        unit="KiB", truth=truth,
        mistakes=tuple(_collective_mistakes(kind, size, n, kib)) + (
            Mistake("used the whole tensor for S", bytes_sent_per_device(kind, ttype.nbytes, n)
                    / kib, "S is what one device's collective works on: its block of the "
                    "tensor, already divided by the other axes' splits."),),
        hint=("Find S, the buffer of one device's collective (the block it holds, or gathers), "
              "then apply the ring formula."),
        worked=f"{plan}: {truth:.4g} KiB per device.",
    )  # fmt: skip


# --- models and whole steps -----------------------------------------------------------------
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


# --- rank maps ------------------------------------------------------------------------------
def rank_nodes(layout: RankLayout, axis: str, order: str = "megatron", gpus_per_node: int = 8,
               *, key: str = "") -> Exercise:  # fmt: skip
    """How many nodes one ``axis`` group spans (the widest group) under a launcher's rank
    order: `explorer.teach.rank_map`."""
    m = rank_map(layout, order, gpus_per_node)
    spans = m.nodes_spanned(axis)
    truth = float(max(len(s) for s in spans))
    size = len(m.groups[axis][0])
    others = [o for o in LAUNCHERS if LAUNCHERS[o] != m.order]
    mistakes = [
        Mistake("assumed the group sits inside one node", 1.0,
                f"ranks of one {axis} group are {_stride(m, axis)} apart in order {m.order}; "
                f"with {gpus_per_node} GPUs per node they land on different nodes."),
        Mistake("counted the ranks, not the nodes", float(size),
                f"the group has {size} ranks, but several of them can share a node."),
    ]  # fmt: skip
    for o in others:
        try:
            alt = rank_map(layout, o, gpus_per_node)
        except TeachError:
            continue
        mistakes.append(Mistake(
            f"used the order {alt.order}", float(max(len(s) for s in alt.nodes_spanned(axis))),
            f"order {m.order} puts the {axis} rank at stride {_stride(m, axis)}, not "
            f"{_stride(alt, axis)}."))  # fmt: skip
    return Exercise(
        key=key or f"rank-nodes-{axis}", kind="rank_nodes",
        question=(f"Layout {layout}, launched with rank order {m.order} ({m.launcher}) on nodes "
                  f"of {gpus_per_node} GPUs: how many nodes does one {axis} group span (the "
                  "widest one)?"),
        given=(("layout", str(layout)), ("rank order (fastest first)", m.order),
               ("GPUs per node", str(gpus_per_node))),
        unit="nodes", truth=truth, mistakes=tuple(mistakes), digits=4,
        hint=(f"rank = tp_rank + tp x (cp_rank + cp x (dp_rank + dp x pp_rank)) for "
              f"tp-cp-ep-dp-pp; find the stride of {axis}, then which ranks share a node "
              f"(node = rank // {gpus_per_node})."),
        worked=(f"{axis} group 0 is {_elide(m.groups[axis][0])}: nodes {_elide(spans[0])}; "
                f"the widest group spans {truth:.0f} node(s)."),
    )  # fmt: skip


def _stride(m, axis: str) -> int:
    g = m.groups[axis][0]
    return g[1] - g[0] if len(g) > 1 else 0


def _elide(values: Sequence[int]) -> str:
    if len(values) <= 8:
        return str(list(values))
    return "[" + ", ".join(map(str, values[:6])) + f", ..., {values[-1]}]"


def _mesh_text(mesh: Mesh) -> str:
    return " x ".join(f"{a} {n}" for a, n in zip(mesh.axis_names, mesh.shape, strict=True))
