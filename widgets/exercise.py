"""``ExerciseWidget``: predict, then check. The learner types an answer (or picks one), the
project's cost functions have computed the truth for the numbers shown, and the verdict says
right, or how far off and why; "hint" and "show answer" fold open.

``ExerciseSet`` shows a notebook's exercises one at a time with a running score.

>>> from explorer.teach import kinds
>>> w = ExerciseWidget(kinds.bubble("1f1b", pp=4, microbatches=8))
>>> w.controls["answer"].value = "27.3"
>>> w.last.right
True
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import ipywidgets as ipw

from explorer.teach import Exercise, TeachError, Verdict

__all__ = ["ExerciseWidget", "ExerciseSet"]

_PICK = "(pick one)"
_WIDE = {"description_width": "initial"}


def _given_html(q: Exercise) -> str:
    rows = "".join(
        f"<tr><td style='padding:0 12px 0 0'>{escape(k)}</td>"
        f"<td><code style='white-space:pre-wrap'>{escape(v)}</code></td></tr>"
        for k, v in q.given
    )
    return f"<table style='border-collapse:collapse;margin:2px 0'>{rows}</table>"


class ExerciseWidget(ipw.VBox):
    """One exercise: the question and its inputs, an answer box (or a menu of choices), a
    "check" button with the verdict beside it, and "hint" / "show answer" buttons.

    Controls (``.controls``): ``answer`` (``ipw.Text``, checked on Enter; ``ipw.Dropdown``
    for a multiple-choice exercise), ``check``, ``hint``, ``show``. A value that cannot be
    read is reported next to the answer box (``.error``), never raised into the page.

    Args:
        exercise: the `Exercise` to ask.
        number: shown before the question ("3.") when given.
    """

    def __init__(self, exercise: Exercise, number: int | None = None) -> None:
        self.exercise = exercise
        self.last: Verdict | None = None
        self.tries = 0
        self._listeners: list = []  # called with each verdict (the set's score)
        head = f"<b>{number}.</b> " if number is not None else ""
        self.question = ipw.HTML(
            f"<div style='line-height:1.4'>{head}{escape(exercise.question)}</div>"
            + _given_html(exercise),
            layout=ipw.Layout(width="auto"),
        )
        if exercise.is_choice:
            answer: ipw.Widget = ipw.Dropdown(
                options=(_PICK, *exercise.choices), value=_PICK, description="answer",
                style=_WIDE, layout=ipw.Layout(width="auto", min_width="16em"),
            )  # fmt: skip
            answer.observe(self._on_pick, names="value")
        else:
            answer = ipw.Text(
                placeholder=f"a number in {exercise.unit}" if exercise.unit else "a number",
                description="answer", continuous_update=False, style=_WIDE,
                layout=ipw.Layout(width="14em"),
            )  # fmt: skip
            answer.observe(self._on_enter, names="value")
        answer.add_class("explorer-exercise-answer")
        unit = ipw.HTML(escape(exercise.unit), layout=ipw.Layout(width="auto"))
        self.controls: dict[str, ipw.Widget] = {
            "answer": answer,
            "check": ipw.Button(description="check", tooltip="compare with the simulator",
                                button_style="primary", layout=ipw.Layout(width="auto")),
            "hint": ipw.Button(description="hint", tooltip="a nudge, not the answer",
                               layout=ipw.Layout(width="auto")),
            "show": ipw.Button(description="show answer", tooltip="the worked answer",
                               layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        self.controls["check"].on_click(lambda _: self._guard(self.check))
        self.controls["hint"].on_click(lambda _: self._guard(self.show_hint))
        self.controls["show"].on_click(lambda _: self._guard(self.show_answer))
        # the error line sits beside the answer box: what was typed and how to fix it
        self.error = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.error.add_class("explorer-exercise-error")
        self.verdict = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.verdict.add_class("explorer-exercise-verdict")
        self.hint = ipw.HTML(layout=ipw.Layout(width="auto", display="none"))
        self.answer = ipw.HTML(layout=ipw.Layout(width="auto", display="none"))
        c = self.controls
        row = ipw.HBox(
            [c["answer"], unit, c["check"], c["hint"], c["show"], self.error],
            layout=ipw.Layout(flex_flow="row wrap", align_items="center", width="100%"),
        )
        super().__init__(
            [self.question, row, self.verdict, self.hint, self.answer],
            layout=ipw.Layout(border="1px solid #D0D0D0", padding="6px", margin="4px 0",
                              width="100%"),
        )  # fmt: skip
        self.add_class("explorer-exercise")

    # --- actions ------------------------------------------------------------------------------
    def check(self, answer: object = None) -> Verdict | None:
        """Check ``answer`` (default: what the answer box holds) and show the verdict; an
        answer that cannot be read shows its reason beside the box and returns None."""
        if answer is None:
            answer = self.controls["answer"].value
        if answer == _PICK or (isinstance(answer, str) and not answer.strip()):
            what = "pick a choice" if self.exercise.is_choice else "type a number"
            self._show_error(f"no answer yet: {what}, then check")
            return None
        try:
            verdict = self.exercise.check(answer)
        except TeachError as e:
            self._show_error(str(e))
            return None
        self.error.value = ""
        self.tries += 1
        self.last = verdict
        mark, color = ("&#10003; ", "#1B7F3B") if verdict.right else ("&#10007; ", "#B00020")
        self.verdict.value = (
            f"<div style='color:{color}'><b>{mark}</b>{escape(verdict.message)}</div>"
        )
        for listener in self._listeners:
            listener(verdict)
        return verdict

    def on_check(self, callback) -> None:
        """Call ``callback(verdict)`` after every answer checked (button, Enter or code)."""
        self._listeners.append(callback)

    def show_hint(self) -> None:
        self.hint.value = f"<div><b>hint:</b> {escape(self.exercise.hint)}</div>"
        self.hint.layout.display = "block"

    def show_answer(self) -> None:
        q = self.exercise
        self.answer.value = (
            f"<div><b>answer: {escape(q.answer_text)}</b> &mdash; {escape(q.worked)}</div>"
        )
        self.answer.layout.display = "block"

    def _show_error(self, message: str) -> None:
        self.verdict.value = ""
        self.error.value = f"<span style='color:#B00020'>&#9888; {escape(message)}</span>"

    def _guard(self, action) -> None:
        """Run a button's action; an unexpected error shows beside the answer box (a callback's
        exception would otherwise only reach the kernel's log)."""
        try:
            action()
        except Exception as e:  # noqa: BLE001  (shown to the learner, never lost)
            self._show_error(f"{type(e).__name__}: {e}")

    def _on_enter(self, change: dict) -> None:
        if str(change["new"]).strip():
            self._guard(self.check)

    def _on_pick(self, change: dict) -> None:
        if change["new"] != _PICK:
            self.error.value = ""


