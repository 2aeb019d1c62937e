"""The fast time-balanced split (`step_model.balanced_split`) is `partition_layers`'s
without memory, bit for bit: the same bounds on random times, on times with many ties
(small integers, zeros) and with the embedding / head alone; the same error where no
split exists."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.training.errors import PartitionError
from explorer.training.pipeline.partition import partition_layers
from explorer.training.step_model.balanced_split import balanced_split


def reference(times, stages, alone):
    zeros = [0.0] * len(times)
    return partition_layers(times, zeros, zeros, [1.0] * stages, [math.inf] * stages, alone)


floats = st.floats(min_value=0.0, max_value=10.0, allow_nan=False, allow_infinity=False)
ties = st.integers(min_value=0, max_value=3).map(float)


@settings(max_examples=300, deadline=None)
@given(
    times=st.lists(st.one_of(floats, ties), min_size=3, max_size=40),
    data=st.data(),
    alone=st.booleans(),
)
def test_same_split_as_partition_layers(times, data, alone):
    most = len(times) if alone else len(times) - 2
    stages = data.draw(st.integers(min_value=1, max_value=most))
    assert balanced_split(times, stages, alone) == reference(times, stages, alone)


@settings(max_examples=100, deadline=None)
@given(
    layer=st.floats(min_value=1e-4, max_value=1.0), ends=st.tuples(floats, floats),
    layers=st.integers(min_value=1, max_value=130), data=st.data(),
)  # fmt: skip
def test_same_split_for_a_model_of_equal_layers(layer, ends, layers, data):
    """The planner's case: ``[embed, layer * L, head]``, up to as many stages as parts."""
    times = [ends[0]] + [layer] * layers + [ends[1]]
    stages = data.draw(st.integers(min_value=1, max_value=layers + 2))
    alone = stages > layers
    assert balanced_split(times, stages, alone) == reference(times, stages, alone)


def test_too_many_stages_raise_the_same_error():
    times = [1.0, 2.0, 2.0, 1.0]
    with pytest.raises(PartitionError) as ours:
        balanced_split(times, 3)
    with pytest.raises(PartitionError) as theirs:
        reference(times, 3, False)
    assert str(ours.value) == str(theirs.value)
