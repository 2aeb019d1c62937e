"""T5's relative-position bucket table is one constant, folded at trace time.

T5 computes the bucket of every (query, key) pair from ``arange``s of the two lengths
(``T5Attention._relative_position_bucket``: sub, abs or min, a log of the distance,
div, mul, cast, min, where, add): about 20 ops per stack that depend on shapes only. The
importer folds them (`constants.Constants.fold`) and hands the bias ``embedding`` a
``constant`` op holding the table (`Context.constant`); `prune` drops the chain. Checked
here: the chain is gone from the tiny T5 traced on the meta device, the constant equals
torch's buckets (encoder bidirectional, decoder causal; at 160 tokens the log branch and
the ``max_distance`` clamp are exercised too), and the model traced from real weights
still gives torch's logits.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from explorer.models import from_hf  # noqa: E402
from explorer.models.torch_import.convert import Context  # noqa: E402
from explorer.sharding import reference  # noqa: E402

from .hf_cases import BATCH, SEQ, tiny, traced  # noqa: E402

# the ops of the bucket chain, none of which the rest of T5 uses
CHAIN_OPS = {"fill", "log", "abs", "neg", "where", "minimum"}


def torch_buckets(q: int, k: int, bidirectional: bool, cfg: dict) -> np.ndarray:
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(k)[None, :] - torch.arange(q)[:, None]
    out = T5Attention._relative_position_bucket(
        rel,
        bidirectional=bidirectional,
        num_buckets=cfg["relative_attention_num_buckets"],
        max_distance=cfg["relative_attention_max_distance"],
    )
    return out.numpy()


def tables(graph) -> dict[str, np.ndarray]:
    """Stack name -> the constant feeding its relative-attention-bias embedding."""
    out = {}
    for n in graph.ops:
        if n.op == "embedding" and "relative_attention_bias" in n.scope:
            src = graph.node(n.inputs[0])
            assert src.op == "constant", f"{n.name} reads {src.op}, not a constant"
            out[n.name.split(".")[0]] = src.attr("value").array
    return out


def test_bucket_chain_is_gone(monkeypatch):
    graph = traced("t5")
    ops = {n.op for n in graph.ops}
    assert not ops & CHAIN_OPS, sorted(ops & CHAIN_OPS)
    assert sorted(tables(graph)) == ["decoder", "encoder"]
    # the same trace with the indices left as traced ops: the chain is ~20 ops per stack
    monkeypatch.setattr(Context, "constant", lambda self, r: r)
    unfolded = from_hf(tiny("t5"), batch=BATCH, seq=SEQ, dtype="fp32")  # patched: not `traced`
    assert {"fill", "log"} <= {n.op for n in unfolded.ops}
    assert len(unfolded.nodes) - len(graph.nodes) >= 2 * 15
    assert graph.num_params() == unfolded.num_params()


def test_a_table_over_the_limit_stays_traced(monkeypatch):
    from explorer.models.torch_import import constants

    # 8 x 8 int64 buckets are 512 bytes: one byte less keeps the chain as traced ops
    monkeypatch.setattr(constants, "MAX_GRAPH_CONSTANT_BYTES", SEQ * SEQ * 8 - 1)
    graph = from_hf(tiny("t5"), batch=BATCH, seq=SEQ, dtype="fp32")
    assert {"fill", "log"} <= {n.op for n in graph.ops}
    assert "constant" not in {n.op for n in graph.ops}


@pytest.mark.parametrize("seq", [SEQ, 160])
def test_table_equals_torch_buckets(seq):
    cfg = tiny("t5")
    graph = from_hf(cfg, batch=1, seq=seq, dtype="fp32")
    got = tables(graph)
    np.testing.assert_array_equal(got["encoder"], torch_buckets(seq, seq, True, cfg))
    np.testing.assert_array_equal(got["decoder"], torch_buckets(seq, seq, False, cfg))
    if seq > cfg["relative_attention_max_distance"]:  # the farthest keys share the last bucket
        last = cfg["relative_attention_num_buckets"] - 1
        assert got["encoder"][0, -1] == last and got["decoder"][-1, 0] == last


def test_real_weights_logits_equal_torch():
    from .spmd_cases import case

    c = case("t5")
    assert not {n.op for n in c.graph.ops} & CHAIN_OPS
    assert sorted(tables(c.graph)) == ["decoder", "encoder"]
    got = reference(c.graph, c.feeds)[c.graph.outputs[0]]
    # float32 torch against the float64 reference (the claim of test_spmd_architectures_b)
    np.testing.assert_allclose(got, c.want, rtol=1e-5, atol=1e-5)
