"""Exercises on pipeline schedules: the bubble of 1F1B and interleaved 1F1B."""

from __future__ import annotations

from ...training import (
    bubble_fraction,
)
from ..exercises import Exercise, Mistake
from .common import _int

__all__ = ["bubble"]


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
