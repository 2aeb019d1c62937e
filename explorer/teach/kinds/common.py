"""What the exercise generators share: units, integer checks, sizes as text, the ring
formulas and their typical slips."""

from __future__ import annotations

from collections.abc import Sequence

from ...checks import is_int
from ...hardware import Mesh, bytes_sent_per_device
from ...models import ModelConfig
from ...models import load as load_model
from ..errors import TeachError
from ..exercises import Mistake

__all__ = ["GIB", "MIB"]

GIB = 2**30
MIB = 2**20


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


def _elide(values: Sequence[int]) -> str:
    if len(values) <= 8:
        return str(list(values))
    return "[" + ", ".join(map(str, values[:6])) + f", ..., {values[-1]}]"


def _mesh_text(mesh: Mesh) -> str:
    return " x ".join(f"{a} {n}" for a, n in zip(mesh.axis_names, mesh.shape, strict=True))
