"""Published sizes (datasets/hf): the traced parameter count equals the meta-device
transformers model's ``sum(p.numel())`` and the count the model card publishes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from explorer.models import from_hf  # noqa: E402
from explorer.models.hf import hf_model  # noqa: E402

HF_DIR = Path(__file__).resolve().parents[2] / "datasets" / "hf"

# repository -> (exact count, the rounded count its model card states)
PUBLISHED = {
    "meta-llama__Meta-Llama-3-70B.json": (70_553_706_496, 70.6e9),
    "mistralai__Mixtral-8x22B-v0.1.json": (140_630_071_296, 141e9),
    # 671B on the card; the 14B multi-token-prediction module is not a transformers layer
    "deepseek-ai__DeepSeek-V3.json": (671_026_404_352, 671e9),
}


@pytest.mark.parametrize("file", sorted(PUBLISHED))
def test_published_size_param_count(file):
    config = json.loads((HF_DIR / file).read_text())
    graph = from_hf(config, batch=1, seq=16)
    model, _, _ = hf_model(config)
    exact, card = PUBLISHED[file]
    assert graph.num_params() == sum(p.numel() for p in model.parameters()) == exact
    assert abs(exact - card) / card < 0.005  # the card rounds to 3 significant digits
