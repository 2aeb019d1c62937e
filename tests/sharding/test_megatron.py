"""The Megatron layer: two all-reduces in the forward; with sequence parallel, two
all-gathers and two reduce-scatters of the same total bytes."""

from __future__ import annotations

import explorer as ex
from explorer.hardware import CollectiveKind
from explorer.sharding import assign, node_strategies, verify

from .helpers import layer_graph

TP = ex.Mesh({"tp": 4})

# column-parallel q/k/v and fc1 (split n), heads split, row-parallel o and fc2 (split k)
MEGATRON = {
    **{f"attn.{p}": "n=tp" for p in ("q", "k", "v")},
    **{f"attn.{p}_bias": "c=tp" for p in ("q", "k", "v")},
    **{f"attn.{p}_heads": "c=tp" for p in ("q", "k", "v")},
    "attn.scores": "n=tp", "attn.scale": "b=tp", "attn.mask": "b=tp", "attn.probs": "b=tp",
    "attn.context": "n=tp", "attn.merge_heads": "c=tp", "attn.o": "k=tp",
    "mlp.fc1": "n=tp", "mlp.fc1_bias": "c=tp", "mlp.gelu": "c=tp", "mlp.fc2": "k=tp",
}  # fmt: skip

# sequence parallel: norms, biases after the row-parallel matmuls and residuals split on s
SEQUENCE = {
    **MEGATRON, "x": "b=tp", "attn.norm": "b=tp", "attn.o_bias": "b=tp",
    "attn.residual": "b=tp", "mlp.norm": "b=tp", "mlp.fc2_bias": "b=tp", "mlp.residual": "b=tp",
}  # fmt: skip


def _run(names):
    g = layer_graph()
    report = verify(g, assign(g, TP, names), TP)
    assert report.ok, str(report)
    return [c for c, _ in report.result.collective_log], report


def test_megatron_layer_needs_two_all_reduces():
    colls, report = _run(MEGATRON)
    assert [c.kind for c in colls] == [CollectiveKind.ALL_REDUCE] * 2
    assert [c.tensor for c in colls] == ["attn.o->attn.o_bias", "mlp.fc2->mlp.fc2_bias"]
    s = 2 * 8 * 64 * 4  # the [b, s, h] activation in fp32
    assert all(c.size_bytes == s for c in colls)
    assert report.bytes_measured == report.bytes_predicted == 2 * 2 * 3 / 4 * s


def test_sequence_parallel_swaps_all_reduce_for_gather_and_scatter():
    colls, report = _run(SEQUENCE)
    kinds = sorted(c.kind.value for c in colls)
    assert kinds == ["all-gather", "all-gather", "reduce-scatter", "reduce-scatter"]
    _, mega = _run(MEGATRON)
    assert report.bytes_measured == report.bytes_predicted == mega.bytes_measured


def test_data_parallel_layer_needs_no_communication():
    g = layer_graph(batch=4)
    names = {}
    for n in g.ops:
        (dp,) = [s for s in node_strategies(g, n.name, TP) if s.is_data_parallel]
        names[n.name] = dp.name
    report = verify(g, assign(g, TP, names), TP)
    assert report.ok and report.num_collectives == 0
