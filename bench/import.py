"""Benchmark: tracing published models from their config.json on the meta device.

Targets (issue 16, this 2-core machine): Llama-3-70B traced in under 20 s, Mixtral-8x22B
under 20 s, DeepSeek-V3 under 60 s; measured with from_hf's default (the first layers
traced, the last copied for the rest) and with every layer traced by torch.export; then
the plan time of the traced graph (recursive programming on a dp x tp mesh of H100s). The configs are the
published config.json values of the Hugging Face repositories named below (no network).
Prints a table and writes bench/results/import.json. One run per model (a trace of a
671B model is a single measurement; the machine is shared, so treat times as +-20%).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import explorer as ex
from explorer.ir import OpGroup

#: meta-llama/Meta-Llama-3-70B config.json
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
    "bos_token_id": 128000, "eos_token_id": 128001,
}  # fmt: skip

#: mistralai/Mixtral-8x22B-v0.1 config.json
MIXTRAL_8X22B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 6144,
    "intermediate_size": 16384, "num_hidden_layers": 56, "num_attention_heads": 48,
    "num_key_value_heads": 8, "vocab_size": 32768, "max_position_embeddings": 65536,
    "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
    "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.001, "torch_dtype": "bfloat16", "bos_token_id": 1,
    "eos_token_id": 2,
}  # fmt: skip

#: deepseek-ai/DeepSeek-V3 config.json (the multi-token-prediction layer,
#: num_nextn_predict_layers=1, is not part of the transformers model)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "vocab_size": 129280, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "hidden_act": "silu", "tie_word_embeddings": False,
    "attention_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
}  # fmt: skip

# (repo, config, trace target in s, mesh for the plan: enough model parallelism to fit)
CASES = (
    ("meta-llama/Meta-Llama-3-70B", LLAMA3_70B, 20.0, {"dp": 8, "tp": 8}),
    ("mistralai/Mixtral-8x22B-v0.1", MIXTRAL_8X22B, 20.0, {"dp": 8, "tp": 8}),
    ("deepseek-ai/DeepSeek-V3", DEEPSEEK_V3, 60.0, {"dp": 4, "tp": 64}),
)
SEQ = 4096
HARDWARE = "h100-sxm"
PLAN_LIMIT_S = 120.0


def main() -> None:
    # warm-up: the first trace of a session imports transformers' modeling code and torch's
    # export machinery (seconds); it is not part of any model's time
    ex.models.from_hf({**LLAMA3_70B, "num_hidden_layers": 2, "hidden_size": 64,
                       "intermediate_size": 128, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "vocab_size": 128}, seq=8)  # fmt: skip
    rows = []
    for repo, config, target, mesh_axes in CASES:
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
