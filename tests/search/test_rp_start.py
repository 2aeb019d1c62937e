"""Recursive programming's starting plans reach the data-parallel region.

On tiny traced Hugging Face graphs (dp2 x tp4, MindSpore's byte model) the round-based
starts used to land on plans up to 47% above the optimum (phi +37.0%, gpt-j +39.8%, llama
+5.0%, gpt2 +2.7%, olmo2 +7.2%, bert +46.4%): every 2-way split computes alike, so the
rounds cut the batch in one op and the sequence in the next, and the local descent cannot
undo a whole region. The data-parallel start, propagation inside it, and regions grown
inside the best plan (a sequence-parallel tail) reach it.

Claim (measured): on phi, gpt-j, llama, gpt2, olmo2 and bert, recursive programming's plan
costs within 1% of dynamic programming's optimum (measured: equal, ratio 1.0000, under
both the byte and the roofline model; so are 21 more of the 28 tiny architectures, t5
under the byte model is 1.052), and never more than the pure data-parallel plan.
"""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.search.planner import Planner
from explorer.search.problem import Problem
from explorer.search.solvers.recursive import _Local

pytest.importorskip("transformers")

ARCHS = ("phi", "gptj", "llama", "gpt2", "olmo2", "bert")
BYTES_MESH = ex.Mesh({"dp": 2, "tp": 4})  # no hardware: MindSpore's byte model
ROOFLINE_MESH = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("h100-sxm"))
WITHIN = 1.01  # the claim: recursive programming <= 1.01 x the optimum on these graphs


def graph(model_type: str) -> ex.ir.Graph:
    """The tiny ``model_type`` traced at batch 2 x 8 tokens in fp32 (`hf_cases.traced`:
    once per process, shared with the import tests)."""
    from tests.models.hf_cases import traced

    return traced(model_type)


def data_parallel_plan(g: ex.ir.Graph, mesh: ex.Mesh) -> ex.ShardingPlan:
    """The pure data-parallel plan: every op that can splits its first input's first dim
    (the batch) over ``dp`` alone and nothing else; the sources follow by propagation."""
    fixed = {}
    for node in g.nodes:
        if node.is_source:
            continue
        for s in ex.sharding.node_strategies(g, node.name, mesh):
            if s.is_data_parallel and s.dim_axes[0][1] == ("dp",):
                fixed[node.name] = s
    return ex.search(g, mesh, method="sharding_propagation", annotations=fixed)


@pytest.mark.parametrize("model_type", ARCHS)
@pytest.mark.parametrize("mesh", [BYTES_MESH, ROOFLINE_MESH], ids=["bytes", "roofline"])
def test_recursive_programming_is_near_the_optimum(model_type, mesh):
    g = graph(model_type)
    rp = ex.search(g, mesh, method="recursive_programming")
    opt = ex.search(g, mesh, method="dynamic_programming")
    assert opt.status == "optimal"
    assert opt.cost.total <= rp.cost.total * (1 + 1e-9)  # the optimum is a lower bound
    assert rp.cost.total <= WITHIN * opt.cost.total, (model_type, rp.cost.total, opt.cost.total)


@pytest.mark.parametrize("model_type", ARCHS)
def test_recursive_programming_never_costs_more_than_data_parallel(model_type):
    g = graph(model_type)
    dp = data_parallel_plan(g, BYTES_MESH)
    # a real data-parallel plan: the batch split over dp in most ops
    split = sum(s.is_data_parallel and s.dim_axes[0][1] == ("dp",) for s in dp.assignment.values())
    assert split >= len(dp.assignment) // 4
    rp = ex.search(g, BYTES_MESH, method="recursive_programming")
    assert rp.cost.total <= dp.cost.total * (1 + 1e-9)


def test_data_parallel_start_splits_the_batch_on_the_most_devices():
    """The start itself: every op computed from a graph input takes its data-parallel
    strategy with the most devices its batch divides (2 on dp; 8 where batch and sequence
    are flattened), the rest (parameters, position tables from them alone) replicated."""
    g = graph("gpt2")
    planner = Planner(g, BYTES_MESH)
    p = Problem.build(planner.model, planner.model.weigh(planner.default_params()))
    x = _Local(p).data_parallel(("dp", "tp"))
    m = p.model
    data = set()
    for node in g.nodes:
        if node.op == "input" or data.intersection(node.inputs):
            data.add(node.name)
    sizes = {"dp": 2, "tp": 4}
    seen = {"split": 0, "replicated": 0}
    for i in p.active:
        strats = m.nodes[i].strategies
        dp_sizes = [
            int(np.prod([sizes[a] for a in s.dim_axes[0][1]])) for s in strats if s.is_data_parallel
        ]
        if m.names[i] not in data or not dp_sizes:
            assert x[i] == 0 and strats[0].name == "replicated", m.names[i]
            seen["replicated"] += 1
            continue
        s = strats[x[i]]
        assert s.is_data_parallel, (m.names[i], s.name)
        assert int(np.prod([sizes[a] for a in s.dim_axes[0][1]])) == max(dp_sizes)
        seen["split"] += 1
    assert seen["split"] > seen["replicated"] > 0
