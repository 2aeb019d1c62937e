"""Fuzzing the last interfaces of the newer features: the torch and transformers importers,
Megatron's arguments and layer-split helpers, job migration, ``calibrate`` itself, the
offload terms and the JAX / DTensor / MindSpore exports.

Same contract as ``test_fuzz.py`` (``interfaces.outcome``): a valid result, or an
``ExplorerError`` subclass with a message; never a builtin exception, never a hang. Numpy
scalars are mixed into every number. ``bench/fuzz.py`` counts these too.
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
from explorer.export.launch_args import megatron_args
from explorer.export.megatron_split import (
    layout_stage_layers,
    layout_string,
    megatron_stage_layers,
    split_args,
)
from explorer.training.offload import apply_offload, offload_terms
from explorer.training.pipeline.partition import uniform_partition
from explorer.training.replanning.migration import JobLayout, plan_migration

from .interfaces import JSON_VALUES, TEXT, Interface, fuzz_outcomes
from .test_fuzz import FUZZ
from .test_fuzz_newer import ANY, NUMBERS, NUMPY

SMALL = st.one_of(st.integers(0, 9), st.integers(1, 4).map(np.int64))


@functools.cache
def _plan():
    return ex.plan_training("gpt2", devices=8, global_batch=16, seq=512)


def _real(v: Any) -> Any:
    return _plan() if isinstance(v, str) and v == "plan" else v


PLAN_OR_CONFIG = st.one_of(
    st.just("plan"),
    st.builds(lambda dp, tp, pp: ("par", dp, tp, pp), SMALL, SMALL, SMALL),
    ANY,
)  # fmt: skip


def _plan_or_config(v: Any) -> Any:
    if isinstance(v, tuple) and v and v[0] == "par":
        return ex.ParallelConfig(dp=v[1], tp=v[2], pp=v[3])
    return _real(v)


# ----- Megatron-LM arguments and its layer-split helpers -------------------------------------
MEGATRON_ARGS = st.fixed_dictionaries(
    {"plan": PLAN_OR_CONFIG},
    optional={"model": st.one_of(st.sampled_from(["gpt2", "llama3-8b", "nope"]), ANY),
              "global_batch": st.one_of(st.sampled_from([16, 32]), NUMBERS),
              "seq": st.one_of(st.sampled_from([512, 1024]), NUMBERS),
              "layout": st.one_of(st.booleans(), ANY)},
)  # fmt: skip


def _megatron_args(value: dict, folder: Path):
    kw = dict(value)
    plan = _plan_or_config(kw.pop("plan"))
    args = megatron_args(plan, **kw)
    assert isinstance(args, tuple) and all(isinstance(a, str) for a in args), args
    assert "--tensor-model-parallel-size" in args, args
    return args


SPLITS = st.one_of(
    st.sampled_from([("stage", 8, 2, 1), ("stage", 8, 2, 2), ("stage", np.int64(6), 3, 1),
                     ("layout", "Et|tt|tL", 3, 5), ("string", [1, 2, 2], 0),
                     ("args", [4, 4], 2, 1, 8)]),
    st.builds(lambda *a: ("stage", *a), st.one_of(SMALL, NUMBERS), st.one_of(SMALL, NUMBERS),
              st.one_of(SMALL, NUMBERS)),
    st.builds(lambda *a: ("layout", *a), st.one_of(st.sampled_from(["Et|tt|tL", "E|t*4|L"]),
              TEXT, ANY), st.one_of(SMALL, NUMBERS), st.one_of(SMALL, NUMBERS)),
    st.builds(lambda c, m: ("string", c, m), st.one_of(st.lists(SMALL, max_size=4), ANY),
              st.one_of(SMALL, NUMBERS)),
    st.builds(lambda c, pp, v, n: ("args", c, pp, v, n),
              st.one_of(st.lists(SMALL, min_size=1, max_size=4), ANY), st.one_of(SMALL, NUMBERS),
              st.one_of(SMALL, NUMBERS), st.one_of(SMALL, NUMBERS)),
)  # fmt: skip


def _split(value: tuple, folder: Path):
    kind, *a = value
    if kind == "stage":
        counts = megatron_stage_layers(*a)
        assert sum(counts) == a[0], (counts, a)
        return counts
    if kind == "layout":
        counts = layout_stage_layers(*a)
        assert all(n >= 0 for n in counts), counts
        return counts
    if kind == "string":
        s = layout_string(*a)
        assert isinstance(s, str) and s, s
        return s
    return split_args(*a)


# ----- the torch and transformers importers --------------------------------------------------
def _torch_modules() -> dict[str, Any]:
    import torch

    class Flip(torch.nn.Module):  # a write through a view: traced exactly
        def forward(self, x):
            y = x.clone()
            y[:, 1:3] *= -1
            return y

    class Scatter(torch.nn.Module):
        def forward(self, x):
            y = torch.zeros_like(x)
            y[0] = x[0] + 1
            return y

    torch.manual_seed(0)
    return {"linear": torch.nn.Linear(4, 3), "flip": Flip(), "scatter": Scatter(),
            "mlp": torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(),
                                       torch.nn.Linear(8, 4))}  # fmt: skip


TORCH_INPUTS = st.one_of(
    st.sampled_from(["good", "good", "wrong_shape", "numpy", "int", "empty"]), ANY
)
FROM_TORCH = st.fixed_dictionaries(
    {"module": st.one_of(st.sampled_from(["linear", "flip", "scatter", "mlp"]), ANY),
     "inputs": TORCH_INPUTS},
    optional={"input_dtype": st.one_of(st.sampled_from(["int64", "float32"]), ANY),
              "tracer": st.one_of(st.sampled_from(["export"]), ANY),
              "fuse": st.one_of(st.booleans(), ANY), "name": st.one_of(TEXT, ANY)},
)  # fmt: skip


def _from_torch(value: dict, folder: Path):
    import torch

    kw = dict(value)
    modules = _torch_modules()
    module = modules.get(kw.pop("module"), None) if isinstance(value["module"], str) else (
        kw.pop("module"))  # fmt: skip
    inputs = kw.pop("inputs")
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    inputs = {"good": (x,), "wrong_shape": (torch.ones(3, 5),), "numpy": (x.numpy(),),
              "int": (3,), "empty": ()}.get(inputs, inputs) if isinstance(inputs, str) else (
        inputs)  # fmt: skip
    graph = ex.models.from_torch(module, inputs, **kw)
    assert graph.num_params() >= 0 and len(graph.nodes) > 0
    if (isinstance(inputs, tuple) and len(inputs) == 1 and isinstance(inputs[0], torch.Tensor)
            and not graph.report.opaque and module is not None):  # fmt: skip
        # what the graph computes is what torch computes (parameters are the module's)
        params = {n: p.detach().numpy() for n, p in module.named_parameters()}
        feed = {graph.inputs[0].name: inputs[0].numpy()} | params
        (got,) = graph.run(feed).values()
        np.testing.assert_allclose(got, module(*inputs).detach().numpy(), rtol=1e-5, atol=1e-5)
    return graph


HF_DICTS = st.fixed_dictionaries(
    {"config": st.one_of(
        st.fixed_dictionaries({"model_type": st.sampled_from(["gpt2", "llama", "nope"])},
                              optional={"n_embd": st.one_of(st.sampled_from([32, 64]), NUMBERS),
                                        "n_layer": st.one_of(st.sampled_from([1, 2]), NUMBERS),
                                        "n_head": st.one_of(st.sampled_from([2, 4]), NUMBERS),
                                        "vocab_size": st.one_of(st.just(64), NUMBERS),
                                        "hidden_size": st.one_of(st.just(32), NUMBERS)}),
        ANY)},
    optional={"batch": st.one_of(st.integers(1, 2), NUMBERS),
              "seq": st.one_of(st.sampled_from([8, 16]), NUMBERS),
              "attn_implementation": st.one_of(st.sampled_from(["eager", "sdpa"]), ANY),
              "dtype": st.one_of(st.sampled_from(["float32", "bf16"]), ANY)},
)  # fmt: skip


def _from_hf(value: dict, folder: Path):
    kw = dict(value)
    graph = ex.models.from_hf(kw.pop("config"), **kw)
    assert graph.num_params() > 0
    return graph


# ----- migration ------------------------------------------------------------------------------
MIGRATIONS = st.fixed_dictionaries(
    {"old": st.one_of(st.sampled_from(["dp2tp2", "dp4"]), ANY),
     "new": st.one_of(st.sampled_from(["tp4", "dp2tp2"]), ANY),
     "devices": st.one_of(st.just("range"), st.lists(NUMBERS, max_size=4).map(tuple), ANY)},
    optional={"lost": st.one_of(st.lists(st.one_of(SMALL, NUMBERS), max_size=2).map(tuple), ANY),
              "cluster": st.one_of(st.sampled_from(["a100-80g"]), ANY)},
)  # fmt: skip
_LAYOUTS = {"dp2tp2": dict(dp=2, tp=2), "dp4": dict(dp=4), "tp4": dict(tp=4)}


def _migration(value: dict, folder: Path):
    devices = tuple(range(4)) if value["devices"] == "range" else value["devices"]

    def job(key):
        if not isinstance(key, str) or key not in _LAYOUTS:
            return JobLayout(key, uniform_partition(2, 1), devices, (10.0, 100.0, 100.0, 10.0))
        return JobLayout(ex.ParallelConfig(**_LAYOUTS[key]), uniform_partition(2, 1), devices,
                         (10.0, 100.0, 100.0, 10.0))  # fmt: skip

    cluster = value.get("cluster", "a100-80g")
    cluster = ex.hardware.load(cluster) if cluster == "a100-80g" else cluster
    m = plan_migration(job(value["old"]), job(value["new"]), cluster, value.get("lost", ()))
    assert all(math.isfinite(b) and b >= 0 for b in m.sent_bytes), m
    return m


# ----- calibrate() -----------------------------------------------------------------------------
def _run(time: Any) -> Any:
    return ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=8), "a100-80g", 16, 512,
                          step_time_s=time)  # fmt: skip


RUNS = st.one_of(
    st.lists(st.one_of(st.sampled_from([0.05, 0.08, 0.3]), st.floats(0.01, 1).map(np.float32)),
             min_size=1, max_size=3).map(lambda ts: ("runs", ts)),
    ANY,
)  # fmt: skip
CALIBRATE = st.fixed_dictionaries(
    {"runs": RUNS},
    optional={"fit": st.one_of(st.sampled_from([("compute_efficiency",),
                                                ("matmul_efficiency_cap",), ("nope",)]), ANY),
              "bounds": st.one_of(st.just({"matmul_efficiency_cap": (0.1, 1.0)}), ANY),
              "check": st.one_of(RUNS, ANY), "loo": st.one_of(st.booleans(), ANY),
              "max_nfev": st.one_of(st.sampled_from([5, 10]), NUMBERS),
              "evaluator": st.one_of(st.sampled_from(["estimate", "simulate"]), ANY),
              "stack": st.one_of(st.sampled_from(["megatron-core", "nope"]), ANY)},
)  # fmt: skip


def _runs(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "runs":
        return [_run(t) for t in v[1]]
    return v


def _calibrate(value: dict, folder: Path):
    kw = dict(value)
    runs = _runs(kw.pop("runs"))
    if "check" in kw:
        kw["check"] = _runs(kw["check"])
    kw.setdefault("max_nfev", 5)
    kw.setdefault("loo", False)
    cal = ex.calibrate(runs, **kw)
    assert cal.table and all(math.isfinite(r.after_s) for r in cal.table), cal
    str(cal)
    return cal


# ----- offload terms ---------------------------------------------------------------------------
@functools.cache
def _sim():
    return ex.simulate("gpt2", ex.ParallelConfig(dp=8), hardware="a100-80g", global_batch=16,
                       seq=512)  # fmt: skip


OFFLOADS = st.fixed_dictionaries(
    {"sim": st.one_of(st.just("sim"), ANY),
     "kind": st.one_of(st.sampled_from(["optimizer", "optimizer+params", "none"]), ANY),
     "cluster": st.one_of(st.just("a100-80g"), ANY),
     "tparams": st.one_of(st.just("default"), ANY)},
    optional={"oparams": ANY, "apply": st.booleans()},
)  # fmt: skip


def _offload(value: dict, folder: Path):
    kw = dict(value)
    sim = _sim() if kw["sim"] == "sim" else kw["sim"]
    cluster = ex.hardware.load("a100-80g") if kw["cluster"] == "a100-80g" else kw["cluster"]
    tparams = ex.TrainingParams() if kw["tparams"] == "default" else kw["tparams"]
    if kw.get("apply"):
        new, terms = apply_offload(sim, kw["kind"], cluster, tparams, kw.get("oparams"))
        assert new.step_time_s >= sim.step_time_s
        return terms
    terms = offload_terms(sim, kw["kind"], cluster, tparams, kw.get("oparams"))
    assert terms.exposed_s >= 0 and terms.host_bytes >= 0, terms
    return terms


# ----- exports ----------------------------------------------------------------------------------
@functools.cache
def _graph_and_plan():
    graph = ex.models.build(ex.models.load("gpt2").replace(num_layers=1), batch=2, seq=16)
    mesh = ex.Mesh({"dp": 1, "tp": 1})
    return graph, ex.search(graph, mesh, method="sharding_propagation"), mesh


EXPORTS = st.fixed_dictionaries(
    {"to": st.sampled_from(["jax", "dtensor", "mindspore"]),
     "model": st.one_of(st.sampled_from(["graph", "gpt2", "nope"]), ANY),
     "plan": st.one_of(st.just("plan"), ANY),
     "mesh": st.one_of(st.just("mesh"), st.dictionaries(st.sampled_from(["dp", "tp", "x"]),
                                                        st.one_of(SMALL, NUMBERS), max_size=2),
                       ANY)},
    optional={"batch": st.one_of(st.just(2), NUMBERS), "seq": st.one_of(st.just(16), NUMBERS)},
)  # fmt: skip


def _export(value: dict, folder: Path):
    from explorer.export import to_dtensor, to_jax, to_mindspore

    graph, plan, mesh = _graph_and_plan()
    kw = dict(value)
    to = kw.pop("to")
    model = graph if kw["model"] == "graph" else kw["model"]
    plan_ = plan if kw["plan"] == "plan" else kw["plan"]
    m = kw["mesh"]
    mesh_ = mesh if m == "mesh" else ex.Mesh(m) if isinstance(m, dict) and m else m
    extra = {k: kw[k] for k in ("batch", "seq") if k in kw}
    if to == "jax":
        return to_jax(model, plan_, mesh_, **extra)
    if to == "dtensor":
        return to_dtensor(model, plan_, mesh_, batch=extra.get("batch", 2),
                          seq=extra.get("seq", 16))  # fmt: skip
    return to_mindspore(model, plan_, mesh_, **extra)


LATER_INTERFACES: dict[str, Interface] = {
    i.name: i
    for i in (
        Interface("megatron_args", MEGATRON_ARGS, _megatron_args),
        Interface("megatron_split", SPLITS, _split),
        Interface("from_torch", FROM_TORCH, _from_torch),
        Interface("from_hf", HF_DICTS, _from_hf),
        Interface("migration", MIGRATIONS, _migration),
        Interface("calibrate", CALIBRATE, _calibrate),
        Interface("offload_terms", OFFLOADS, _offload),
        Interface("exports", EXPORTS, _export),
    )
}
#: Examples per interface (tracing and fitting take ~0.1-1 s each, so fewer of those).
EXAMPLES = {name: 100 for name in LATER_INTERFACES} | {"from_torch": 40, "from_hf": 30,
                                                        "calibrate": 30}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fuzz_later_interface(name, tmp_path_factory):
    seen = fuzz_outcomes(LATER_INTERFACES[name], EXAMPLES[name],
                         tmp_path_factory.mktemp(name), FUZZ)  # fmt: skip
    assert {"valid", "named"} <= set(seen), (name, seen)


_ = (JSON_VALUES, NUMPY)
