"""The exercise widget, headless: typing the right answer shows "right", a typical wrong one
its explanation, a value that cannot be read an error beside the box (and no verdict); hint
and answer fold open; the set view moves between questions and keeps the score."""

from __future__ import annotations

import ipywidgets as ipw
import pytest

from explorer.teach import TeachError, kinds, notebook_exercises
from widgets.exercise import ExerciseSet, ExerciseWidget

MIB = 2**20


@pytest.fixture
def numeric():
    return ExerciseWidget(kinds.collective_bytes("all-reduce", 64 * MIB, 8), number=1)


def test_typing_the_right_answer_and_enter_shows_right(numeric):
    q = numeric.exercise
    assert isinstance(numeric.controls["answer"], ipw.Text)
    assert not numeric.controls["answer"].continuous_update  # Enter (or leaving) checks
    numeric.controls["answer"].value = q.answer_text
    assert numeric.last is not None and numeric.last.right
    assert "right" in numeric.verdict.value and "&#10003;" in numeric.verdict.value
    assert numeric.error.value == ""


def test_a_typical_wrong_answer_is_explained_with_a_mark_not_only_colour(numeric):
    q = numeric.exercise
    wrong = next(m for m in q.mistakes if m.name == "counted the all-reduce once")
    numeric.controls["answer"].value = q.format_value(float(wrong.value))
    numeric.controls["check"].click()
    assert numeric.last is not None and not numeric.last.right
    assert "counted the all-reduce once" in numeric.verdict.value
    assert "&#10007;" in numeric.verdict.value  # a cross, not only red
    assert numeric.tries == 2  # Enter, then the button


def test_unreadable_answer_shows_an_error_beside_the_box(numeric):
    numeric.controls["answer"].value = "a lot"
    assert "is not a number" in numeric.error.value
    assert numeric.verdict.value == "" and numeric.last is None
    row = numeric.children[1]
    assert numeric.error in row.children and numeric.controls["answer"] in row.children
    numeric.controls["answer"].value = ""
    numeric.controls["check"].click()
    assert "no answer yet" in numeric.error.value
    numeric.controls["answer"].value = numeric.exercise.answer_text
    assert numeric.error.value == ""


def test_hint_and_worked_answer_fold_open(numeric):
    assert numeric.hint.layout.display == "none" and numeric.answer.layout.display == "none"
    numeric.controls["hint"].click()
    assert numeric.hint.layout.display == "block" and "ring" in numeric.hint.value
    numeric.controls["show"].click()
    assert numeric.answer.layout.display == "block"
    assert numeric.exercise.answer_text in numeric.answer.value


def test_choice_exercise_uses_a_menu():
    q = next(q for q in notebook_exercises("02") if q.kind == "redistribution")
    w = ExerciseWidget(q)
    menu = w.controls["answer"]
    assert isinstance(menu, ipw.Dropdown) and set(q.choices) <= set(menu.options)
    w.controls["check"].click()
    assert "pick a choice" in w.error.value
    wrong = next(c for c in q.choices if c != q.truth)
    menu.value = wrong
    w.controls["check"].click()
    assert not w.last.right and f"not {wrong}" in w.verdict.value
    menu.value = q.truth
    w.controls["check"].click()
    assert w.last.right


def test_every_control_is_a_focusable_widget(numeric):
    """Text boxes, menus and buttons take keyboard focus in the page; nothing is a plot."""
    for c in numeric.controls.values():
        assert isinstance(c, ipw.Text | ipw.Dropdown | ipw.Button)
        assert not getattr(c, "disabled", False)


def test_set_moves_between_questions_and_keeps_score():
    qs = notebook_exercises("02")[:4]
    s = ExerciseSet(qs)
    assert s.current.exercise is qs[0] and s.holder.children == (s.items[0],)
    s.controls["next"].click()
    assert s.current.exercise is qs[1]
    s.controls["previous"].click()
    s.controls["previous"].click()
    assert s.current.exercise is qs[-1]  # wraps around
    s.current.controls["answer"].value = s.current.exercise.answer_text
    s.controls["pick"].value = 0
    s.current.controls["answer"].value = "1e9"
    assert s.score.value == "right: 1 of 2 tried"
    with pytest.raises(TeachError):
        ExerciseSet(())


def test_the_score_counts_answers_checked_from_code_too():
    s = ExerciseSet(notebook_exercises("03")[:2])
    s.current.check(s.current.exercise.truth)
    assert s.score.value == "right: 1 of 1 tried"


def test_an_unexpected_error_in_a_button_shows_beside_the_box(numeric, monkeypatch):
    def broken(answer):
        raise RuntimeError("checker broke")

    monkeypatch.setattr(numeric, "exercise", type("Q", (), {
        "check": staticmethod(broken), "is_choice": False})())  # fmt: skip
    numeric.controls["answer"].value = "3"
    assert "RuntimeError: checker broke" in numeric.error.value
