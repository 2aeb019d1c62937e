"""Shared small graphs and meshes: cost tables of 2-axis meshes are slow to build the first
time (seconds for a transformer), so the widget tests plan an MLP on 2x4 and a tiny GPT on
one axis, once per session."""

from __future__ import annotations

import pytest

import explorer as ex


@pytest.fixture(scope="session")
def mlp():
    return ex.models.build(ex.models.load("mlp-small"), batch=8)


@pytest.fixture(scope="session")
def mesh():
    return ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")


@pytest.fixture(scope="session")
def mlp_plan(mlp, mesh):
    return ex.search(mlp, mesh)


@pytest.fixture(scope="session")
def tiny_gpt():
    cfg = ex.models.load("gpt2").replace(
        num_layers=3, hidden_size=64, num_heads=4, vocab_size=512, published_params=None
    )
    return ex.models.build(cfg, batch=8, seq=64)


@pytest.fixture(scope="session")
def gpt_plan(tiny_gpt):
    return ex.search(tiny_gpt, ex.Mesh({"tp": 4}, hardware="a100-80g"))
