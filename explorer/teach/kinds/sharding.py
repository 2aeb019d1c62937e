"""Exercises on layouts: which collective a layout change needs and the bytes it sends."""

from __future__ import annotations

from ...hardware import Mesh, bytes_sent_per_device
from ...ir import TensorType
from ...sharding import Layout, redistribute
from ..errors import TeachError
from ..exercises import Exercise, Mistake
from .common import _collective_mistakes, _mesh_text, _size

__all__ = ["COLLECTIVE_CHOICES", "redistribution", "redistribution_bytes"]

COLLECTIVE_CHOICES = ("none (a local slice)", "all-reduce", "all-gather", "reduce-scatter",
                      "all-to-all")  # fmt: skip


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


def _dims(ttype: TensorType, dims: tuple[tuple[str, str], ...] | None) -> tuple[str, str]:
    """(letters, legend) of the tensor's dims: the lesson's letters and names (T for tokens,
    H for hidden, ...), so that an exercise writes a layout the way the lesson draws it."""
    if dims is None:
        return "", "A_x: dim A split over axis x"
    if len(dims) != len(ttype.shape) or any(len(c) != 1 or not c.isalpha() for c, _ in dims):
        raise TeachError(
            f"dims={dims!r} for a tensor of rank {len(ttype.shape)}: give one (letter, name) "
            "pair per dim, e.g. (('t', 'tokens'), ('h', 'hidden'))"
        )
    legend = ", ".join(f"{c.upper()} = {name}" for c, name in dims)
    return "".join(c for c, _ in dims), f"{legend}; {dims[0][0].upper()}_x: split over axis x"


def redistribution(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh, *,
                   key: str = "", dims: tuple[tuple[str, str], ...] | None = None
                   ) -> Exercise:  # fmt: skip
    """Which collective turns layout ``src`` into ``dst``: `explorer.sharding.redistribute`.

    ``dims``: one (letter, name) pair per dim of the tensor, the letters the lessons use
    (default A, B, C...)."""
    plan = _plan(src, dst, ttype, mesh)
    letters, legend = _dims(ttype, dims)
    letters = letters or None
    truth = plan.steps[0].kind.value if plan.steps else COLLECTIVE_CHOICES[0]
    if truth not in COLLECTIVE_CHOICES:
        raise TeachError(f"{plan} needs a {truth}; exercises ask about {COLLECTIVE_CHOICES}")
    axes = ",".join(plan.moves[0].axes) if plan.moves else ""
    return Exercise(
        key=key or f"move-{src.format(ttype)}-{dst.format(ttype)}", kind="redistribution",
        question=(f"On the mesh {_mesh_text(mesh)}, a tensor "
                  f"laid out as {src.format(ttype, letters)} must become "
                  f"{dst.format(ttype, letters)}. Which collective does that? ({legend}; "
                  "{U_x}: a pending sum over x)"),
        given=(("from", src.format(ttype, letters)), ("to", dst.format(ttype, letters))),
        unit="", truth=truth, choices=COLLECTIVE_CHOICES,
        mistakes=tuple(Mistake(c, c, _why_not(c, truth)) for c in COLLECTIVE_CHOICES
                       if c != truth),
        hint=("Ask two things: is the source a pending sum ({U_x})? Does the target keep a dim "
              "split, drop a split, or move it to another dim?"),
        worked=plan.format(letters) + (f" (over {axes})" if axes else ""),
    )  # fmt: skip


def redistribution_bytes(src: Layout, dst: Layout, ttype: TensorType, mesh: Mesh, *,
                         key: str = "", dims: tuple[tuple[str, str], ...] | None = None
                         ) -> Exercise:  # fmt: skip
    """Bytes per device of the collective that turns ``src`` into ``dst`` (KiB); ``dims`` as
    for `redistribution`."""
    plan = _plan(src, dst, ttype, mesh)
    letters = _dims(ttype, dims)[0] or None
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
        question=(f"{src.format(ttype, letters)} -> {kind} -> {dst.format(ttype, letters)} on the mesh "
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
        worked=f"{plan.format(letters)}: {truth:.4g} KiB per device.",
    )  # fmt: skip
