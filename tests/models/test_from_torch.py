"""from_torch on small user-written modules: names, scopes, tied weights, the report of
unmapped ops, leaf handlers, and the errors of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from explorer.ir import OpGroup  # noqa: E402
from explorer.models import TorchImportError, from_hf, from_torch  # noqa: E402
from explorer.models.torch_import import LeafHandler, register_leaf, unregister_leaf  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(h)
        self.up = torch.nn.Linear(h, 4 * h)
        self.down = torch.nn.Linear(4 * h, h, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class TinyLM(torch.nn.Module):
    """Embedding, two blocks, a head tied to the embedding, and a cumprod (no mapping)."""

    def __init__(self, vocab: int = 32, h: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, h)
        self.blocks = torch.nn.ModuleList([Block(h), Block(h)])
        self.head = torch.nn.Linear(h, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return torch.cumprod(self.head(x), dim=1)


def _meta_lm() -> TinyLM:
    with torch.device("meta"):
        return TinyLM()


def test_params_named_scoped_and_tied_once():
    model = _meta_lm()
    g = from_torch(model, (2, 8))
    params = {n.name: n for n in g.parameters}
    assert "blocks.1.up.weight" in params and "head.weight" not in params
    assert params["blocks.1.up.weight"].type.shape == (64, 16)  # torch's [out, in]
    assert params["blocks.1.up.weight"].scope == "blocks.1.up"
    assert g.num_params() == sum(p.numel() for p in model.parameters())
    assert dict(g.report.tied) == {"head.weight": "embed.weight"}
    assert {"blocks.0", "blocks.1", "head"} <= set(g.scopes(depth=2))
    ops = {n.op for n in g.in_scope("blocks.0")}
    assert {"layernorm", "einsum", "erf", "add"} <= ops  # torch's exact GELU: x/2 (1 + erf)


def test_matmul_flops_equal_torch_counter():
    from torch.utils.flop_counter import FlopCounterMode

    g = from_torch(_meta_lm(), (2, 8))
    torch.manual_seed(0)
    real = TinyLM()
    with FlopCounterMode(display=False) as counter:
        real(torch.zeros((2, 8), dtype=torch.long))
    matmul = sum(g.node_flops(n.name) for n in g.ops if g.group(n.name) is OpGroup.CONTRACTION)
    assert matmul == counter.get_total_flops()


def test_unmapped_op_is_opaque_and_reported_never_dropped():
    g = from_torch(_meta_lm(), (2, 8))
    (cumprod,) = [o for o in g.report.opaque if o.target == "aten.cumprod.default"]
    assert not cumprod.static and not g.report.exact
    node = g.node(cumprod.nodes[0])
    assert node.op == "opaque" and g.outputs == (node.name,)
    assert g.node_flops(node.name) == 0 and g.node_bytes(node.name) == (2 * 8 * 32 * 4,) * 2
    assert "aten.cumprod.default x1 (on the data path)" in str(g.report)
    assert g.meta["import_report"] is g.report


def test_traced_graph_runs_like_torch():
    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

        def forward(self, x):
            return torch.softmax(self.fc2(torch.relu(self.fc1(x))) * 0.5, dim=-1)

    model = Mlp()
    x = torch.randn(3, 8)
    g = from_torch(model, (x,))
    feeds = {n: p.detach().numpy() for n, p in model.named_parameters()}
    feeds[g.inputs[0].name] = x.numpy()
    (out,) = g.run(feeds).values()
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_leaf_handler_emits_a_whole_module():
    class Doubler(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            return torch.nonzero(x).float().sum() * x  # not traceable on meta: a leaf

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Doubler()

        def forward(self, x):
            return self.inner(x) + 1

    def emit(call):
        return (call.cx.op("mul", call.inputs[0], call.params["w"]),)

    register_leaf("Doubler", LeafHandler(emit, name="doubler"))
    try:
        with torch.device("meta"):
            net = Net()
        g = from_torch(net, [(2, 4)], input_dtype="fp32")
    finally:
        unregister_leaf("Doubler")
    assert g.report.leaves == (("inner", "doubler"),)
    (mul,) = [n for n in g.ops if n.op == "mul"]
    assert mul.scope == "inner" and "inner.w" in mul.inputs


def test_sdpa_attention_is_counted_as_contractions():
    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    shape = (2, 4, 8, 16)
    g = from_torch(Attn(), [shape, shape, shape], input_dtype="fp32")
    assert g.report.exact
    assert sum(n.op == "einsum" for n in g.ops) == 2
    assert g.flops([n.name for n in g.ops if n.op == "einsum"]) == 2 * 2 * math.prod(shape) * 8


def test_bad_inputs_raise_named_errors(tmp_path):
    with pytest.raises(TorchImportError, match="expects a torch.nn.Module"):
        from_torch(object(), (1, 4))
    with pytest.raises(TorchImportError, match=r"inputs\[0\]=\(0, 4\): every dim must be > 0"):
        from_torch(_meta_lm(), [(0, 4)])
    with pytest.raises(TorchImportError, match="expected a tensor or a shape"):
        from_torch(_meta_lm(), ["ids"])
    with pytest.raises(TorchImportError, match="model_type 'no_such_model' is not a transformers"):
        from_hf({"model_type": "no_such_model"})
    with pytest.raises(TorchImportError, match="folder without a config.json"):
        from_hf(tmp_path)
    with pytest.raises(TorchImportError, match="batch=0"):
        from_hf({"model_type": "gpt2"}, batch=0)
    with pytest.raises(TorchImportError, match="^config: no model_type field.*add it"):
        from_hf({"hidden_size": 64})
    with pytest.raises(TorchImportError, match="^config: transformers could not build GPT2"):
        from_hf({"model_type": "gpt2", "n_embd": 65, "n_head": 4, "n_layer": 1})


class _CountedRepeat(torch.nn.Module):
    """Repeats each feature by counts held in a tensor: the output size is data."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("counts", torch.tensor([2, 2, 2, 2]))

    def forward(self, x):
        return self.proj(x).repeat_interleave(self.counts, dim=-1)


