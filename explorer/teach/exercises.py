"""Exercises, "predict, then check": a question about numbers on screen whose true answer the
project's own cost functions compute, and a verdict for any answer a learner types.

An `Exercise` holds the question, the inputs it shows, the unit of the answer, the truth, a
few typical wrong answers (`Mistake`: the value that reasoning gives and why it is wrong), a
hint and a worked answer. ``check(answer)`` returns a `Verdict`: right or wrong, how far off,
and, when the answer matches a typical mistake, the explanation of that mistake.

The generators (`explorer.teach.kinds`) build exercises from the numbers of a notebook; the
truth is never typed by hand.

>>> from explorer.teach import kinds
>>> q = kinds.collective_bytes("all-reduce", 64 * 2**20, 8)
>>> q.check("112").right
True
>>> v = q.check("56")
>>> v.right, v.mistake
(False, 'counted the all-reduce once')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from ..checks import is_number
from .errors import TeachError

__all__ = ["Exercise", "ExerciseKind", "EXERCISE_KINDS", "Mistake", "Verdict", "parse_number"]

ExerciseKind = Literal[
    "zero_memory", "collective_bytes", "bubble_fraction", "redistribution",
    "redistribution_bytes", "fastest_layout", "activation_memory", "tp_allreduce",
    "model_params", "collective_time", "mfu", "prediction_error", "rank_nodes",
]  # fmt: skip
EXERCISE_KINDS: tuple[str, ...] = ExerciseKind.__args__  # type: ignore[attr-defined]

# A typed answer: a number with an optional exponent, thousands separators allowed, and an
# optional unit or percent sign after it ("12.5", "1,024 MiB", "8.6 %").
_NUMBER = re.compile(r"^\s*([-+]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)\s*$")


def parse_number(answer: object, unit: str = "") -> float:
    """A typed answer as a float: a number (not a bool), or a string holding one, optionally
    followed by ``unit`` (or ``%``). Raises `TeachError` naming the text and an example.

    >>> parse_number("1,024 MiB", "MiB"), parse_number(" 8.6% ", "%"), parse_number(3)
    (1024.0, 8.6, 3.0)
    """
    if is_number(answer, numpy=True):
        return float(answer)  # type: ignore[arg-type]
    if not isinstance(answer, str):
        raise TeachError(
            f"answer {answer!r} is not a number; type a number{_in(unit)}, such as 12.5"
        )
    m = _NUMBER.match(answer)
    if not m or not answer.strip():
        raise TeachError(
            f"answer {answer!r} is not a number; type a number{_in(unit)}, such as 12.5"
        )
    typed_unit = m.group(2)
    if typed_unit and typed_unit.lower() != unit.lower():
        raise TeachError(
            f"answer {answer!r} is in {typed_unit!r} but this question asks for {unit!r}; "
            f"type the number{_in(unit)}"
        )
    value = float(m.group(1).replace(",", "").replace("_", ""))
    if not math.isfinite(value):
        raise TeachError(f"answer {answer!r} is not finite; type a number{_in(unit)}")
    return value


def _in(unit: str) -> str:
    return f" in {unit}" if unit else ""


def _normal(choice: str) -> str:
    return re.sub(r"[\s_]+", "-", choice.strip().lower())


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: a short name, the value that reasoning gives, and why it is
    wrong (shown when a learner's answer matches it)."""

    name: str
    value: float | str
    why: str


