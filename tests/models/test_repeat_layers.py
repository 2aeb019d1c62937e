"""from_hf traces a few layers and copies the last (the last period of a repeating pattern
of layer types): the graph equals the full trace."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from explorer.models import from_hf  # noqa: E402

from .hf_cases import tiny  # noqa: E402

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def _nodes(graph):
    return {(n.name, n.op, n.inputs, n.type, n.attrs, n.scope) for n in graph.nodes}


def _layers(model_type: str, n: int, types: list[str] | None = None) -> dict:
    """The tiny config with ``n`` layers (under every layer-count field the type has)."""
    raw = tiny(model_type)
    raw.update({k: n for k in ("num_hidden_layers", "n_layer", "n_layers") if k in raw})
    if raw.get("layer_types"):
        raw["layer_types"] = types or raw["layer_types"][:1] * n
    return raw


def _copied_equals_full(raw: dict, note: str) -> None:
    copied = from_hf(raw, batch=2, seq=8, dtype="fp32")
    full = from_hf(raw, batch=2, seq=8, dtype="fp32", reuse_layers=False)
    assert any(note in n for n in copied.report.notes), copied.report.notes
    assert _nodes(copied) == _nodes(full)
    assert copied.outputs == full.outputs


# the layers' path: model.layers. (the first five), gpt_neox.layers., transformer.h. (GPT-J
# and Falcon), transformer.blocks. (MPT); GPT-J's and MPT's own layer-count fields
@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3", "qwen2_moe", "phi", "phimoe",
                                        "gpt_neox", "gptj", "falcon", "mpt"])  # fmt: skip
def test_copied_layers_equal_the_full_trace(model_type):
    # the fewest layers with two copies: 3 traced (DeepSeek-V3: 4, its first layer dense)
    n = 6 if model_type == "deepseek_v3" else 5
    _copied_equals_full(_layers(model_type, n), "are copies of the traced layer ")


def test_alternating_layers_are_copied_in_turn():
    """Gemma 2's local and global layers alternate: 5 traced (the first, two periods to
    compare), layers 5 and 6 copy layers 3 (global) and 4 (local)."""
    raw = _layers("gemma2", 7, [LOCAL, GLOBAL] * 3 + [LOCAL])
    _copied_equals_full(raw, "layers 5..6 are copies of the traced layers model.layers.3..4")


def test_layers_that_differ_are_traced_in_full():
    raw = _layers("gemma2", 6, [LOCAL, GLOBAL, GLOBAL, LOCAL, LOCAL, LOCAL])  # no pattern
    graph = from_hf(raw, batch=2, seq=8, dtype="fp32")
    assert not any("copies" in n for n in graph.report.notes)
    assert len(graph.scopes(depth=3)) >= 6
