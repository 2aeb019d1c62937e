"""Benchmark: the training planner against published runs and its speed targets.

Prints Narayanan et al. 2021 Table 1 against our predictions (each row's TP, PP,
schedule and recomputation; the same calibration for every row), whether the free
search finds a configuration at least as fast as each published one, then the speed
targets of the training planner measured in this run (wall and CPU seconds, ratio to the target;
cold = caches empty). Writes bench/results/training.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import explorer as ex
from explorer.memo import clear_all
from explorer.training import compare_megatron, megatron_flops_per_iteration
from explorer.training.calibration.published import MEGATRON_PARAMS

HW = "a100-80g"


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    # --- published vs predicted ------------------------------------------------------------
    comps = compare_megatron()
    rows = []
    print("Narayanan et al. 2021, Table 1 (A100-80GB, seq 2048) vs predicted, TFLOP/s per GPU")
    print(f"{'model':16s} {'GPUs':>5s} {'TP':>3s} {'PP':>3s} {'batch':>6s} {'paper':>6s} "
          f"{'ours':>6s} {'ratio':>6s} {'free plan':>9s}  our configuration")  # fmt: skip
    for c in comps:
        r = c.run
        free = ex.plan_training(r.model, r.gpus, HW, r.global_batch, r.seq, MEGATRON_PARAMS)
        flops = megatron_flops_per_iteration(ex.models.load(r.model), r.global_batch, r.seq)
        free_tflops = flops / free.sim.step_time_s / r.gpus / 1e12
        row = c.as_dict() | {
            "free_plan_tflops_per_gpu": free_tflops,
            "free_plan_config": str(free.config),
            "free_plan_at_least_published": free_tflops >= r.achieved_tflops_per_gpu,
            "free_plan_at_least_row_config": free.sim.step_time_s <= c.plan.sim.step_time_s,
        }
        rows.append(row)
        print(
            f"{r.model:16s} {r.gpus:>5d} {r.tp:>3d} {r.pp:>3d} {r.global_batch:>6d} "
            f"{r.achieved_tflops_per_gpu:>6.0f} {c.predicted_tflops_per_gpu:>6.1f} "
            f"{c.ratio:>6.3f} {free_tflops:>9.1f}  {c.plan.config}"
        )
    worst = max(abs(c.ratio - 1) for c in comps)
    print(f"worst |predicted/published - 1| = {worst:.3f} (README claims <= 0.06)")
    ok = all(r["free_plan_at_least_published"] and r["free_plan_at_least_row_config"]
             for r in rows)  # fmt: skip
    print(f"free plan at least as fast as every published configuration: {ok}")

    # --- speed targets --------------------------------------------------------------------
    clear_all()
    gpt3 = ex.models.load("gpt3-175b")
    plan, cold_w, cold_c = timed(lambda: ex.plan_training(gpt3, 1024, HW, 1536, 2048))
    _, warm_w, warm_c = timed(lambda: ex.plan_training(gpt3, 1024, HW, 1536, 2048))
    print(f"\nplan_training gpt3-175b on 1024 x {HW}: {plan.searched} configurations")
    print(
        f"  chosen {plan.config}: {plan.sim.tflops_per_device:.1f} TFLOP/s, MFU {plan.sim.mfu:.1%}"
    )
    counts = [8 * 2**k for k in range(10)]  # 8 .. 4096
    clear_all()
    curve, sc_w, sc_c = timed(
        lambda: ex.scaling_curve("gpt3-13b", HW, counts, global_batch=64, seq=2048)
    )
    print(curve.table())
    targets = {
        "plan_training_gpt3_175b_1024_cold_s": (cold_w, cold_c, 5.0),
        "plan_training_gpt3_175b_1024_warm_s": (warm_w, warm_c, 5.0),
        "scaling_curve_8_to_4096_cold_s": (sc_w, sc_c, 10.0),
    }
    print("\nspeed targets (wall s / cpu s, ratio of wall to target)")
    speed = {}
    for k, (w, c, target) in targets.items():
        speed[k] = {"wall_s": w, "cpu_s": c, "target_s": target, "ratio": w / target}
        print(f"  {k}: {w:.2f} / {c:.2f} s, ratio {w / target:.2f} "
              f"({'met' if w <= target else 'MISSED'})")  # fmt: skip
    out = Path(__file__).parent / "results" / "training.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "megatron_2021_table1": rows, "worst_relative_error": worst,
        "free_plan_at_least_published": ok, "speed": speed,
        "scaling_curve": curve.records(),
    }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
