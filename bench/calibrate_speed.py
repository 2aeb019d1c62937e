"""Calibration speed: ``ex.calibrate`` on 20 runs, re-timing fixed layouts (the
default) against searching again at every trial value (``exact=True``).

Runs: 20 layouts of gpt3-1.3b on a100-80g (dp x tp x pp x microbatch, the set of
bench/accuracy.py's speed section) whose "measured" times are the model's under known
parameters plus 3% noise. Fitted: (a) two kernel knobs (matmul_efficiency_cap,
hbm_efficiency), (b) a kernel knob and a CostParams bandwidth knob (matmul_efficiency_cap,
cost.bandwidth_efficiency). Each timing starts from empty memos (``clear_all``) after the
runs are generated (which searches the layouts under the true parameters once), so both
paths pay for their own searches. Wall and CPU seconds, the median of ``REPEATS``; the
machine may be shared, CPU seconds are the steadier number. Target: under 2 s (wall).

    .venv/bin/python bench/calibrate_speed.py      # writes bench/results/calibrate_speed.json
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

import explorer as ex
from explorer.memo import clear_all
from explorer.training import TrainingParams
from explorer.training.calibration.fit import predict, with_values

OUT = Path(__file__).parent / "results" / "calibrate_speed.json"
REPEATS = 3
P = ex.ParallelConfig
LAYOUTS = tuple(
    ("gpt3-1.3b", P(dp=dp, tp=tp, pp=pp, microbatch_size=mb), 256, 2048)
    for dp, tp, pp in ((64, 1, 1), (32, 2, 1), (16, 4, 1), (8, 8, 1), (4, 16, 1), (16, 2, 2),
                       (8, 4, 2), (4, 8, 2), (2, 8, 4), (8, 2, 4))
    for mb in (1, 2)
)  # fmt: skip
CASES = {
    "kernel knobs": {"matmul_efficiency_cap": 0.55, "hbm_efficiency": 0.7},
    "a CostParams bandwidth knob": {"matmul_efficiency_cap": 0.55, "cost.bandwidth_efficiency": 0.6},
}  # fmt: skip


def synthetic(truth: dict[str, float], noise: float = 0.03, seed: int = 0):
    params = with_values(TrainingParams(), truth)
    rng = np.random.default_rng(seed)
    out = []
    for model, cfg, gb, seq in LAYOUTS:
        probe = ex.MeasuredRun(model, cfg, "a100-80g", gb, seq, 1.0)
        t = predict(probe, params).step_time_s * (1 + noise * rng.standard_normal())
        out.append(ex.MeasuredRun(model, cfg, "a100-80g", gb, seq, t, source=f"synthetic {seed}"))
    return out


def timed(truth: dict[str, float], exact: bool) -> dict:
    walls, cpus = [], []
    for _ in range(REPEATS):
        clear_all()
        runs = synthetic(truth)
        clear_all()
        w, c = time.perf_counter(), time.process_time()
        cal = ex.calibrate(runs, fit=tuple(truth), loo=False, exact=exact)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {
        "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
        "wall_s_all": walls, "evaluations": cal.evaluations, "rounds": cal.rounds,
        "redecided": list(cal.redecided), "fitted": cal.fitted,
        "median_abs_error_after": cal.median_error("fit"),
    }  # fmt: skip


def main() -> None:
    print(f"calibrate on {len(LAYOUTS)} runs (gpt3-1.3b, a100-80g), median of {REPEATS}, "
          "cold memos; target 2 s")  # fmt: skip
    result: dict[str, object] = {"runs": len(LAYOUTS), "repeats": REPEATS, "target_s": 2.0}
    for name, truth in CASES.items():
        fast, exact = timed(truth, exact=False), timed(truth, exact=True)
        diff = max(abs(fast["fitted"][k] / exact["fitted"][k] - 1) for k in truth)
        result[name] = {"truth": truth, "retimed": fast, "exact": exact,
                        "max_relative_difference_of_fitted_values": diff}  # fmt: skip
        print(f"  {name} ({', '.join(truth)}):")
        for label, r in (("re-timed (default)", fast), ("exact=True", exact)):
            print(f"    {label:19} {r['wall_s']:5.2f} s wall, {r['cpu_s']:5.2f} s CPU, "
                  f"{r['evaluations']} evaluations, {r['rounds']} round(s), "
                  f"fitted {', '.join(f'{v:.4f}' for v in r['fitted'].values())}")  # fmt: skip
        print(f"    fitted values differ by at most {diff:.1e} (relative)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
