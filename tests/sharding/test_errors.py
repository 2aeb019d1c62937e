"""Bad input names the tensor or node and the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from explorer.sharding import (
    Layout,
    ShardingError,
    assign,
    execute,
    node_strategies,
    predicted_bytes,
    random_inputs,
    reference,
    verify,
)

from .helpers import MESH_1D, op_graph


def test_impossible_layout_names_tensor_and_reason():
    g, _ = op_graph("matmul")
    t = g.node("w").type  # [8, 16]
    with pytest.raises(ShardingError, match=r"%w fp32\[8, 16\].*dim 0 of size 8.*pad"):
        Layout((("x", "y"), ())).validate(t, __import__("explorer").Mesh({"x": 4, "y": 4}), "w")


def test_unknown_strategy_name_lists_valid_ones():
    g, y = op_graph("matmul")
    with pytest.raises(ShardingError) as err:
        assign(g, MESH_1D, {y: "q=x"})
    text = str(err.value)
    assert f"%{y}" in text and "'q=x'" in text and "replicated, a=x, b=x, k=x, n=x" in text


def test_assignment_with_foreign_strategy_names_the_node():
    g, y = op_graph("matmul")
    plan = assign(g, MESH_1D, {y: "n=x"})
    bad = dataclasses.replace(plan[y], in_layouts=(Layout(((), (), ())), Layout((("x",), ()))))
    with pytest.raises(ShardingError, match=rf"node %{y} \(matmul\) has no strategy.*k=x"):
        execute(g, MESH_1D, {**plan, y: bad})


def test_missing_node_in_assignment():
    g, y = op_graph("matmul")
    plan = assign(g, MESH_1D)
    del plan["w"]
    with pytest.raises(ShardingError, match="no strategy for node %w"):
        execute(g, MESH_1D, plan)


def test_wrong_shape_input_names_tensor_expected_and_got():
    g, y = op_graph("matmul")
    with pytest.raises(ShardingError, match=r"%x has shape \(8, 4\).*declares \(8, 4, 8\)"):
        execute(g, MESH_1D, assign(g, MESH_1D), inputs={"x": np.zeros((8, 4))})


def test_unknown_input_name():
    g, _ = op_graph("matmul")
    with pytest.raises(ShardingError, match="%nope is not an input"):
        execute(g, MESH_1D, assign(g, MESH_1D), inputs={"nope": np.zeros(3)})


def test_verify_accepts_plan_objects_and_reports_failure():
    g, y = op_graph("matmul")

    class Plan:
        assignment = assign(g, MESH_1D, {y: "k=x"})

    rep = verify(g, Plan(), MESH_1D)
    assert rep.ok and rep.raise_if_failed() is rep
    assert "verify OK" in str(rep)
    failed = dataclasses.replace(rep, ok=False, mismatched=(y,))
    with pytest.raises(ShardingError, match="FAILED"):
        failed.raise_if_failed()


def test_given_inputs_are_used():
    g, y = op_graph("matmul")
    x = np.ones((8, 4, 8))
    w = np.arange(8 * 16, dtype=float).reshape(8, 16)
    res = execute(g, MESH_1D, assign(g, MESH_1D, {y: "k=x"}), inputs={"x": x, "w": w})
    np.testing.assert_allclose(res.outputs[y], x @ w)
    assert all(s.node == y for s in node_strategies(g, y, MESH_1D))


# --- builtin errors that used to escape become ShardingError naming the value ------------


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda g, p: assign(g, MESH_1D, ["y"]), "must be a mapping node -> name"),
        (lambda g, p: assign(g, "tp"), "expected a Mesh, got str 'tp'"),
        (lambda g, p: assign(None, MESH_1D), "expected an explorer.ir.Graph, got NoneType"),
        (lambda g, p: execute(g, None, p), "expected a Mesh, got NoneType"),
        (lambda g, p: execute(g, MESH_1D, [1]), "the assignment is a list"),
        (lambda g, p: execute(g, MESH_1D, {**p, "y": "k=x"}), "gives node %y 'k=x', not a"),
        (lambda g, p: execute(g, MESH_1D, p, inputs=[1]), "inputs is a list"),
        (lambda g, p: execute(g, MESH_1D, p, seed="a"), "seed 'a' is not an int"),
        (lambda g, p: verify(g, p, MESH_1D, rtol="a"), "rtol='a' is not a number"),
        (lambda g, p: predicted_bytes(g, MESH_1D, {}), "no strategy for node %x"),
        (lambda g, p: random_inputs(None), "expected an explorer.ir.Graph"),
        (lambda g, p: reference(g, {}), "needs a value for %x"),
    ],
)
def test_bad_arguments_raise_sharding_error(call, words):
    g, y = op_graph("matmul")
    assert y == "y"
    plan = assign(g, MESH_1D, {y: "k=x"})
    with pytest.raises(ShardingError) as err:
        call(g, plan)
    assert words in str(err.value)


def test_kernel_failure_names_node_strategy_and_cause():
    g, y = op_graph("matmul")
    plan = assign(g, MESH_1D, {y: "k=x"})
    with pytest.raises(ShardingError, match=r"node %y \(matmul\) failed under strategy 'k=x'"):
        execute(g, MESH_1D, plan, inputs={"x": np.full((8, 4, 8), "a")})


def test_reference_failure_names_node_and_shapes():
    g, y = op_graph("matmul")
    bad = {"x": np.zeros((3,)), "w": np.zeros((8, 16))}
    with pytest.raises(ShardingError, match=r"%y = matmul\(%x: \(3,\), %w: \(8, 16\)\)"):
        reference(g, bad)
