"""Matching predicted collectives with XLA's: matches, misses, extras, split tuples."""

from __future__ import annotations

import explorer as ex
from explorer.export import HloCollective, compare, predicted_gradient_collectives
from explorer.export.megatron import megatron_assignment
from explorer.hardware import CollectiveKind
from explorer.sharding import make_collective
from tests.sharding.helpers import layer_graph

MESH = ex.Mesh({"dp": 2, "tp": 4})
AR = CollectiveKind.ALL_REDUCE


def _hlo(kind, axes, size, name="x", index=None):
    sent = MESH.collective_bytes(kind, size, axes)
    return HloCollective(kind, axes, size, sent, "f32", (size // 4,), (), name, index)


def test_match_miss_extra_and_split():
    predicted = (
        make_collective(AR, 2048, ("tp",), MESH, "a"),
        make_collective(CollectiveKind.ALL_GATHER, 2048, ("tp",), MESH, "b"),
        make_collective(AR, 96, ("tp",), MESH, "ce"),
    )
    observed = (
        _hlo(AR, ("tp",), 2048, "ar"),
        _hlo(AR, ("tp",), 48, "pair", 0),
        _hlo(AR, ("tp",), 48, "pair", 1),
        _hlo(AR, ("dp",), 64, "extra"),
    )
    c = compare(predicted, observed)
    assert [p.tensor for p, _ in c.matches] == ["a"]
    assert [p.tensor for p in c.misses] == ["b"]
    assert [o.instruction for o in c.extras] == ["extra"]
    assert [(p.tensor, len(os)) for p, os in c.split] == [("ce", 2)]
    assert not c.ok and not c.exact
    assert "1 matches, 1 split, 1 misses, 1 extras" in c.table()


def test_gradient_reductions_follow_the_layouts():
    g = layer_graph()
    colls = predicted_gradient_collectives(g, MESH, megatron_assignment(g, MESH))
    by = {c.tensor: c for c in colls}
    assert by["attn.q_w"].axes == ("dp",) and by["attn.q_w"].size_bytes == 64 * 16 * 4
    assert by["attn.norm_g"].axes == ("dp",) and by["attn.norm_g"].size_bytes == 256
    sp = predicted_gradient_collectives(
        g, MESH, megatron_assignment(g, MESH, sequence_parallel=True)
    )
    assert {c.tensor: c.axes for c in sp}["attn.norm_g"] == ("dp", "tp")
