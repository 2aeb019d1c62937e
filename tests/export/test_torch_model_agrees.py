"""`export.torch_model.build_module` builds the transformer block again in torch; these
tests pin it to the IR graph of `explorer.models.build` (the one description of a block):
the same parameters with the same shapes per layer for every exportable zoo model, and the
same loss for small models run whole, so the two builders cannot drift apart."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.export import ExportError
from explorer.export.torch_model import _target, build_module, load_values, module_inputs
from explorer.models import ModelConfig, build, load, names
from explorer.sharding import random_inputs

torch = pytest.importorskip("torch")


def _exportable() -> list[str]:
    out = []
    for name in names():
        cfg = load(name)
        try:
            build_module(cfg.replace(num_layers=1, hidden_size=8, num_heads=2,
                                     num_kv_heads=None, head_dim=None, ffn_hidden_size=16,
                                     vocab_size=16))  # fmt: skip
        except (ExportError, ValueError, TypeError):
            continue
        out.append(name)
    return out


EXPORTABLE = _exportable()


def test_every_zoo_model_but_encoders_moe_mlp_and_pangu_is_exportable():
    left_out = set(names()) - set(EXPORTABLE)
    assert left_out == {"bert-base", "bert-large", "mixtral-8x7b", "mlp-small",
                        "pangu-alpha-13b", "pangu-alpha-2.6b", "pangu-alpha-200b"}  # fmt: skip
    assert len(EXPORTABLE) == 25


def _shapes_by_layer(cfg: ModelConfig):
    """Per graph parameter: the module tensor's name and its shape (2-D linear weights
    transposed, as `load_values` copies them)."""
    g = build(cfg, batch=1, seq=8)
    with torch.device("meta"):  # shapes only: a GPT-3 layer would take 7 GB of zeros
        module = build_module(cfg)
    tensors = {k: tuple(v.shape) for k, v in module.named_parameters()}
    from_graph = {}
    for p in g.parameters:
        path, attr = _target(p.name)
        shape = tuple(p.type.shape)
        if attr == "weight" and len(shape) == 2:
            shape = shape[::-1]
        from_graph[f"{path}.{attr}"] = shape
    return from_graph, tensors, g, module


@pytest.mark.parametrize("name", EXPORTABLE)
def test_module_has_the_graphs_parameters_and_shapes(name):
    cfg = load(name).replace(num_layers=2)
    from_graph, tensors, g, module = _shapes_by_layer(cfg)
    assert from_graph == tensors
    assert sum(p.numel() for p in module.parameters()) == g.num_params()


_TINY = dict(arch="decoder", hidden_size=16, num_layers=2, num_heads=4, vocab_size=32,
             max_seq_len=8, dtype="fp32")  # fmt: skip
SMALL = {
    "gpt2-like": ModelConfig(name="gpt2-like", **_TINY),
    "llama-like": ModelConfig(
        name="llama-like",
        **_TINY,
        norm="rmsnorm",
        activation="swiglu",
        position="none",
        bias=False,
        tied_embeddings=False,
        num_kv_heads=2,
        ffn_hidden_size=24,
    ),  # fmt: skip
    "post-norm-relu": ModelConfig(
        name="post-norm-relu", **_TINY, norm_position="post", activation="relu", position="none"
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(SMALL))
def test_module_computes_the_graphs_loss(name):
    cfg = SMALL[name]
    g = build(cfg, batch=2, seq=8)
    values = random_inputs(g, seed=0)
    (out,) = g.outputs
    want = float(g.run(values)[out])
    module = build_module(cfg)
    load_values(module, values)
    with torch.no_grad():
        _, loss = module(**module_inputs(values))
    np.testing.assert_allclose(float(loss), want, rtol=1e-4)
