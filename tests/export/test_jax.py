"""Real JAX runs on 8 forced host devices (a subprocess: XLA_FLAGS must precede the jax
import and must not leak into other tests): outputs equal the unsharded run, and XLA's
collectives equal the plan's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# found, not imported: jax runs in the subprocess only (importing it here costs ~3 s of CPU)
if importlib.util.find_spec("jax") is None:
    pytest.skip("the jax extra is not installed: pip install .[jax]", allow_module_level=True)

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("jax") / "checks.json"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(HERE / "jax_checks.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def _rows(cmp: dict, status: str) -> list[tuple[str, str, float]]:
    return [(r["kind"], r["axes"], r["bytes_per_device"]) for r in cmp["rows"]
            if r["status"] == status]  # fmt: skip


def test_eight_forced_host_devices(runs):
    assert runs["meta"]["devices"] == 8


@pytest.mark.parametrize("name", ["megatron_layer", "sequence_parallel_layer",
                                  "data_parallel_layer", "megatron_gpt",
                                  "sequence_parallel_gpt", "searched_layer",
                                  "llama_like", "context_parallel_llama",
                                  "context_parallel_sp_llama"])  # fmt: skip
def test_sharded_outputs_equal_the_unsharded_run(runs, name):
    for out, e in runs[name]["errors"].items():
        # fp32 with another summation order (other local matmul shapes pick other CPU
        # kernels): relative to the largest value, as the seeded values reach ~1e3
        assert e["vs_unsharded"] <= 1e-4 * e["scale"], (name, out, e)
        assert e["vs_numpy_fp64"] <= 1e-4 * e["scale"], (name, out, e)


def test_megatron_layer_collectives_match_xla_exactly(runs):
    fwd = runs["megatron_layer"]["forward"]
    assert fwd["ok"] and fwd["matches"] == 2, fwd["table"]
    assert _rows(fwd, "match") == [("all-reduce", "tp", 3072.0)] * 2
    assert fwd["predicted_bytes"] == fwd["observed_bytes"] == 6144.0


def test_sequence_parallel_layer_collectives_match_xla_exactly(runs):
    fwd = runs["sequence_parallel_layer"]["forward"]
    assert fwd["ok"] and fwd["matches"] == 4, fwd["table"]
    # the CPU backend's reduce-scatter is an all-reduce sliced by its users
    assert _rows(fwd, "match") == [("all-gather", "tp", 1536.0), ("reduce-scatter", "tp", 1536.0)
                                   ] * 2  # fmt: skip
    xla = [r["xla"].split()[0] for r in fwd["rows"]]
    assert xla == ["all-gather", "all-reduce"] * 2


def test_data_parallel_gradient_reduction_matches_in_bytes(runs):
    dp = runs["data_parallel_layer"]
    assert dp["forward"]["matches"] == 0 and dp["forward"]["ok"]
    grads = dp["gradients"]
    assert grads["ok"] and grads["matches"] == 16, grads["table"]  # one per parameter
    assert grads["predicted_bytes"] == grads["observed_bytes"]
    # XLA merged them into one tuple all-reduce, compared tensor by tensor
    assert len({r["xla"].split("[")[0] for r in grads["rows"]}) == 1


def test_megatron_gradient_reductions_over_dp_all_found(runs):
    grads = runs["megatron_layer"]["gradients"]
    assert grads["misses"] == 0 and grads["matches"] == 16, grads["table"]
    assert {r["axes"] for r in grads["rows"] if r["status"] == "match"} == {"dp"}
    # the extras are the backward's tensor-parallel all-reduces (not planned: forward only)
    assert {(r["kind"], r["axes"]) for r in grads["rows"] if r["status"] == "extra"} == {
        ("all-reduce", "tp")
    }


@pytest.mark.parametrize("name", ["megatron_gpt", "sequence_parallel_gpt", "llama_like"])
def test_whole_model_collectives_match_xla(runs, name):
    fwd = runs[name]["forward"]
    assert fwd["ok"], fwd["table"]
    assert fwd["predicted_bytes"] == fwd["observed_bytes"]
    # our stacked cross-entropy all-reduce (exp-sum and picked logit) is a pair in XLA
    split = [r for r in fwd["rows"] if r["status"] == "split"]
    assert [r["tensor"] for r in split] == ["head.token_loss"] * 2


def test_bf16_runs_and_xla_reduces_in_fp32(runs):
    bf16 = runs["megatron_gpt_bf16"]
    for e in bf16["errors"].values():
        assert e["vs_unsharded"] <= 1e-2 * e["scale"], e  # bf16 has 8 mantissa bits
    fwd = bf16["forward"]
    # XLA's CPU pipeline promotes bf16 all-reduces to fp32 (converts, then
    # to_apply=%add.clone_promoted): twice the bytes the plan charges for a bf16 activation
    misses = sorted(b for k, a, b in _rows(fwd, "miss") if b > 1000)
    extras = sorted(b for k, a, b in _rows(fwd, "extra") if b > 1000)
    assert misses == [1536.0] * 4 and extras == [3072.0] * 4, fwd["table"]


@pytest.mark.parametrize("name", ["context_parallel_llama", "context_parallel_sp_llama"])
def test_context_parallel_all_gathers_keys_and_values_over_cp(runs, name):
    run = runs[name]
    assert run["q_spec"] == ["dp", "cp", "tp"]  # [batch, sequence, features]
    fwd = run["forward"]
    # K and V of one layer, gathered whole on the sequence: batch 2/dp, seq 8, kv heads
    # 4/tp, head 8, fp32; a ring all-gather sends (cp - 1)/cp of it
    gathered = (2 // 2) * 8 * (4 // 2) * 8 * 4
    assert [r for r in _rows(fwd, "match") if r[1] == "cp"] == [
        ("all-gather", "cp", gathered / 2)
    ] * 2, fwd["table"]
    # the loss's mean over (cp, dp) is one all-reduce in the plan (2 x 3/4 x 4 B), one per
    # axis in XLA (2 x 1/2 x 4 B each); every other byte is matched
    assert _rows(fwd, "miss") == [("all-reduce", "cp,dp", 6.0)], fwd["table"]
    assert sorted(r[1:] for r in _rows(fwd, "extra")) == [("cp", 4.0), ("dp", 4.0)]
    assert fwd["predicted_bytes"] - 6.0 == fwd["observed_bytes"] - 8.0
