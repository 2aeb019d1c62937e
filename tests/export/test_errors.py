"""Missing engines and unsupported ops fail early with the fix."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.export import ExportError, to_jax
from explorer.export.errors import require


def test_missing_engine_names_the_extra():
    with pytest.raises(ExportError, match=r"pip install \.\[jax\]"):
        require("surely_not_an_installed_module", "jax")


def test_moe_ops_have_no_jax_kernel():
    cfg = ex.models.ModelConfig(
        name="tiny-moe", arch="decoder", hidden_size=32, num_layers=1, num_heads=2,
        vocab_size=64, max_seq_len=8, num_experts=4, dtype="fp32",
    )  # fmt: skip
    with pytest.raises(ExportError, match="op 'topk_gate' has no JAX kernel"):
        to_jax(cfg, {}, ex.Mesh({"tp": 2}), batch=2, seq=8)


def test_model_name_needs_a_batch():
    with pytest.raises(ExportError, match="needs batch="):
        to_jax("gpt2", {}, ex.Mesh({"tp": 2}))
