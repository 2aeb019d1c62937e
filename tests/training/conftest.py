"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from explorer.training import stacks


def _pin_2021(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(stacks, "DEFAULT_STACK", "megatron-lm-2021")


@pytest.fixture(scope="module", autouse=True)
def _module_stack_2021(request):
    """A module marked ``pytestmark = pytest.mark.usefixtures("stack_2021")`` runs with the
    ``megatron-lm-2021`` default from its first module-scoped fixture on (they run before
    any function-scoped one)."""
    marks = getattr(request.module, "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    if not any(m.name == "usefixtures" and "stack_2021" in m.args for m in marks):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        _pin_2021(mp)
        yield


@pytest.fixture
def stack_2021(monkeypatch):
    """Runs without ``params`` or ``stack`` use the ``megatron-lm-2021`` stack (exactly
    ``TrainingParams()``) instead of the default ``megatron-core``: for the tests whose
    numbers and relations were set on the 2021 physics (unfused attention, no overlap) and
    that compare such runs with explicit ``TrainingParams(...)`` ones."""
    _pin_2021(monkeypatch)
