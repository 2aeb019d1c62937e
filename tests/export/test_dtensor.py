"""PyTorch DTensor: the parallelize plan from a plan, and real torchrun runs on CPU (gloo,
4 processes) whose outputs equal the unsharded module's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import explorer as ex
from explorer.export import ExportError, megatron_assignment, to_dtensor

ROOT = Path(__file__).parents[2]
GPT = ex.models.ModelConfig(
    name="tiny-gpt", arch="decoder", hidden_size=64, num_layers=2, num_heads=4, vocab_size=128,
    max_seq_len=16, dtype="fp32",
)  # fmt: skip


def _plan(shape, sp):
    mesh = ex.Mesh(shape)
    g = ex.models.build(GPT, batch=4, seq=8)
    return to_dtensor(GPT, megatron_assignment(g, mesh, sequence_parallel=sp), mesh, batch=4,
                      seq=8)  # fmt: skip


def test_tensor_parallel_styles_golden():
    plan = _plan({"tp": 4}, False)
    assert str(plan).splitlines()[:8] == [
        "DeviceMesh {'tp': 4}, parallelize_module over 'tp':",
        "  'layers.0.attn.q': ColwiseParallel()",
        "  'layers.0.attn.k': ColwiseParallel()",
        "  'layers.0.attn.v': ColwiseParallel()",
        "  'layers.0.attn.o': RowwiseParallel()",
        "  'layers.0.mlp.fc1': ColwiseParallel()",
        "  'layers.0.mlp.fc2': RowwiseParallel()",
        "  'layers.1.attn.q': ColwiseParallel()",
    ]
    assert plan.unmapped == ("head.logits", "head.token_loss")  # the vocab-parallel head
    assert plan.command("p.json") == (
        "torchrun --nproc_per_node=4 -m explorer.export.dtensor_launch --spec p.json"
    )


def test_sequence_parallel_styles():
    plan = _plan({"dp": 2, "tp": 2}, True)
    styles = {s.path: str(s) for s in plan.styles}
    assert plan.sequence_parallel and plan.dp == "dp"
    assert styles["layers.0.attn.norm"].endswith("SequenceParallel(use_local_output=False)")
    assert styles["layers.0.attn.q"].endswith("ColwiseParallel(input_layouts=Shard(1))")
    assert styles["layers.1.mlp.fc2"].endswith(
        "RowwiseParallel(output_layouts=Shard(1), use_local_output=False)"
    )
    assert plan.styles[0].style == "PrepareModuleInput"
    assert plan.styles[-1].style == "PrepareModuleOutput"


def test_spec_round_trips(tmp_path):
    plan = _plan({"tp": 4}, True)
    raw = json.loads(plan.write(tmp_path / "p.json", seed=3).read_text())
    assert raw["seed"] == 3
    from explorer.export import DTensorPlan

    assert DTensorPlan.from_dict(raw) == plan


def test_graph_without_config_is_refused():
    g = ex.models.build(GPT, batch=4, seq=8)
    with pytest.raises(ExportError, match="ModelConfig or zoo name"):
        to_dtensor(g, {}, ex.Mesh({"tp": 4}), batch=4, seq=8)


CASES = {
    "megatron-tp4": ({"tp": 4}, False),
    "sequence-parallel-dp2-tp2": ({"dp": 2, "tp": 2}, True),
}


@pytest.fixture(scope="module")
def torchrun(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """Both plans run by one torchrun launch (4 gloo processes): starting the processes and
    importing torch in each costs most of a launch, so the cases share one."""
    if importlib.util.find_spec("torch") is None:  # found, not imported: torchrun's ranks use it
        pytest.skip("the torch extra is not installed: pip install .[torch]")
    tmp = tmp_path_factory.mktemp("dtensor")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4",
           "-m", "explorer.export.dtensor_launch"]  # fmt: skip
    for name, (shape, sp) in CASES.items():
        spec = _plan(shape, sp).write(tmp / f"{name}.json")
        cmd += ["--spec", str(spec), "--out", str(tmp / f"{name}.result.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    results = {name: json.loads(out.read_text()) for name in CASES
               if (out := tmp / f"{name}.result.json").exists()}  # fmt: skip
    return proc, results


def test_torchrun_launch_exits_cleanly(torchrun):
    proc, results = torchrun
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert set(results) == set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_torchrun_matches_unsharded(torchrun, name):
    proc, results = torchrun
    assert name in results, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = results[name]
    assert result["ok"] and result["world_size"] == 4, result
    counts = result["comm_counts"]
    if CASES[name][1]:  # DTensor gathers per module: q, k and v each gather the norm's output
        assert counts == {"all_gather_into_tensor": 9, "reduce_scatter_tensor": 4}
    else:  # two all-reduces per layer, as planned
        assert counts == {"all_reduce": 4}
