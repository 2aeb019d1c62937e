"""MindSpore shard() strategies, golden."""

from __future__ import annotations

import explorer as ex
from explorer.export import megatron_assignment, to_mindspore
from tests.sharding.helpers import layer_graph

MESH = ex.Mesh({"dp": 2, "tp": 4})

GOLDEN = """\
import mindspore as ms
from mindspore import ops

ms.set_auto_parallel_context(parallel_mode='semi_auto_parallel', device_num=8, full_batch=True)
attn_norm = ops.LayerNorm().shard(((2, 1, 1), (1,), (1,)))  # fp32[A_dp, B, C] x fp32[A] x fp32[A]
attn_q = ops.MatMul().shard(((2, 1, 1), (1, 4)))  # fp32[A_dp, B, C] x fp32[A, B_tp]
attn_q_bias = ops.Add().shard(((2, 1, 4), (4,)))  # fp32[A_dp, B, C_tp] x fp32[A_tp]"""


def test_megatron_layer_snippet_golden():
    ms = to_mindspore(layer_graph(), megatron_assignment(layer_graph(), MESH), MESH)
    text = ms.snippet()
    assert text.startswith(GOLDEN), text
    assert ms.strategies["attn.o"] == ("MatMul", ((2, 1, 4), (4, 1)))
    assert ms.strategies["attn.scores"] == ("BatchMatMul", ((2, 1, 4, 1), (2, 1, 4, 1)))
    assert ms.strategies["attn.probs"] == ("Softmax", ((2, 4, 1, 1),))
    assert "merge_heads" not in ms.strategies  # MindSpore infers reshapes
    compile(text, "snippet", "exec")  # valid Python


def test_sequence_parallel_norm_splits_the_sequence():
    g = layer_graph()
    ms = to_mindspore(g, megatron_assignment(g, MESH, sequence_parallel=True), MESH)
    assert ms.strategies["mlp.norm"] == ("LayerNorm", ((2, 4, 1), (1,), (1,)))
