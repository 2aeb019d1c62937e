"""``repeat`` and ``repeat_interleave`` are IR ops (`explorer.ir.ops_repeat`).

GPT-J builds its rotary tables with both (its sin/cos table repeated over the position
batch, each frequency interleaved twice for its pairs over ``rotary_dim`` of each head),
BLOOM repeats its ALiBi slopes over the batch, Cohere interleaves its rotary frequencies.
Checked here: the three tiny models trace with no opaque op on the meta device and from
real weights; traced from real weights the graph's float64 reference run equals
transformers' float32 eager logits within rtol 1e-4, atol 1e-5 (float32 rounding of torch;
measured max abs error 2.0e-6 GPT-J, 1.5e-6 BLOOM, 9.1e-8 Cohere); on 8 virtual devices a
searched plan and a plan splitting every repeat op equal the unsharded run; the ops equal
torch for many shapes, and every strategy of each op runs sharded equal to unsharded.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.ir import GraphBuilder, IRError
from explorer.sharding import assign, node_strategies, reference, verify

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from explorer.models import from_torch  # noqa: E402

from .hf_cases import traced  # noqa: E402
from .spmd_cases import case  # noqa: E402

MESH = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("a100-80g"))
#: repeat ops each tiny model traces to (2 layers; GPT-J's table repeat(1, 1, 1) is a
#: reshape, its position-id repeat and four interleaves per layer remain)
EXPECTED = {
    "gptj": {"repeat": 2, "repeat_interleave": 8},
    "bloom": {"repeat": 1},
    "cohere": {"repeat_interleave": 1},
}
RTOL, ATOL = 1e-4, 1e-5  # float32 torch vs the float64 reference


def _repeat_ops(g) -> Counter:
    return Counter(n.op for n in g.ops if n.op in ("repeat", "repeat_interleave"))


# --- (a) no opaque op -----------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_meta_device_trace_has_no_opaque_op(model_type):
    g = traced(model_type)
    assert g.report.exact and not g.report.opaque, str(g.report)
    assert "opaque" not in {n.op for n in g.ops}
    assert _repeat_ops(g) == EXPECTED[model_type]


def _traced(model_type: str):
    """(graph, feeds, torch logits) of the tiny model from seeded random weights, traced
    with ``from_torch`` from real token ids: `spmd_cases.case`, shared with the SPMD
    tests (its model is ``hf_cases.causal_lm``'s)."""
    c = case(model_type)
    return c.graph, c.feeds, c.want


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_real_weights_trace_has_no_opaque_op(model_type):
    g, _, _ = _traced(model_type)
    assert g.report.exact and not g.report.opaque, str(g.report)
    assert _repeat_ops(g) == EXPECTED[model_type]


# --- (b) the traced graph computes what torch computes --------------------------------------


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_reference_run_equals_transformers(model_type):
    g, feeds, want = _traced(model_type)
    got = reference(g, feeds)[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# --- (c) sharded on 8 virtual devices --------------------------------------------------------


def test_gptj_searched_plan_on_8_devices_equals_unsharded():
    g, feeds, want = _traced("gptj")
    plan = ex.search(g, MESH, method="sharding_propagation")
    assert any(s.dim_axes for s in plan.assignment.values()), "the plan splits something"
    report = verify(g, plan, MESH, inputs=feeds, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    np.testing.assert_allclose(report.result.outputs[g.outputs[0]], want, rtol=RTOL, atol=ATOL)


def _most_split(g, name: str) -> str:
    """The strategy of a repeat node using most mesh axes, one splitting the interleaved
    axis first."""
    node = g.node(name)
    axis_letter = "abcdefgh"[node.attr("axis")] if node.op == "repeat_interleave" else ""

    def key(s):
        used = sum(len(axes) for _, axes in s.dim_axes)
        return used, any(c == axis_letter for c, _ in s.dim_axes)

    return max(node_strategies(g, name, MESH), key=key).name


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_split_repeat_ops_on_8_devices_equal_unsharded(model_type):
    """Every repeat op takes its most split strategy (GPT-J's interleaves split over seq
    and the interleaved frequency axis); the rest replicated."""
    g, feeds, want = _traced(model_type)
    names = {n.name: _most_split(g, n.name) for n in g.ops if n.op in EXPECTED[model_type]}
    assert all(v != "replicated" for v in names.values()), names
    if model_type == "gptj":  # [1, S, 1, r/2] -> [1, S, 1, r]: seq and the axis split
        interleaves = [v for k, v in names.items() if g.node(k).op == "repeat_interleave"]
        assert set(interleaves) == {"b=dp,d=tp"}, interleaves
    report = verify(g, assign(g, MESH, names), MESH, inputs=feeds, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    assert report.num_collectives > 0  # the split tables are gathered for their users
    np.testing.assert_allclose(report.result.outputs[g.outputs[0]], want, rtol=RTOL, atol=ATOL)


# --- (d) the ops ------------------------------------------------------------------------------


def _one(op: str, shape, dtype="fp32", **attrs):
    b = GraphBuilder(op)
    y = b.op(op, b.input("x", shape, dtype), name="y", **attrs)
    return b.build([y])


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_ops_equal_torch(shape, data):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=len(shape),
                                    max_size=len(shape))))  # fmt: skip
    got = _one("repeat", shape, repeats=reps).run({"x": x})["y"]
    np.testing.assert_array_equal(got, torch.from_numpy(x).repeat(*reps).numpy())
    r, axis = data.draw(st.integers(1, 4)), data.draw(st.integers(0, len(shape) - 1))
    g = _one("repeat_interleave", shape, repeats=r, axis=axis)
    assert g.node("y").type.shape == tuple(
        torch.repeat_interleave(torch.from_numpy(x), r, axis).shape
    )
    want = torch.repeat_interleave(torch.from_numpy(x), r, dim=axis).numpy()
    np.testing.assert_array_equal(g.run({"x": x})["y"], want)


def test_costs_are_bytes_moved():
    g = _one("repeat_interleave", (8, 16), repeats=3, axis=1)
    assert g.node_flops("y") == 0 and g.node_bytes("y") == (8 * 16 * 4, 8 * 48 * 4)
    (split,) = [s for s in node_strategies(g, "y", MESH) if s.name == "b=tp"]
    assert (split.bytes_read, split.bytes_written) == (8 * 4 * 4, 8 * 12 * 4)
    g = _one("repeat", (2, 3), repeats=(4, 1))
    assert g.node_flops("y") == 0 and g.node_bytes("y") == (2 * 3 * 4, 8 * 3 * 4)


@pytest.mark.parametrize(
    "op, shape, attrs, split_letters",
    [
        ("repeat_interleave", (8, 16), {"repeats": 3, "axis": 1}, {"a", "b"}),
        ("repeat_interleave", (4, 8, 2), {"repeats": 2, "axis": 1}, {"a", "b", "c"}),
        ("repeat_interleave", (8, 3), {"repeats": 4, "axis": 1}, {"a"}),  # 3 rows: whole
        ("repeat", (8, 4, 4), {"repeats": (1, 2, 1)}, {"a", "c"}),
        ("repeat", (2, 8), {"repeats": (4, 1)}, {"b"}),
    ],
)
def test_every_strategy_runs_sharded_equal_to_unsharded(op, shape, attrs, split_letters):
    """The repeated axis of repeat_interleave splits when the mesh axes divide its input
    size (output block j is the op on input block j); repeat's repeated dims never split."""
    g = _one(op, shape, **attrs)
    options = node_strategies(g, "y", MESH)
    assert {c for s in options for c, _ in s.dim_axes} == split_letters
    for s in options:
        report = verify(g, assign(g, MESH, {"y": s.name}), MESH, rtol=0, atol=0)
        assert report.ok, (s.name, report)


@pytest.mark.parametrize(
    "op, shape, attrs, match",
    [
        ("repeat", (2, 3), {"repeats": (2,)}, r"repeats=\(2,\).*one count per dim \(2\)"),
        ("repeat", (2, 3), {"repeats": (2, 0)}, r"repeats=0 is not an int >= 1"),
        ("repeat_interleave", (2, 3), {"repeats": -1, "axis": 0}, r"repeats=-1 is not an int"),
        ("repeat_interleave", (2, 3), {"repeats": 2.5, "axis": 0}, r"repeats=2.5 is not an int"),
        ("repeat_interleave", (2, 3), {"repeats": 2, "axis": 2}, r"axis=2 is out of range"),
    ],
)
def test_bad_input_is_named(op, shape, attrs, match):
    with pytest.raises(IRError, match=match) as err:
        _one(op, shape, **attrs)
    assert isinstance(err.value, ex.ExplorerError)


class _Repeats(torch.nn.Module):
    def forward(self, x):
        return (
            x.repeat(2, 1, 3, 1),  # an extra leading count adds a dim
            x.repeat(1, 1, 1),  # all ones: a reshape
            torch.repeat_interleave(x, 2, dim=-1),
            torch.repeat_interleave(x, 3),  # no dim: flattened first
            torch.repeat_interleave(x, torch.tensor([2, 2, 2]), dim=1, output_size=6),
        )


def test_importer_maps_every_form_of_repeat():
    x = torch.randn(2, 3, 4)
    g = from_torch(_Repeats(), (x,))
    assert g.report.exact and not g.report.opaque, str(g.report)
    assert _repeat_ops(g) == {"repeat": 1, "repeat_interleave": 3}
    feeds = {n.name: x.numpy() for n in g.inputs if n.name == "x"}
    feeds.update({n.name: np.array([2, 2, 2]) for n in g.inputs if n.name != "x"})
    got = reference(g, feeds)
    for name, want in zip(g.outputs, _Repeats()(x), strict=True):
        np.testing.assert_array_equal(got[name], want.numpy())


def test_per_element_counts_stay_opaque_and_named():
    class Uneven(torch.nn.Module):
        def forward(self, x):
            return torch.repeat_interleave(x, torch.tensor([1, 2, 3]), dim=1, output_size=6)

    g = from_torch(Uneven(), (torch.randn(2, 3, 4),))
    (op,) = g.report.opaque
    assert op.target == "aten.repeat_interleave.self_Tensor"
    assert any("per-element counts" in n for n in g.report.notes), str(g.report)
