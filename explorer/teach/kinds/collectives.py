"""Exercises on collectives: bytes a ring sends, the tensor-parallel all-reduces of a layer,
alpha-beta time."""

from __future__ import annotations

from ...hardware import bytes_sent_per_device, load, ring_time
from ...ir import TensorType
from ...models import ModelConfig
from ..errors import TeachError
from ..exercises import Exercise, Mistake
from .common import _RING, MIB, _cfg, _collective_mistakes, _int, _size

__all__ = ["collective_bytes", "tp_allreduce", "collective_time"]


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
