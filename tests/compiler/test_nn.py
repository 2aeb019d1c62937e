"""Cells: eager vs jit results and gradients at O0/O1/O2; abstract capture of a GPT."""

from collections import Counter

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, capture, spec

LEVELS = ["O0", "O1", "O2"]


def run(model, x):
    return model(x)


def loss_of(model, x):
    return (model(x) ** 2.0).mean()


CELLS = {
    "linear": (lambda: ex.nn.Linear(8, 6, seed=1), (2, 8)),
    "layernorm": (lambda: ex.nn.LayerNorm(8), (2, 3, 8)),
    "rmsnorm": (lambda: ex.nn.RMSNorm(8), (2, 3, 8)),
    "mlp": (lambda: ex.nn.MLP(8, 16, seed=2), (2, 3, 8)),
    "swiglu": (lambda: ex.nn.SwiGLU(8, 16, seed=3), (2, 3, 8)),
    "attention_gqa": (lambda: ex.nn.Attention(16, 4, num_kv_heads=2, seed=4), (2, 5, 16)),
    "block": (lambda: ex.nn.TransformerBlock(16, 4, seed=5), (1, 6, 16)),
    "block_rms_swiglu": (
        lambda: ex.nn.TransformerBlock(16, 4, norm="rmsnorm", activation="swiglu", seed=6),
        (1, 4, 16),
    ),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_eager_equals_jit(name, level, rng):
    make, shape = CELLS[name]
    model = make()
    model.parameters()
    x = ex.tensor(rng.standard_normal(shape))
    np.testing.assert_allclose(
        ex.jit(run, level=level)(model, x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5
    )
    ge = ex.grad(loss_of)(model, x)
    gj = ex.jit(ex.grad(loss_of), level=level)(model, x)
    assert sorted(ge) == sorted(gj)
    for k in ge:
        np.testing.assert_allclose(gj[k].numpy(), ge[k].numpy(), rtol=1e-3, atol=1e-5)


def gpt_loss(model, tokens, labels):
    return model(tokens, labels=labels)


@pytest.mark.parametrize("level", LEVELS)
def test_gpt_eager_equals_jit_with_grads(level, rng):
    model = ex.nn.GPT(vocab_size=32, hidden=16, num_layers=2, num_heads=2, max_seq_len=8, seed=0)
    tokens = ex.tensor(rng.integers(0, 32, (2, 8)), "int32")
    labels = ex.tensor(rng.integers(0, 32, (2, 8)), "int32")
    np.testing.assert_allclose(
        ex.jit(gpt_loss, level=level)(model, tokens, labels).numpy(),
        gpt_loss(model, tokens, labels).numpy(),
        rtol=1e-5,
    )
    ge = ex.grad(gpt_loss)(model, tokens, labels)
    gj = ex.jit(ex.grad(gpt_loss), level=level)(model, tokens, labels)
    for k in ge:
        np.testing.assert_allclose(gj[k].numpy(), ge[k].numpy(), rtol=1e-3, atol=1e-6)


def test_init_is_deterministic():
    a = ex.nn.GPT(32, 16, 1, 2, 8, seed=3).parameters()
    b = ex.nn.GPT(32, 16, 1, 2, 8, seed=3).parameters()
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_gpt_capture_matches_builder():
    cfg = ex.models.load("gpt2").replace(
        num_layers=2, hidden_size=64, num_heads=4, vocab_size=256, max_seq_len=32
    )
    ref = ex.models.build(cfg, batch=2, seq=16)
    model = ex.nn.GPT.from_config(cfg)
    g = capture(model, spec((2, 16), "int32"), spec((16,), "int32"), spec((2, 16), "int32"))
    assert isinstance(g, ex.Graph)
    assert g.num_params() == ref.num_params()
    assert g.flops() == ref.flops()
    assert Counter(n.op for n in g.ops) == Counter(n.op for n in ref.ops)
    assert {n.name for n in g.inputs} == {"tokens", "positions", "labels"}
    assert "layers.1.attn" in g.scopes(depth=3)


def test_captured_graph_plans_with_search():
    cfg = ex.models.load("gpt2").replace(
        num_layers=1, hidden_size=64, num_heads=4, vocab_size=128, max_seq_len=16
    )
    g = capture(
        ex.nn.GPT.from_config(cfg),
        spec((4, 16), "int32"),
        spec((16,), "int32"),
        spec((4, 16), "int32"),
    )
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=ex.hardware.load("a100-80g"))
    plan = ex.search(g, mesh)
    assert plan.cost.total > 0
    assert {n.name for n in g.nodes} == set(plan.assignment)


def test_dropout_cell_seeded():
    x = ex.tensor(np.ones((4, 4)))
    a = F.dropout(x, 0.5, seed=1).numpy()
    b = ex.jit(lambda_free_dropout)(x).numpy()
    np.testing.assert_array_equal(a, b)


def lambda_free_dropout(x):
    return F.dropout(x, 0.5, seed=1)
