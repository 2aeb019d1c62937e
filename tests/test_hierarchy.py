"""The group tree of a graph (explorer.ir.hierarchy): structure, totals, search, changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.ir import GraphBuilder
from explorer.ir.hierarchy import (
    CHANGE_THRESHOLD,
    ROOT,
    HierarchyError,
    changed_materially,
    hierarchy,
)


@pytest.fixture(scope="module")
def gpt():
    cfg = ex.models.load("gpt2").replace(
        num_layers=3, hidden_size=64, num_heads=4, vocab_size=512, published_params=None
    )
    return ex.models.build(cfg, batch=2, seq=16)


def test_tree_is_model_layer_block_op(gpt):
    h = hierarchy(gpt)
    root = h.group(ROOT)
    assert root.kind == "model" and root.label == gpt.name and root.parent is None
    assert h.layers() == ("layers.0", "layers.1", "layers.2")
    assert [c for c in root.children if h.group(c).kind == "layer"] == list(h.layers())
    layer = h.group("layers.1")
    assert layer.parent == ROOT and layer.children == ("layers.1.attn", "layers.1.mlp")
    assert h.group("layers.1.attn").kind == "block"
    assert h.group_of("layers.1.attn.norm") == "layers.1.attn"
    assert h.ancestors("layers.1.attn") == ("layers.1",)
    assert "layers" not in h  # a list of numbered layers is no group of its own


def test_totals_add_up(gpt):
    h = hierarchy(gpt)
    assert h.group(ROOT).num_nodes == len(gpt)
    assert h.group(ROOT).flops == gpt.flops() and h.group(ROOT).params == gpt.num_params()
    assert h.members(ROOT) == tuple(n.name for n in gpt.nodes)
    for path, g in h.groups.items():
        members = h.members(path)
        assert g.num_nodes == len(members)
        assert g.flops == gpt.flops(members)
        assert g.num_ops == sum(not gpt.node(m).is_source for m in members)
        assert g.params == sum(gpt.node(m).type.numel for m in members
                               if gpt.node(m).op == "param")  # fmt: skip
        assert g.num_nodes == len(g.nodes) + sum(h.group(c).num_nodes for c in g.children)


def test_repeated_layers_share_a_fingerprint(gpt):
    h = hierarchy(gpt)
    prints = {h.group(p).fingerprint for p in h.layers()}
    assert len(prints) == 1
    assert h.group("layers.0.attn").fingerprint != h.group("layers.0.mlp").fingerprint


def test_search_finds_groups_then_nodes_and_says_what_to_open(gpt):
    h = hierarchy(gpt)
    found = h.search("LAYERS.1.MLP")  # case does not matter; the exact name comes first
    assert found[0].path == "layers.1.mlp" and found[0].is_group
    assert found[0].ancestors == ("layers.1",)
    nodes = [m for m in found if not m.is_group]
    assert nodes and all(m.path.startswith("layers.1.mlp.") for m in nodes)
    assert all(m.ancestors == ("layers.1", "layers.1.mlp") for m in nodes)
    assert h.search("no-such-name") == ()
    assert len(h.search("layers", limit=5)) == 5
    with pytest.raises(HierarchyError, match="empty"):
        h.search("  ")


def test_unknown_group_names_close_ones(gpt):
    with pytest.raises(HierarchyError, match="layers.1.mlp"):
        hierarchy(gpt).group("layers.1.mpl")
    with pytest.raises(HierarchyError, match="Graph"):
        hierarchy("gpt2")  # type: ignore[arg-type]


def test_big_model_tree():
    g = ex.models.build(ex.models.load("llama3-405b"), batch=1, seq=128)
    h = hierarchy(g)
    assert len(h.layers()) == 126
    # 43 per layer: with the rope ops, their cos/sin inputs and the repeated KV heads
    assert h.group("layers.125").num_nodes == h.group("layers.0").num_nodes == 43
    assert hierarchy(g) is h  # computed once per graph


def test_changed_materially():
    before = {"a": 100.0, "b": 100.0, "c": 0.0}
    after = {"a": 100.0 * (1 + CHANGE_THRESHOLD / 2), "b": 100.0 * (1 + CHANGE_THRESHOLD),
             "c": 1e-9, "d": 5.0}  # fmt: skip
    assert changed_materially(before, after) == ("b", "c", "d")
    assert changed_materially(before, after, ["d", "a"]) == ("d",)
    assert changed_materially(before, after, threshold=0.0) == ("a", "b", "c", "d")
    assert changed_materially(before, before, threshold=0.0) == ()
    with pytest.raises(HierarchyError, match="fraction"):
        changed_materially(before, after, threshold=-0.5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["", "a", "a.b", "a.0.x", "a.1.x", "c.2", "c.2.y.z"]),
                min_size=1, max_size=12))  # fmt: skip
def test_every_node_in_exactly_one_group(scopes):
    b = GraphBuilder("random")
    x = b.input("x", (2, 4))
    for s in scopes:
        with b.scope(s) if s else _nullscope():
            x = b.op("gelu", x)
    g = b.build([x])
    h = hierarchy(g)
    seen = [n for p in h.groups for n in h.group(p).nodes]
    assert sorted(seen) == sorted(n.name for n in g.nodes)
    for p, grp in h.groups.items():
        for c in grp.children:
            assert h.group(c).parent == p and c.startswith(p + "." if p else "")
        assert set(h.members(p)) >= set(grp.nodes)


def _nullscope():
    import contextlib

    return contextlib.nullcontext()
