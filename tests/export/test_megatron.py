"""The Megatron assignments: the numpy SPMD executor proves them on a whole model."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.export import ExportError, megatron_assignment
from explorer.sharding import verify

MESH = ex.Mesh({"dp": 2, "tp": 4})
GPT = ex.models.ModelConfig(
    name="tiny-gpt", arch="decoder", hidden_size=64, num_layers=2, num_heads=4, vocab_size=128,
    max_seq_len=16, dtype="fp32",
)  # fmt: skip


@pytest.mark.parametrize("sp", [False, True])
def test_megatron_gpt_runs_sharded(sp):
    g = ex.models.build(GPT, batch=2, seq=8)
    a = megatron_assignment(g, MESH, sequence_parallel=sp)
    report = verify(g, a, MESH)
    assert report.ok, str(report)
    kinds = sorted({c.kind.value for c, _ in report.result.collective_log})
    want = ["all-gather", "all-reduce", "reduce-scatter"] if sp else ["all-reduce"]
    assert kinds == want
    assert a["layers.1.attn.q"].name == "a=dp,n=tp"
    assert a["layers.1.attn.scores"].name == "b=dp,n=tp"
    assert a["head.logits"].name == "b=dp,v=tp"  # vocabulary-parallel head


def test_tp_only_mesh_and_indivisible_heads():
    g = ex.models.build(GPT, batch=2, seq=8)
    a = megatron_assignment(g, ex.Mesh({"tp": 4}))
    assert a["layers.0.attn.o"].name == "k=tp"
    with pytest.raises(ExportError, match="attn.q.*cannot take the Megatron split"):
        megatron_assignment(ex.models.build(GPT, batch=2, seq=8), ex.Mesh({"tp": 128}))
    with pytest.raises(ExportError, match="no axis 'mp'"):
        megatron_assignment(g, MESH, tp="mp")