@dataclass(frozen=True)
class Verdict:
    """What `Exercise.check` says about one answer.

    Args:
        right: whether the answer is within the exercise's tolerance of the truth.
        answer: the answer as read (a float, or the normalised choice).
        truth: the true answer (the simulator's).
        relative_error: ``(answer - truth) / |truth|`` for numeric answers (negative: too
            low); None for choices.
        mistake: the name of the typical mistake the answer matches, or None.
        message: one line for the learner: right, or how far off and why.
    """

    right: bool
    answer: float | str
    truth: float | str
    relative_error: float | None
    mistake: str | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Exercise:
    """One question whose answer the project computes.

    Args:
        key: a stable id (``"02-zero-3"``), unique in a notebook's set.
        kind: one of `EXERCISE_KINDS`.
        question: the question, in words.
        given: the inputs shown, ``(name, value as text)`` pairs.
        unit: the unit the answer is typed in (``"GiB"``, ``"%"``; ``""`` for a choice).
        truth: the true answer, a float in ``unit`` or one of ``choices``.
        mistakes: typical wrong answers with their explanations.
        hint: a nudge that does not give the answer away.
        worked: the worked answer, with the numbers.
        choices: the options of a multiple-choice exercise (empty for numeric ones).
        tolerance: the relative error still counted right (numeric exercises).
        digits: significant digits the truth is shown with.
    """

    key: str
    kind: ExerciseKind
    question: str
    given: tuple[tuple[str, str], ...]
    unit: str
    truth: float | str
    mistakes: tuple[Mistake, ...]
    hint: str
    worked: str
    choices: tuple[str, ...] = ()
    tolerance: float = 0.02
    digits: int = 3
    notebook: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kind not in EXERCISE_KINDS:
            raise TeachError(
                f"exercise kind {self.kind!r} is unknown; use one of {', '.join(EXERCISE_KINDS)}"
            )
        if self.choices:
            if self.truth not in self.choices:
                raise TeachError(
                    f"exercise {self.key!r}: truth {self.truth!r} is not one of its choices "
                    f"{self.choices}; add it to the choices"
                )
            kept = tuple(m for m in self.mistakes if m.value in self.choices
                         and m.value != self.truth)  # fmt: skip
        else:
            if not is_number(self.truth):
                raise TeachError(
                    f"exercise {self.key!r}: truth {self.truth!r} is not a finite number; "
                    "a numeric exercise needs one (or give choices)"
                )
            # A "mistake" that lands within reach of the truth would be counted right: drop it,
            # and drop repeats (two reasonings giving the same number keep the first).
            kept, seen = [], []
            for m in self.mistakes:
                v = float(m.value)
                if self._close(v, float(self.truth), 2) or any(self._close(v, s, 1) for s in seen):
                    continue
                kept.append(m)
                seen.append(v)
            kept = tuple(kept)
        object.__setattr__(self, "mistakes", kept)

    # --- presentation ---------------------------------------------------------------------
    @property
    def is_choice(self) -> bool:
        return bool(self.choices)

    def format_value(self, value: float | str) -> str:
        """A value of this exercise as the learner reads it (its unit, ``digits`` digits)."""
        if isinstance(value, str):
            return value
        text = f"{value:.{self.digits}g}" if abs(value) < 10**self.digits else f"{value:,.0f}"
        if self.unit == "%":
            return f"{text}%"
        return f"{text} {self.unit}".strip()

    @property
    def answer_text(self) -> str:
        """The true answer as text: what "show answer" prints first."""
        return self.format_value(self.truth)

    def __str__(self) -> str:
        given = "; ".join(f"{k} = {v}" for k, v in self.given)
        unit = f" [{self.unit}]" if self.unit else f" [{' / '.join(self.choices)}]"
        return f"{self.key}: {self.question}{unit}" + (f" ({given})" if given else "")

    # --- checking ---------------------------------------------------------------------------
    def _close(self, a: float, b: float, times: float = 1.0) -> bool:
        scale = max(abs(b), 1e-12)
        return abs(a - b) <= self.tolerance * times * scale

    def check(self, answer: object) -> Verdict:
        """The verdict on ``answer`` (a number, a string holding one, or one of the choices).

        Raises `TeachError` when the answer cannot be read (not a number, not a choice).
        """
        if self.is_choice:
            return self._check_choice(answer)
        value = parse_number(answer, self.unit)
        truth = float(self.truth)
        rel = (value - truth) / abs(truth) if truth else (0.0 if value == 0 else math.inf)
        if self._close(value, truth):
            return Verdict(True, value, truth, rel, None,
                           f"right: {self.answer_text} (the simulator's answer)")  # fmt: skip
        match = min(
            (m for m in self.mistakes if self._close(value, float(m.value))),
            key=lambda m: abs(float(m.value) - value),
            default=None,
        )
        way = "high" if value > truth else "low"
        off = f"{abs(rel):.0%}" if math.isfinite(rel) and abs(rel) < 100 else f"{abs(rel):.3g}x"
        head = f"not quite: {self.format_value(value)} is {off} too {way}"
        if match is not None:
            return Verdict(False, value, truth, rel, match.name,
                           f"{head}. Looks like you {match.name}: {match.why}")  # fmt: skip
        return Verdict(False, value, truth, rel, None, f"{head}. Try the hint.")

    def _check_choice(self, answer: object) -> Verdict:
        if not isinstance(answer, str):
            raise TeachError(
                f"answer {answer!r} is not one of the choices {', '.join(self.choices)}; "
                "pick one of them"
            )
        by_norm = {_normal(c): c for c in self.choices}
        chosen = by_norm.get(_normal(answer))
        if chosen is None:
            raise TeachError(
                f"answer {answer!r} is not one of the choices {', '.join(self.choices)}; "
                "pick one of them"
            )
        if chosen == self.truth:
            return Verdict(True, chosen, self.truth, None, None,
                           f"right: {self.truth} (the simulator's answer)")  # fmt: skip
        match = next((m for m in self.mistakes if m.value == chosen), None)
        head = f"not {chosen}"
        if match is not None:
            return Verdict(False, chosen, self.truth, None, match.name, f"{head}: {match.why}")
        return Verdict(False, chosen, self.truth, None, None, f"{head}. Try the hint.")
