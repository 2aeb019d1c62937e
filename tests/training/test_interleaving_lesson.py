"""The interleaved-1F1B lesson: the same work in a v-fold smaller bubble, every number it
states computed, and its check able to fail."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.training.errors import ParallelConfigError
from explorer.training.pipeline import interleaving_lesson


@pytest.mark.parametrize("pp, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (8, 16, 2), (3, 9, 3)])
def test_interleaving_divides_the_idle_time_not_the_work(pp, m, v):
    les = interleaving_lesson(pp, m, v, forward_s=1.0, backward_s=2.0)
    assert les.check_ok
    p, i = les.plain, les.interleaved
    # the last device starts after pp-1 stage forwards, or pp-1 chunk forwards
    assert p.first_start_s[-1] == pytest.approx(pp - 1)
    assert i.first_start_s[-1] == pytest.approx((pp - 1) / v)
    # idle per device: (pp-1)(f+b) plain, divided by v interleaved
    np.testing.assert_allclose(p.idle_s, [(pp - 1) * 3.0] * pp)
    np.testing.assert_allclose(i.idle_s, [(pp - 1) * 3.0 / v] * pp)
    assert p.bubble == pytest.approx((pp - 1) / (m + pp - 1))
    assert i.bubble == pytest.approx(((pp - 1) / v) / (m + (pp - 1) / v))
    assert i.timeline.step_time_s == pytest.approx(
        p.timeline.step_time_s - (pp - 1) * 3 * (1 - 1 / v)
    )
    # the sentences state these computed numbers
    text = str(les)
    assert f"{p.bubble:.1%} simulated" in text and f"{i.bubble:.1%} simulated" in text
    assert f"{i.in_flight[0]} chunk activations" in text and "(yes)" in text


def test_interleaving_holds_more_activations_on_the_first_device():
    les = interleaving_lesson(4, 8, 2)
    assert les.interleaved.in_flight[0] > les.plain.in_flight[0] == 4


@pytest.mark.parametrize(
    "args, says",
    [((1, 8, 2), "pp must be an int >= 2"), ((4, 6, 2), "multiple of 4"),
     ((4, 8, 1), "chunks must be an int >= 2"), ((4, True, 2), "microbatches")],
)  # fmt: skip
def test_bad_lessons_are_named(args, says):
    with pytest.raises(ParallelConfigError, match=says):
        interleaving_lesson(*args)
