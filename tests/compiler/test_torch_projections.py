"""Split projections merged back for the compiled program (torch_projections.py): GPT-2's
q, k, v blocks of ``c_attn`` run as one matmul and one bias add over the module's own
weight (no copy), the blocks as slices, outputs equal to torch's and to the split program;
blocks that do not tile the stored weight, or that other ops read, are left split."""

from __future__ import annotations

import numpy as np
import pytest

import explorer as ex
from explorer.compiler.torch_projections import merge_projections
from explorer.ir import GraphBuilder, Interpreter

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                                  n_positions=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gpt2_runs_one_projection_over_the_stored_weight(backend):
    model = _gpt2()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    prog = ex.compile(model, (ids,), backend=backend, disk_cache="off")
    names = [n.name for n in prog.optimized.nodes]
    assert not [n for n in names if "c_attn.weight[" in n or "c_attn.bias[" in n]
    mm = [n for n in prog.optimized.nodes if n.name.endswith("c_attn.merged")]
    assert len(mm) == 2 and mm[0].type.shape[-1] == 3 * 64
    for layer in range(2):
        w = model.transformer.h[layer].attn.c_attn.weight.detach().numpy()
        fed = prog.weights[f"transformer.h.{layer}.attn.c_attn.weight"]
        assert np.shares_memory(fed, w)  # the module's memory: nothing copied
    assert any("split projections" in n for n in prog.notes)
    with torch.no_grad():
        want = model(ids).logits.numpy()
    np.testing.assert_allclose(prog(ids).logits.numpy(), want, rtol=1e-5, atol=1e-5)


def _split_graph(stops=(4, 8, 12), reader: bool = False):
    """x @ W[a:b] + bias[a:b] per block, each block's result doubled (what reads it)."""
    b = GraphBuilder("split")
    x = b.input("x", (1, 6))
    outs, start = [], 0
    for stop in stops:
        w = b.param(f"w[{start}:{stop}]", (6, stop - start))
        bias = b.param(f"b[{start}:{stop}]", (stop - start,))
        y = b.op("add", b.op("matmul", x, w), bias)
        outs.append(b.op("scale", y, factor=2.0))
        if reader and start == 0:
            outs.append(b.op("scale", w, factor=1.0))  # the block read elsewhere
        start = stop
    return b.build(outs)


def test_merged_graph_equals_the_split_one():
    g = _split_graph()
    shapes = {"w": (6, 12), "b": (12,)}
    new, n = merge_projections(g, shapes.get)
    assert n == 1
    assert [o.op for o in new.ops] == ["matmul", "add", "slice", "slice", "slice", "scale",
                                       "scale", "scale"]  # fmt: skip
    rng = np.random.default_rng(0)
    w, bias = rng.standard_normal((6, 12), np.float32), rng.standard_normal(12, np.float32)
    x = rng.standard_normal((1, 6), np.float32)
    feeds = {"x": x, "w": w, "b": bias}
    for a, z in ((0, 4), (4, 8), (8, 12)):
        feeds[f"w[{a}:{z}]"], feeds[f"b[{a}:{z}]"] = w[:, a:z], bias[a:z]
    want = Interpreter(g).run({k: v for k, v in feeds.items() if "[" in k or k == "x"})
    got = Interpreter(new).run({k: feeds[k] for k in ("x", "w", "b")})
    for o in g.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-6)


def test_blocks_that_do_not_tile_or_are_read_elsewhere_stay_split():
    assert merge_projections(_split_graph(), {"w": (6, 16), "b": (16,)}.get)[1] == 0  # a gap
    assert merge_projections(_split_graph(), {}.get)[1] == 0  # no stored weight
    assert merge_projections(_split_graph(reader=True), {"w": (6, 12), "b": (12,)}.get)[1] == 0