class ExerciseSet(ipw.VBox):
    """A notebook's exercises, one at a time: a menu of the questions, "previous" / "next",
    and the score so far (right answers of those tried).

    >>> from explorer.teach import notebook_exercises
    >>> s = ExerciseSet(notebook_exercises("02")[:3])
    >>> s.controls["pick"].value = 2; s.current.exercise.key
    '02-allgather-4'
    """

    def __init__(self, exercises: Sequence[Exercise], title: str = "Predict, then check") -> None:
        if not exercises:
            raise TeachError("ExerciseSet got no exercises; pass at least one")
        self.exercises = tuple(exercises)
        self.items = [ExerciseWidget(q, k + 1) for k, q in enumerate(self.exercises)]
        for w in self.items:
            w.on_check(lambda _: self._score())
        options = [(f"{k + 1}. {q.kind.replace('_', ' ')} ({q.key})", k)
                   for k, q in enumerate(self.exercises)]  # fmt: skip
        self.controls = {
            "pick": ipw.Dropdown(options=options, value=0, description="question",
                                 style=_WIDE, layout=ipw.Layout(width="auto")),
            "previous": ipw.Button(description="previous", layout=ipw.Layout(width="auto")),
            "next": ipw.Button(description="next", layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        self.controls["pick"].observe(lambda _: self._show(), names="value")
        self.controls["previous"].on_click(lambda _: self._step(-1))
        self.controls["next"].on_click(lambda _: self._step(1))
        self.title = ipw.HTML(f"<b>{escape(title)}</b>: {len(self.exercises)} questions; "
                              "the simulator computes each answer.")  # fmt: skip
        self.score = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.holder = ipw.Box(layout=ipw.Layout(width="100%"))
        c = self.controls
        bar = ipw.HBox([c["pick"], c["previous"], c["next"], self.score],
                       layout=ipw.Layout(flex_flow="row wrap", align_items="center"))  # fmt: skip
        super().__init__([self.title, bar, self.holder], layout=ipw.Layout(width="100%"))
        self._show()
        self._score()

    @property
    def current(self) -> ExerciseWidget:
        return self.items[self.controls["pick"].value]

    def _step(self, delta: int) -> None:
        k = (self.controls["pick"].value + delta) % len(self.items)
        self.controls["pick"].value = k

    def _show(self) -> None:
        self.holder.children = (self.current,)

    def _score(self) -> None:
        tried = [w for w in self.items if w.last is not None]
        right = sum(w.last.right for w in tried)  # type: ignore[union-attr]
        self.score.value = f"right: {right} of {len(tried)} tried"