def test_value_dependent_size_is_refused_with_the_fix():
    with pytest.raises(TorchImportError, match=r"repeat_interleave.*depends on tensor values"):
        from_torch(_CountedRepeat(), (torch.randn(2, 4),))


def test_from_hf_reads_a_folder_and_names_the_graph_after_it(tmp_path):
    import json

    folder = tmp_path / "my-gpt"
    folder.mkdir()
    cfg = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128,
           "n_positions": 32}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg))
    g = from_hf(folder)
    assert g.name == "my-gpt" and g.num_params() == from_hf(cfg).num_params()
    assert g.inputs[0].type.shape == (1, 32)  # batch 1, the config's context length


def test_max_and_clamp_map_and_run_like_torch():
    class M(torch.nn.Module):
        def forward(self, x, lo):
            v, _ = torch.max(x, dim=1)  # the unused indices need no opaque argmax
            return torch.clamp(x, min=lo, max=lo + 0.8).sum() + v.sum() + x.clamp(-0.2).max()

    torch.manual_seed(1)
    x, lo = torch.randn(3, 4), torch.full((3, 4), -0.3)
    g = from_torch(M(), (x, lo))
    assert g.report.exact and not g.report.opaque
    (out,) = g.run({g.inputs[0].name: x.numpy(), g.inputs[1].name: lo.numpy()}).values()
    np.testing.assert_allclose(out, M()(x, lo).numpy(), rtol=1e-6)


def test_make_fx_tracer_gives_the_same_counts():
    from explorer.models.hf import hf_model

    from .hf_cases import tiny

    model, _, _ = hf_model(tiny("llama"), dtype="fp32")
    a = from_torch(model, [(2, 8)], {"use_cache": False})
    b = from_torch(model, [(2, 8)], {"use_cache": False}, tracer="make_fx")
    assert (a.report.tracer, b.report.tracer) == ("torch.export", "torch.fx (make_fx)")
    contraction = [n.name for n in a.ops if a.group(n.name) is OpGroup.CONTRACTION]
    contraction_b = [n.name for n in b.ops if b.group(n.name) is OpGroup.CONTRACTION]
    assert b.num_params() == a.num_params()
    assert b.flops(contraction_b) == a.flops(contraction)
    with pytest.raises(TorchImportError, match="tracer='jit'"):
        from_torch(model, [(2, 8)], tracer="jit")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_traced_in_the_form_torch_computes(approximate):
    # torch's default GELU is the exact (erf) one; read as the tanh form it was off by ~1e-4
    x = torch.linspace(-4.0, 4.0, 64, dtype=torch.float64).reshape(8, 8)
    g = from_torch(torch.nn.GELU(approximate=approximate), (x,))
    (out,) = g.run({g.inputs[0].name: x.numpy()}).values()
    np.testing.assert_allclose(out, torch.nn.functional.gelu(x, approximate=approximate).numpy(),
                               rtol=1e-6, atol=1e-7)  # fmt: skip
    assert not g.report.opaque
