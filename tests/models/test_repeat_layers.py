"""from_hf traces a few layers and copies the last: the graph equals the full trace."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from explorer.models import from_hf  # noqa: E402

from .hf_cases import tiny  # noqa: E402


def _nodes(graph):
    return {(n.name, n.op, n.inputs, n.type, n.attrs, n.scope) for n in graph.nodes}


# the layers' path: model.layers. (the first five), gpt_neox.layers., transformer.h. (GPT-J
# and Falcon), transformer.blocks. (MPT); GPT-J's and MPT's own layer-count fields
@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3", "qwen2_moe", "phi", "phimoe",
                                        "gpt_neox", "gptj", "falcon", "mpt"])  # fmt: skip
def test_copied_layers_equal_the_full_trace(model_type):
    raw = tiny(model_type)
    raw.update({k: 6 for k in ("num_hidden_layers", "n_layer", "n_layers") if k in raw})
    if raw.get("layer_types"):
        raw["layer_types"] = raw["layer_types"][:1] * 6
    copied = from_hf(raw, batch=2, seq=8, dtype="fp32")
    full = from_hf(raw, batch=2, seq=8, dtype="fp32", reuse_layers=False)
    assert any("are copies of the traced layer" in n for n in copied.report.notes)
    assert _nodes(copied) == _nodes(full)
    assert copied.outputs == full.outputs


def test_layers_that_differ_are_traced_in_full():
    raw = {**tiny("gemma2"), "num_hidden_layers": 6}  # sliding and full attention alternate
    raw["layer_types"] = ["sliding_attention", "full_attention"] * 3
    graph = from_hf(raw, batch=2, seq=8, dtype="fp32")
    assert not any("copies" in n for n in graph.report.notes)
    assert len(graph.scopes(depth=3)) >= 6
