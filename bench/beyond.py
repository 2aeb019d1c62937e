"""Benchmark "beyond one homogeneous cluster" (pools, Pareto fronts, re-planning, WANs): prints four lines of numbers and
writes bench/results/beyond.json.

1. The Pareto front of gpt3-175b on 1024 A100s (``plan_training(objectives=...)``, timed;
   `bench/pareto_front.py`). Target: under 10 s.
2. Re-planning after losing 1 of 128 nodes (gpt3-175b on 1024 A100s, global batch 1536):
   ``ex.replan(plan, ex.NodeLoss(1))`` timed in a process that has planned the 1024-device
   job but not the smaller one (the replan plans it: cold for that device count); replan
   screens the 3 largest usable counts (every tp) and plans the best 2 structures in full.
   Beside it: the full search of those counts (every tp, no screen; its gap to replan's
   step) and the old tp on the largest count alone. Target: under 2 s.
   Also the migration (bytes, switch time).
3. A 50/50 H100/A100 job (512 + 512) against the best homogeneous plan on the 512 H100s
   alone: step time and cost per step (``ex.compare_hetero``).
4. Across two datacenters (dgx-h100-2dc, gpt3-175b on 2,048 GPUs): where the axes go, the
   gradient all-reduce flat vs hierarchical, and syncing every H steps (local SGD) with its
   caveat.

Times are wall seconds of this run on this machine (2 shared cores: other work running
beside it slows it; the load average is printed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import explorer as ex
from explorer.training.datacenters import gradient_sync, placement
from explorer.training.local_sgd import local_sgd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pareto_front import pareto_line  # noqa: E402  (bench/ sibling module)

MODEL, HW, DEVICES, BATCH, SEQ = "gpt3-175b", "a100-80g", 1024, 1536, 2048
REPLAN_TARGET_S = 2.0


def replan_line() -> dict[str, object]:
    plan = ex.plan_training(MODEL, devices=DEVICES, hardware=HW, global_batch=BATCH, seq=SEQ)
    t0 = time.perf_counter()
    r = ex.replan(plan, ex.NodeLoss(1))
    took = time.perf_counter() - t0
    counts = [int(t.split(" ")[0]) for t in r.tried]
    # references: every screened count planned in full (every tp), and the largest usable
    # count with the old tp alone (what replan did before the screen)
    t0 = time.perf_counter()
    full = min(
        (ex.plan_training(MODEL, devices=n, hardware=HW, global_batch=BATCH, seq=SEQ)
         for n in counts),
        key=lambda p: p.sim.step_time_s,
    )  # fmt: skip
    full_s = time.perf_counter() - t0
    alone = ex.plan_training(MODEL, devices=counts[0], hardware=HW, global_batch=BATCH, seq=SEQ,
                             space=ex.training.SearchSpace(tp=(plan.config.tp,)))  # fmt: skip
    gap = r.step_time_s / full.sim.step_time_s - 1
    m = r.migration
    out = {
        "old_config": str(plan.config), "old_step_s": plan.sim.step_time_s,
        "replan_s": round(took, 3), "target_s": REPLAN_TARGET_S,
        "meets_target": took < REPLAN_TARGET_S,
        "new_devices": r.new.devices, "new_config": str(r.new.config),
        "new_step_s": r.step_time_s, "switch_s": r.switch_s, "tried": list(r.tried),
        "migration": m.as_dict(),
        "full_search_s": round(full_s, 3), "full_search_devices": full.devices,
        "full_search_config": str(full.config), "full_search_step_s": full.sim.step_time_s,
        "gap_to_full_search": gap,
        "old_tp_largest_count_config": str(alone.config),
        "old_tp_largest_count_step_s": alone.sim.step_time_s,
    }  # fmt: skip
    out["line"] = (
        f"Replan after losing 1 of 128 nodes ({MODEL}, {DEVICES} x {HW}): {took:.2f} s "
        f"(target {REPLAN_TARGET_S:g} s: {'YES' if took < REPLAN_TARGET_S else 'NO'}); "
        f"{plan.config} ({plan.sim.step_time_s:.2f} s) -> {r.new.config} on {r.new.devices} "
        f"devices ({r.step_time_s:.2f} s; screened {', '.join(map(str, counts))} devices); "
        f"migration {m.total_bytes / 1e9:,.0f} GB, busiest device {m.max_sent_bytes / 1e9:.1f}"
        f" GB, switch {r.switch_s:.2f} s, {m.checkpoint_bytes / 1e9:.1f} GB from the "
        f"checkpoint. Full search of those counts (every tp, no screen): {full_s:.2f} s -> "
        f"{full.config} on {full.devices} ({full.sim.step_time_s:.2f} s, gap {gap:+.1%}); "
        f"old tp on {counts[0]} alone: {alone.sim.step_time_s:.2f} s"
    )
    return out


def hetero_line() -> dict[str, object]:
    pools = [ex.Pool("h100-sxm", 512), ex.Pool("a100-80g", 512)]
    t0 = time.perf_counter()
    c = ex.compare_hetero(MODEL, pools, global_batch=BATCH, seq=SEQ)
    took = time.perf_counter() - t0
    h, o = c.hetero, c.homogeneous
    out = {
        "hetero_mode": h.mode, "hetero_step_s": h.step_time_s,
        "hetero_cost_per_step": h.cost_per_step,
        "h100_alone_config": str(o.config), "h100_alone_step_s": o.sim.step_time_s,
        "h100_alone_cost_per_step": c.homogeneous_cost_per_step,
        "speedup": c.speedup, "cost_ratio": c.cost_ratio, "time_s": round(took, 3),
        "table": c.table(),
    }  # fmt: skip
    ratio = c.cost_ratio
    out["line"] = (
        f"512 H100 + 512 A100 ({h.mode}) vs 512 H100 alone ({MODEL}, batch {BATCH}): step "
        f"{h.step_time_s:.2f} s vs {o.sim.step_time_s:.2f} s ({c.speedup:.2f}x), cost per "
        f"step {_money(h.cost_per_step)} vs {_money(c.homogeneous_cost_per_step)} USD"
        + (f" (ratio {ratio:.2f})" if ratio is not None else "")
        + f"; {took:.1f} s"
    )
    return out


def cross_dc_line() -> dict[str, object]:
    t0 = time.perf_counter()
    plan = ex.plan_training(MODEL, devices=2048, hardware="dgx-h100-2dc", global_batch=BATCH,
                            seq=SEQ)  # fmt: skip
    took = time.perf_counter() - t0
    where, sync, lsgd = placement(plan), gradient_sync(plan), local_sgd(plan, (1, 10, 100, 500))
    out = {
        "config": str(plan.config), "step_s": plan.sim.step_time_s, "plan_s": round(took, 3),
        "axes_across_wan": list(where.crossing), "levels": {a: list(v) for a, v in where.levels},
        "gradient_sync": vars(sync), "local_sgd": lsgd.as_dict(),
    }  # fmt: skip
    h500 = lsgd.rows[-1]
    out["line"] = (
        f"Two datacenters (dgx-h100-2dc, {MODEL} on 2048): {plan.config}, step "
        f"{plan.sim.step_time_s:.2f} s; across the WAN: {', '.join(where.crossing) or 'none'}; "
        f"gradient all-reduce flat {sync.flat_s:.2f} s vs hierarchical "
        f"{sync.hierarchical_s:.2f} s (WAN {sync.wan_s:.2f} s); sync every 500 steps saves "
        f"{h500.saving_s:.2f} s per step (convergence not modelled: DiLoCo, arXiv:2311.08105)"
    )
    return out


def _money(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def main() -> None:
    load = os.getloadavg()[0]
    results = {"load_average_1min": load}
    # the Pareto line first: its first plan of the 1024-device job is the cold one
    for key, fn in (("pareto", pareto_line), ("replan", replan_line),
                    ("hetero", hetero_line), ("cross_dc", cross_dc_line)):  # fmt: skip
        results[key] = fn()
        print(results[key]["line"], flush=True)
    results["local_sgd_table"] = local_sgd(
        ex.plan_training(
            MODEL, devices=2048, hardware="dgx-h100-2dc", global_batch=BATCH, seq=SEQ
        )  # fmt: skip
    ).table()
    print(results["local_sgd_table"])
    print(results["hetero"]["table"])
    print(f"(load average {load:.1f} on {os.cpu_count()} cores at the start)")
    path = Path(__file__).resolve().parent / "results" / "beyond.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
