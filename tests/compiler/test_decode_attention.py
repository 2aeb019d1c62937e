"""The decode_attention pass and kernels: one query row per head against a key/value cache
(scores, scale, additive mask, softmax, weighted sum) as one kernel equals the unfused
program, on numpy and in the generated numba kernel; other shapes are left alone; a GPT-2
decoding step gets one kernel a layer with logits equal to torch's."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.compiler.codegen import numba_available
from explorer.compiler.executor import Program
from explorer.compiler.passes import plan_memory
from explorer.compiler.passes.codegen import codegen
from explorer.compiler.passes.decode_attention import decode_attention
from explorer.compiler.passes.fuse import fuse
from explorer.ir import GraphBuilder, Interpreter

MASKED = float(np.finfo(np.float32).min)


def _step_graph(heads: int, keys: int, mask_heads: int = 1, rows: int = 1, d: int = 16):
    b = GraphBuilder("step")
    q = b.input("q", (1, heads, rows, d))
    k = b.input("k", (1, heads, keys, d))
    v = b.input("v", (1, heads, keys, d))
    mask = b.input("mask", (1, mask_heads, rows, keys))
    s = b.op("einsum", q, b.op("transpose", k, perm=(0, 1, 3, 2)), eq="deca,deab->decb")
    p = b.op("softmax", b.op("add", b.op("scale", s, factor=0.25), mask))
    return fuse(b.build([b.op("einsum", p, v, eq="deca,deab->decb")]))[0]


def _feeds(g, empty: int = 3):
    """Random q, k, v; the mask 0 on the first keys and float32's minimum on the last
    ``empty`` (a step's free cache slots)."""
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.standard_normal(n.type.shape).astype(np.float32) for n in g.inputs}
    mask = np.zeros(g.node("mask").type.shape, np.float32)
    mask[..., -empty:] = MASKED
    feeds["mask"] = mask
    return feeds


@pytest.mark.parametrize("mask_heads", [1, 4])
def test_one_kernel_equals_the_unfused_program(mask_heads):
    g = _step_graph(4, 40, mask_heads)
    new, steps = decode_attention(g)
    assert [s.rule for s in steps] == ["single_query_attention"]
    assert [n.op for n in new.ops] == ["decode_attention"]  # the transpose absorbed too
    feeds = _feeds(g)
    want = Interpreter(g).run(feeds)[g.outputs[0]]
    ref = Interpreter(new).run(feeds)[new.outputs[0]]  # the op's registry impl
    got = Program(new, plan_memory(new)).run([feeds[n.name] for n in new.inputs])[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(Program(g).run([feeds[n.name] for n in g.inputs])[0], got,
                               rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
@pytest.mark.parametrize("mask_heads", [1, 4])
def test_generated_kernel_equals_the_unfused_program(mask_heads, monkeypatch):
    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "sync")
    g = _step_graph(4, 129, mask_heads)
    new, _ = codegen(decode_attention(g)[0], numba_ok=True)
    node = new.ops[0]
    assert node.op == "generated" and node.attr("entry") == "attention_kernel"
    feeds = _feeds(g, empty=5)
    want = Program(g).run([feeds[n.name] for n in g.inputs])[0]
    got = Program(new, plan_memory(new)).run([feeds[n.name] for n in new.inputs])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_other_attentions_are_left_alone():
    assert decode_attention(_step_graph(4, 40, rows=2))[1] == []  # two query rows: a prefill
    b = GraphBuilder("no_mask")
    q, k = b.input("q", (1, 2, 1, 4)), b.input("k", (1, 2, 9, 4))
    s = b.op("einsum", q, b.op("transpose", k, perm=(0, 1, 3, 2)), eq="deca,deab->decb")
    p = b.op("softmax", b.op("scale", s, factor=0.5))  # no additive mask
    g = fuse(b.build([b.op("einsum", p, b.input("v", (1, 2, 9, 4)), eq="deca,deab->decb")]))[0]
    assert decode_attention(g)[1] == []
    b = GraphBuilder("scores_out")  # the scores are an output too: not absorbed
    q, k = b.input("q", (1, 2, 1, 4)), b.input("k", (1, 2, 9, 4))
    s = b.op("einsum", q, b.op("transpose", k, perm=(0, 1, 3, 2)), eq="deca,deab->decb")
    p = b.op("softmax", b.op("add", b.op("scale", s, factor=0.5), b.input("m", (1, 1, 1, 9))))
    o = b.op("einsum", p, b.input("v", (1, 2, 9, 4)), eq="deca,deab->decb")
    assert decode_attention(fuse(b.build([o, s]))[0])[1] == []


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gpt2_decoding_step_runs_one_attention_kernel_a_layer(backend, monkeypatch):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if backend == "numba" and not numba_available():
        pytest.skip("numba not installed")
    import explorer as ex
    from explorer.compiler.torch_decode import step_mask, step_module

    monkeypatch.setenv("EXPLORER_NUMBA_COMPILE", "sync")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=96,
                                  n_positions=256, bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg).eval()
    p = 130
    with torch.no_grad():
        cache = model((torch.arange(p).reshape(1, -1) * 7 + 3) % 96, use_cache=True).past_key_values
        want = model(torch.tensor([[11]]), past_key_values=cache, use_cache=True).logits.numpy()
        cache.crop(-1)
    kv = [torch.cat([t, torch.zeros_like(t[:, :, :1])], dim=2)
          for layer in cache.layers for t in (layer.keys, layer.values)]  # fmt: skip
    inputs = (torch.tensor([[11]]), torch.from_numpy(step_mask(1, p, p)), torch.tensor([[p]]), *kv)
    prog = ex.compile(step_module(model), inputs, backend=backend, disk_cache="off")
    fused = [n for n in prog.optimized.nodes if "decode_attention" in (n.op, n.attr("origin", ""))]
    assert len(fused) == 2
    assert (fused[0].op == "generated") == (backend == "numba")
    np.testing.assert_allclose(prog(*inputs)[0].numpy(), want, rtol=1e-5, atol=1e-5)
