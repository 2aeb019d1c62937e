"""The causal_attention pass and kernel: causal attention computed by blocks of query rows
(each block against only the keys it sees) equals the whole-matrix reference."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.compiler.executor import Program
from explorer.compiler.passes import causal_attention, fuse_softmax, plan_memory
from explorer.compiler.passes.causal_attention import blocks
from explorer.ir import GraphBuilder, Interpreter


def _attention_graph(rows: int, keys: int, offset: int, heads: int = 3, d: int = 8):
    b = GraphBuilder("attn")
    q = b.input("q", (1, heads, rows, d))
    kt = b.input("kt", (1, heads, d, keys))
    v = b.input("v", (1, heads, keys, d))
    s = b.op("einsum", q, kt, eq="deca,deab->decb")
    p = b.op("softmax", b.op("causal_mask", b.op("scale", s, factor=0.35), offset=offset))
    return fuse_softmax(b.build([b.op("einsum", p, v, eq="deca,deab->decb")]))[0]


def test_blocks_see_the_keys_up_to_their_last_row():
    assert blocks(10, 10, 0, 4) == [(0, 4, 4), (4, 8, 8), (8, 10, 10)]
    assert blocks(4, 9, 5, 2) == [(0, 2, 7), (2, 4, 9)]


@pytest.mark.parametrize(("rows", "keys", "offset"),
                         [(40, 40, 0), (37, 37, 0), (32, 45, 13), (29, 40, 11)])  # fmt: skip
def test_blocked_kernel_equals_the_whole_matrix(rows, keys, offset):
    g = _attention_graph(rows, keys, offset)
    new, steps = causal_attention(g, block=8)
    assert [s.rule for s in steps] == ["blocked_causal_attention"]
    assert [n.op for n in new.ops] == ["causal_attention"]
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.standard_normal(n.type.shape).astype(np.float32) for n in g.inputs}
    want = Interpreter(g).run(feeds)[g.outputs[0]]
    ref = Interpreter(new).run(feeds)[new.outputs[0]]  # the op's registry impl
    got = Program(new, plan_memory(new)).run([feeds[n.name] for n in new.inputs])[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_short_sequences_and_unmasked_softmax_are_left_alone():
    assert causal_attention(_attention_graph(12, 12, 0), block=8)[1] == []  # < 2 blocks
    b = GraphBuilder("plain")
    q, kt = b.input("q", (1, 2, 32, 4)), b.input("kt", (1, 2, 4, 32))
    v = b.input("v", (1, 2, 32, 4))
    p = b.op("softmax", b.op("einsum", q, kt, eq="deca,deab->decb"))
    g = b.build([b.op("einsum", p, v, eq="deca,deab->decb")])
    assert causal_attention(g, block=8)[1] == []


def test_a_gpt2_prefill_by_blocks_equals_torch():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import explorer as ex
    from explorer.compiler.torch_program import TOLERANCE

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=256,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    ids = (torch.arange(150).reshape(1, -1) * 7 + 3) % cfg.vocab_size
    prog = ex.compile(model, (ids,), disk_cache="off")
    assert [n.op for n in prog.optimized.nodes].count("causal_attention") == cfg.n_layer
    with torch.no_grad():
        want = model(ids, use_cache=False).logits.numpy()
    rtol, atol = TOLERANCE["fp32"]
    np.testing.assert_allclose(prog(ids).logits.numpy(), want, rtol=rtol, atol=atol)
