"""Fuzzing the interfaces added after the first fuzz suite: re-planning events and calls,
pools, ``@jit``'s options, calibration files, the datacenter helpers (placement, gradient
sync, local SGD) and the offload knobs.

Same contract as ``test_fuzz.py`` (``interfaces.outcome``): a valid result, or an
``ExplorerError`` subclass with a message; never a builtin exception, never a hang. Numpy
scalars are mixed into every number so that they are accepted wherever Python numbers are.
``bench/fuzz.py`` counts these too.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

import explorer as ex
from explorer.compiler import F
from explorer.training.calibration.fit import CalibrationRow
from explorer.training.calibration.io import read_calibration
from explorer.training.datacenters import gradient_sync, placement
from explorer.training.hetero.pools import Pool, check_pools, cross_pool_link
from explorer.training.local_sgd import local_sgd
from explorer.training.offload import OffloadParams
from explorer.training.replanning.replan import (
    MemoryCap,
    NewGlobalBatch,
    NodeLoss,
    Straggler,
    replan,
)

from .interfaces import FLOATS, INTS, JSON_VALUES, JUNK_FILES, TEXT, Interface, fuzz_outcomes
from .test_fuzz import FUZZ

# ----- values -------------------------------------------------------------------------------
NUMPY = st.one_of(
    st.integers(-2, 40).map(np.int64), st.integers(0, 8).map(np.int32),
    st.floats(0, 2, width=32).map(np.float32), st.sampled_from([np.float64("nan"), np.bool_(1)]),
)  # fmt: skip
NUMBERS = st.one_of(INTS, FLOATS, NUMPY, st.booleans(), st.none(), TEXT)
ANY = st.one_of(NUMBERS, JSON_VALUES)


@functools.cache
def _plan():
    return ex.plan_training("gpt2", devices=8, global_batch=16, seq=512)


def _plan_or_junk() -> st.SearchStrategy:
    return st.one_of(st.just("plan"), st.just("plan"), ANY)


def _real(v: Any) -> Any:
    return _plan() if isinstance(v, str) and v == "plan" else v


# ----- re-planning ---------------------------------------------------------------------------
EVENTS = st.one_of(
    st.builds(lambda k, nodes: ("NodeLoss", k, nodes), NUMBERS,
              st.one_of(st.none(), st.lists(NUMBERS, max_size=3).map(tuple), ANY)),
    st.builds(lambda n, s: ("Straggler", n, s), NUMBERS, NUMBERS),
    st.builds(lambda b: ("MemoryCap", b), st.one_of(NUMBERS, st.sampled_from([1e15, 2**30]))),
    st.builds(lambda n: ("NewGlobalBatch", n), st.one_of(NUMBERS, st.sampled_from([2**62]))),
)  # fmt: skip
_EVENT = {"NodeLoss": NodeLoss, "Straggler": Straggler, "MemoryCap": MemoryCap,
          "NewGlobalBatch": NewGlobalBatch}  # fmt: skip


def _event(value: tuple, folder: Path):
    ev = _EVENT[value[0]](*value[1:])
    assert ev == _EVENT[value[0]](*value[1:])  # constructs the same twice (no NaN kept)
    return ev


REPLAN_CALLS = st.fixed_dictionaries(
    {"event": st.one_of(EVENTS, ANY), "plan": _plan_or_junk()},
    optional={"horizon_steps": NUMBERS, "candidates": NUMBERS, "finalists": NUMBERS,
              "hardware": st.one_of(st.sampled_from(["a100-80g", "h100-sxm", "nope"]), ANY)},
)  # fmt: skip


def _replan(value: dict, folder: Path):
    kw = dict(value)
    ev = kw.pop("event")
    if isinstance(ev, tuple) and ev and ev[0] in _EVENT:
        ev = _event(ev, folder)
        if isinstance(ev, NewGlobalBatch) and ev.n > 4096:
            return ev  # a valid event; the call itself is tried with the small ones
    plan = _real(kw.pop("plan"))
    r = replan(plan, ev, **kw)
    assert math.isfinite(r.new.step_time_s) and r.new.step_time_s > 0, r
    return r


# ----- pools ---------------------------------------------------------------------------------
POOLS = st.fixed_dictionaries(
    {"hardware": st.one_of(st.sampled_from(["a100-80g", "h100-sxm"]), ANY),
     "chips": st.one_of(st.integers(1, 64), NUMBERS)},
    optional={"price_per_chip_hour": NUMBERS, "name": st.one_of(TEXT, ANY)},
)  # fmt: skip


def _pool(kw: dict, folder: Path):
    p = Pool(**kw)
    assert p.chips >= 1 and p.cluster is not None
    str(p)
    return p


POOL_LISTS = st.one_of(
    st.sampled_from([["a100"], ["a100", "h100"], ["h100", "a100", "a100"]]),
    ANY,
    st.lists(st.one_of(st.sampled_from(["a100", "h100"]), ANY), max_size=3),
)  # fmt: skip


def _pool_helpers(value: Any, folder: Path):
    made = [
        Pool("a100-80g", 8) if v == "a100" else Pool("h100-sxm", 8) if v == "h100" else v
        for v in value
    ] if isinstance(value, list) else value  # fmt: skip
    pools = check_pools(made)
    link = cross_pool_link(made)
    assert link.bandwidth_bytes_per_s > 0 and len(pools) >= 1
    return link


# ----- @jit's options ------------------------------------------------------------------------
def _double(x):
    return F.relu(x) * 2.0


JIT_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "level": st.one_of(st.sampled_from(["O0", "O1", "O2"]), ANY),
        "syntax": st.one_of(st.sampled_from(["strict", "lax"]), ANY),
        "capture": st.one_of(st.sampled_from(["ast", "trace"]), ANY),
        "backend": st.one_of(st.sampled_from(["numpy"]), ANY),
        "bucket": st.one_of(st.sampled_from(["none", "pow2"]), ANY),
        "cache_size": NUMBERS,
        "dynamic": st.one_of(st.sampled_from([{"x": {0: "B"}}, {"y": {0: "B"}}]), ANY),
    },
)  # fmt: skip


def _jit(kw: dict, folder: Path):
    f = ex.jit(_double, **kw)
    x = np.arange(-3, 5, dtype=np.float32)
    np.testing.assert_array_equal(f(x).numpy(), np.maximum(x, 0) * 2)
    return f


# ----- calibration files ---------------------------------------------------------------------
def _calibration_file(content: bytes, folder: Path):
    path = folder / "cal.json"
    path.write_bytes(content)
    return read_calibration(path, ex.Calibration, CalibrationRow)


# ----- datacenters, local SGD, offload --------------------------------------------------------
DC_CALLS = st.fixed_dictionaries(
    {"which": st.sampled_from(["placement", "gradient_sync", "local_sgd"]),
     "plan": _plan_or_junk()},
    optional={"hardware": st.one_of(st.sampled_from(["a100-80g", "nope"]), ANY),
              "size_bytes": NUMBERS, "h": st.one_of(NUMBERS, st.lists(NUMBERS, max_size=3))},
)  # fmt: skip


def _datacenters(value: dict, folder: Path):
    kw = dict(value)
    which, plan = kw.pop("which"), _real(kw.pop("plan"))
    if which == "placement":
        kw.pop("size_bytes", None), kw.pop("h", None)
        return str(placement(plan, **kw))
    if which == "gradient_sync":
        kw.pop("h", None)
        r = gradient_sync(plan, **kw)
        assert math.isfinite(r.flat_s) and r.flat_s >= 0, r
        return str(r)
    kw.pop("size_bytes", None)
    return str(local_sgd(plan, **kw))


OFFLOAD = st.fixed_dictionaries(
    {},
    optional={"gradient_overlap_fraction": NUMBERS, "param_prefetch_overlap_fraction": NUMBERS,
              "host_memory_efficiency": NUMBERS},
)  # fmt: skip


def _offload(kw: dict, folder: Path):
    p = OffloadParams(**kw)
    assert p == OffloadParams(**kw)
    return p


NEWER_INTERFACES: dict[str, Interface] = {
    i.name: i
    for i in (
        Interface("replan_events", EVENTS, _event),
        Interface("replan", REPLAN_CALLS, _replan),
        Interface("pools", POOLS, _pool),
        Interface("pool_helpers", POOL_LISTS, _pool_helpers),
        Interface("jit_options", JIT_OPTIONS, _jit),
        Interface("calibration_file", JUNK_FILES, _calibration_file),
        Interface("datacenters", DC_CALLS, _datacenters),
        Interface("offload_params", OFFLOAD, _offload),
    )
}
#: Examples per interface (a valid re-plan plans anew: ~1 s each, so fewer of those).
EXAMPLES = {name: 100 for name in NEWER_INTERFACES} | {"replan": 25}
#: Interfaces whose generated inputs are all refused (every junk file is a bad calibration).
ONLY_NAMED = {"calibration_file"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fuzz_newer_interface(name, tmp_path_factory):
    seen = fuzz_outcomes(NEWER_INTERFACES[name], EXAMPLES[name],
                         tmp_path_factory.mktemp(name), FUZZ)  # fmt: skip
    want = {"named"} if name in ONLY_NAMED else {"valid", "named"}
    assert want <= set(seen), (name, seen)
