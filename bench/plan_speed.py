"""Benchmark: CPU time of a re-plan, this checkout against an older commit, side by side.

The dashboard re-plans GPT-3 175B when the user changes the device count: ``plan_training``
on 512 A100s right after 1024 in the same process (caches warm from the first plan, the
new meshes cold). ScalingView re-plans a curve when the user changes the batch: the weak
curve over 256, 512 and 1024 A100s at batch 3072 right after the strong one at 1536 (each
point planned for its chosen configuration alone, none in the memo). Each round runs two
fresh processes one after the other, the older commit's code (``git archive COMMIT``, unpacked in a temporary folder) and this checkout's,
and each times the second plan with ``time.thread_time`` (CPU seconds of the planning
thread: less sensitive to other processes than wall time, not insensitive). Prints each
round, the medians, the ratio, and the estimates made / configurations skipped; the plans
must be the same configuration (``bench/plan_identity.py`` compares them field by field).

Run: ``.venv/bin/python bench/plan_speed.py [--against COMMIT] [--rounds N]``; the default
commit is the one before the search's branch and bound. Writes nothing unless ``--write``
(bench/results/plan_speed.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE_BRANCH_AND_BOUND = "3e287f4"

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import explorer as ex
kw = dict(hardware="a100-80g", global_batch=1536, seq=2048, time_limit_s=1e9)
ex.plan_training("gpt3-175b", devices=1024, **kw)
c0 = time.thread_time()
p = ex.plan_training("gpt3-175b", devices=512, **kw)
cpu = time.thread_time() - c0
# ScalingView's cold change: the weak curve 256-1024 at a new batch after the strong one
counts = [256, 512, 1024]
ex.scaling_curve("gpt3-175b", "a100-80g", counts, global_batch=1536, seq=2048, mode="strong")
c0 = time.thread_time()
curve = ex.scaling_curve("gpt3-175b", "a100-80g", counts, global_batch=3072, seq=2048,
                         mode="weak")
curve_cpu = time.thread_time() - c0
print(json.dumps({"cpu_s": cpu, "config": str(p.config), "searched": p.searched,
                  "pruned": getattr(p, "pruned", 0), "curve_cpu_s": curve_cpu,
                  "curve": [str(q.config) for q in curve.points]}))
"""


def one(tree: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=BEFORE_BRANCH_AND_BOUND, help="the older commit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="write bench/results/plan_speed.json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", a.against], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        print("gpt3-175b, 512 x a100-80g planned after 1024 (CPU s of the planning thread)")
        for i in range(a.rounds):
            for name, tree in (("old", old_tree), ("new", ROOT)):
                r = one(tree)
                runs[name].append(r)
                print(f"  round {i + 1} {name}: {r['cpu_s']:.3f} s, {r['searched']} estimates, "
                      f"{r['pruned']} pruned: {r['config']}")  # fmt: skip
    med = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    same = {r["config"] for v in runs.values() for r in v}
    print(f"median: {a.against} {med['old']:.3f} s, this checkout {med['new']:.3f} s: "
          f"{med['old'] / med['new']:.2f}x; same configuration: {len(same) == 1}")  # fmt: skip
    curve = {k: statistics.median(r["curve_cpu_s"] for r in v) for k, v in runs.items()}
    same_curve = {tuple(r["curve"]) for v in runs.values() for r in v}
    print(f"weak scaling curve 256-1024 at batch 3072 after the strong one at 1536 (CPU s): "
          f"{a.against} {curve['old']:.3f} s, this checkout {curve['new']:.3f} s: "
          f"{curve['old'] / curve['new']:.2f}x; same configurations: "
          f"{len(same_curve) == 1}")  # fmt: skip
    if a.write:
        out = {"against": a.against, "median_cpu_s": med, "ratio": med["old"] / med["new"],
               "curve_median_cpu_s": curve, "curve_ratio": curve["old"] / curve["new"],
               "runs": runs}  # fmt: skip
        (ROOT / "bench" / "results" / "plan_speed.json").write_text(json.dumps(out, indent=1))
    return 0 if len(same) == 1 and len(same_curve) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
