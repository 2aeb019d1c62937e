"""Benchmark: tracing published models from their config.json on the meta device.

Targets (on this 2-core machine): Llama-3-70B traced in under 20 s, Mixtral-8x22B
under 20 s, DeepSeek-V3 under 60 s; measured with from_hf's default (the first layers
traced, the last copied for the rest) and with every layer traced by torch.export; then
the plan time of the traced graph (recursive programming on a dp x tp mesh of H100s). The configs are the
published config.json values in datasets/hf/ (one file per Hugging Face repository; no
network; DeepSeek-V3 without its multi-token-prediction layer, which transformers does not
build).
Prints a table and writes bench/results/import.json. One run per model (a trace of a
671B model is a single measurement; the machine is shared, so treat times as +-20%).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import explorer as ex
from explorer.ir import OpGroup

HF_DIR = Path(__file__).resolve().parents[1] / "datasets" / "hf"


def published(repo: str) -> dict:
    """The published config.json of ``repo`` (datasets/hf/owner__name.json)."""
    return json.loads((HF_DIR / f"{repo.replace('/', '__')}.json").read_text())


# (repo, config, trace target in s, mesh for the plan: enough model parallelism to fit)
CASES = (
    ("meta-llama/Meta-Llama-3-70B", 20.0, {"dp": 8, "tp": 8}),
    ("mistralai/Mixtral-8x22B-v0.1", 20.0, {"dp": 8, "tp": 8}),
    ("deepseek-ai/DeepSeek-V3", 60.0, {"dp": 4, "tp": 64}),
)
SEQ = 4096
HARDWARE = "h100-sxm"
PLAN_LIMIT_S = 120.0


def main() -> None:
    # warm-up: the first trace of a session imports transformers' modeling code and torch's
    # export machinery (seconds); it is not part of any model's time
    ex.models.from_hf({**published(CASES[0][0]), "num_hidden_layers": 2, "hidden_size": 64,
                       "intermediate_size": 128, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "vocab_size": 128}, seq=8)  # fmt: skip
    rows = []
    for repo, target, mesh_axes in CASES:
        config = published(repo)
        t = time.perf_counter()
        graph = ex.models.from_hf(config, batch=1, seq=SEQ)
        trace_s = time.perf_counter() - t
        t = time.perf_counter()
        whole = ex.models.from_hf(config, batch=1, seq=SEQ, reuse_layers=False)
        whole_s = time.perf_counter() - t
        assert (whole.num_params(), len(whole)) == (graph.num_params(), len(graph))
        data_opaque = sorted({o.target for o in graph.report.opaque if not o.static})
        mesh = ex.Mesh(mesh_axes, hardware=ex.hardware.load(HARDWARE))
        t = time.perf_counter()
        try:
            plan = ex.search(graph, mesh, method="recursive_programming",
                             time_limit_s=PLAN_LIMIT_S)  # fmt: skip
            status = plan.status
        except ex.ExplorerError as e:
            status = f"refused: {e}"
        plan_s = time.perf_counter() - t
        matmul = sum(graph.node_flops(n.name) for n in graph.ops
                     if graph.group(n.name) is OpGroup.CONTRACTION)  # fmt: skip
        rows.append({
            "model": repo, "nodes": len(graph), "params": graph.num_params(),
            "matmul_flops": matmul, "trace_s": round(trace_s, 2), "target_s": target,
            "trace_all_layers_s": round(whole_s, 2), "plan_s": round(plan_s, 2),
            "plan_status": status, "opaque_on_data_path": data_opaque, "seq": SEQ,
            "mesh": mesh_axes, "hardware": HARDWARE,
        })  # fmt: skip
        print(f"{repo}: traced in {trace_s:.1f} s (target {target:.0f} s; every layer traced: "
              f"{whole_s:.1f} s), {len(graph)} nodes, planned in {plan_s:.1f} s "
              f"({status})", flush=True)  # fmt: skip
    print(f"\n{'model':30s} {'nodes':>7s} {'params':>16s} {'trace s':>8s} {'target':>7s} "
          f"{'all layers s':>12s} {'plan s':>7s}")  # fmt: skip
    for r in rows:
        print(f"{r['model']:30s} {r['nodes']:7d} {r['params']:16,d} {r['trace_s']:8.1f} "
              f"{r['target_s']:7.0f} {r['trace_all_layers_s']:12.1f} {r['plan_s']:7.1f}")  # fmt: skip
    out = Path(__file__).parent / "results" / "import.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
