"""The grouped_attention pass: attention matmuls over ``repeat_kv``'s copies of the key and
value heads become grouped matmuls over the key/value heads, with the same values."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.compiler.passes import grouped_attention
from explorer.compiler.passes.grouped_attention import _batched_matmul_eq
from explorer.ir import GraphBuilder, Interpreter


def _repeat_kv_graph(b=1, kvh=2, g=3, m=2, s=5, d=4, transposed=True):
    """q [b, kvh*g, m, d] against keys [b, kvh, s, d] repeated g times, as transformers'
    repeat_kv traces (reshape, expand, reshape)."""
    gb = GraphBuilder("gqa")
    q = gb.input("q", (b, kvh * g, m, d))
    k = gb.input("k", (b, kvh, s, d))
    k1 = gb.op("reshape", k, shape=(b, kvh, 1, s, d))
    k2 = gb.op("expand", k1, axes=(2,), shape=(b, kvh, g, s, d))
    k3 = gb.op("reshape", k2, shape=(b, kvh * g, s, d))
    if transposed:
        kt = gb.op("transpose", k3, perm=(0, 1, 3, 2))
        out = gb.op("einsum", q, kt, eq="deca,deab->decb")
    else:
        q = gb.input("p", (b, kvh * g, m, s))
        out = gb.op("einsum", q, k3, eq="deca,deab->decb")
    return gb.build([out])


@pytest.mark.parametrize("transposed", [True, False])
def test_repeated_heads_become_one_grouped_matmul_with_the_same_values(transposed):
    g = _repeat_kv_graph(transposed=transposed)
    new, steps = grouped_attention(g)
    assert [s.rule for s in steps] == ["grouped_kv_matmul"]
    ops = [n.op for n in new.nodes]
    # the old chain is left for DCE; the einsum now reads the key/value heads directly
    mm = [n for n in new.nodes if n.op == "einsum"]
    assert len(mm) == 1 and mm[0].type.shape[1] == 2  # batched over the 2 key/value heads
    assert "k" in mm[0].inputs or any(
        new.node(i).op == "transpose" and new.node(i).inputs == ("k",) for i in mm[0].inputs
    )
    assert ops.count("einsum") == 1
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.standard_normal(n.type.shape).astype(np.float32) for n in g.inputs}
    want = Interpreter(g).run(feeds)[g.outputs[0]]
    got = Interpreter(new).run(feeds)[new.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_heads_that_are_not_a_repeat_are_left_alone():
    gb = GraphBuilder("mha")
    q = gb.input("q", (1, 4, 2, 8))
    k = gb.input("k", (1, 4, 5, 8))
    out = gb.op("einsum", q, gb.op("transpose", k, perm=(0, 1, 3, 2)), eq="deca,deab->decb")
    g = gb.build([out])
    new, steps = grouped_attention(g)
    assert steps == [] and new is g


def test_only_matmuls_batched_over_two_dims_qualify():
    assert _batched_matmul_eq("deca,deab->decb")
    assert not _batched_matmul_eq("deca,deab->debc")  # output transposed
    assert not _batched_matmul_eq("ca,ba->cb")
    assert not _batched_matmul_eq("deca,dfab->decb")  # batch letters differ


def test_a_grouped_query_llama_compiles_without_repeating_its_keys_and_values():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import explorer as ex
    from explorer.compiler.torch_decode import step_mask, step_module
    from explorer.compiler.torch_program import TOLERANCE

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                                   num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                   bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    rtol, atol = TOLERANCE["fp32"]
    ids = torch.tensor([[5, 17, 3, 99, 42, 7]])
    prefill = ex.compile(model, (ids,), disk_cache="off")
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        cache = model(ids, use_cache=True).past_key_values
    np.testing.assert_allclose(prefill(ids).logits.numpy(), want.numpy(), rtol=rtol, atol=atol)
    kv = [torch.cat([t, torch.zeros_like(t[:, :, :1])], dim=2)  # step_module's free slot
          for layer in cache.layers for t in (layer.keys, layer.values)]  # fmt: skip
    p = ids.shape[1]
    inputs = (torch.tensor([[11]]), torch.from_numpy(step_mask(1, p, p)), torch.tensor([[p]]), *kv)
    step = ex.compile(step_module(model), inputs, disk_cache="off")
    with torch.no_grad():
        ref = step_module(model)(*inputs)
    for got, r in zip(step(*inputs), ref, strict=True):
        np.testing.assert_allclose(got.numpy(), r.numpy(), rtol=rtol, atol=atol)
    for prog in (prefill, step):
        assert "expand" not in [n.op for n in prog.optimized.nodes]
        assert any(s.pass_name == "grouped_attention" for s in prog.steps)
