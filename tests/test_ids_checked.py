"""Integer ids (embedding rows, cross-entropy labels) outside their range are named errors in
every executor: the reference run, the SPMD run and a compiled call."""

import numpy as np
import pytest

import explorer as ex

CFG = ex.models.ModelConfig(name="tiny", arch="decoder", hidden_size=32, num_layers=1,
                            num_heads=4, vocab_size=64, max_seq_len=16, dtype="fp32")  # fmt: skip
GRAPH = ex.models.build(CFG, batch=2, seq=8)
MESH = ex.Mesh({"tp": 2}, hardware="a100-80g")


def ids(**bad):
    out = {n: np.zeros(GRAPH.node(n).type.shape, dtype=np.int64)
           for n in ("tokens", "labels", "positions")}  # fmt: skip
    for name, value in bad.items():
        out[name].flat[3] = value
    return out


@pytest.mark.parametrize(
    "bad, named",
    [({"tokens": -1}, "embedding %embed.tokens: id -1 is outside 0..63"),
     ({"tokens": 64}, "embedding %embed.tokens: id 64 is outside 0..63"),
     ({"positions": 16}, "embedding %embed.pos: id 16 is outside 0..15"),
     ({"labels": -1}, "cross_entropy %head.token_loss labels: id -1 is outside 0..63"),
     ({"labels": 64}, "cross_entropy %head.token_loss labels: id 64 is outside 0..63")],
)  # fmt: skip
def test_the_sharded_run_names_an_id_out_of_range(bad, named):
    # the vocab split over tp: each device looks up its rows only, and -1 must not pass as
    # "not mine" (it would give a zero row, then a wrong loss, silently)
    plan = ex.search(GRAPH, MESH)
    with pytest.raises(ex.ExplorerError, match=named):
        ex.sharding.verify(GRAPH, plan, MESH, inputs=ids(**bad))


def test_the_sharded_run_with_ids_in_range_verifies():
    plan = ex.search(GRAPH, MESH)
    assert ex.sharding.verify(GRAPH, plan, MESH, inputs=ids(tokens=63, labels=63)).ok


@pytest.mark.parametrize("label", [-1, 10])
def test_cross_entropy_labels_are_checked_at_every_compiled_call(label):
    @ex.jit
    def loss(logits, labels):
        return ex.F.cross_entropy(logits, labels)

    logits = ex.tensor(np.zeros((4, 10), np.float32))
    good = ex.tensor(np.array([0, 1, 2, 9]))
    assert np.isfinite(loss(logits, good).numpy()).all()  # captured with good labels
    with pytest.raises(ex.ExplorerError, match=f"id {label} is outside 0..9"):
        loss(logits, ex.tensor(np.array([0, label, 2, 3])))
