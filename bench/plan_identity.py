"""Plans compared exactly before and after a speed change of the planning path.

``--save FILE`` writes, for each job below, the chosen configuration, the whole SimResult
``repr``, the alternatives and the over-memory lists (``repr`` of each) and the counts of
estimates made and configurations pruned; ``--check FILE`` plans the same jobs again and
reports every field that differs (exit status 1 when any does), the counts side by side
(not compared: branch and bound changes them and must change nothing else). The jobs run in one process in this order, so
a plan made after another (gpt3-175b 512 after 1024, as the dashboard re-plans) is compared
with whatever the caches hold by then; ``--cold`` clears every memo before each job.

A speed change of `plan_training` (memoized link costs, cached bands, ...) must leave every
field equal. Not a benchmark: the times printed are only there to see the jobs ran.

Run: ``.venv/bin/python bench/plan_identity.py --save /tmp/before.json`` on the old code,
then ``--check /tmp/before.json`` on the new.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import explorer as ex  # noqa: E402
from explorer.memo import clear_all  # noqa: E402

#: the counts of the search, printed side by side but not compared: skipping configurations
#: whose step-time floor is above the kept plans (`planning.bounded`) changes them and nothing
#: else
COUNTS = ("searched", "pruned")
NO_LIMIT_S = 1e9  # the search's time limit would make a plan depend on the machine's load


def jobs() -> list[tuple[str, dict]]:
    """(name, plan_training keyword arguments) of every job compared."""
    return [
        ("gpt2/8 a100", dict(cfg="gpt2", devices=8, hardware="a100-80g", global_batch=64,
                             seq=1024)),
        ("gpt3-175b/1024 a100", dict(cfg="gpt3-175b", devices=1024, hardware="a100-80g",
                                     global_batch=1536, seq=2048)),
        ("gpt3-175b/512 a100", dict(cfg="gpt3-175b", devices=512, hardware="a100-80g",
                                    global_batch=1536, seq=2048)),
        ("llama3-405b/8192 h100", dict(cfg="llama3-405b", devices=8192, hardware="h100-sxm",
                                       global_batch=2048, seq=8192)),
        ("deepseek-v3/1024 h100", dict(cfg="deepseek-v3", devices=1024, hardware="h100-sxm",
                                       global_batch=4096, seq=4096)),
        ("qwen3-30b-a3b/64 h100", dict(cfg="qwen3-30b-a3b", devices=64, hardware="h100-sxm",
                                       global_batch=512, seq=4096)),
        ("mixtral-8x7b/128 h100", dict(cfg="mixtral-8x7b", devices=128, hardware="h100-sxm",
                                       global_batch=512, seq=4096)),
        ("llama3-70b/1024 h100 cp16 128K", dict(
            cfg="llama3-70b", devices=1024, hardware="h100-sxm", global_batch=64, seq=131072,
            constraints=[ex.Fix("cp", 16)])),
        ("gpt3-175b/1024 a100 Fix pp8 Bound tp<=4", dict(
            cfg="gpt3-175b", devices=1024, hardware="a100-80g", global_batch=1536, seq=2048,
            constraints=[ex.Fix("pp", 8), ex.Bound("tp", max=4)])),
    ]  # fmt: skip


def snapshot(plan) -> dict:
    """Every compared field of a plan, as text."""
    return {
        "config": repr(plan.config), "sim": repr(plan.sim),
        "alternatives": [repr(c) for c in plan.alternatives],
        "over_memory": [repr(c) for c in plan.over_memory], "searched": plan.searched,
        "pruned": plan.pruned,
    }  # fmt: skip


def run(cold: bool, only: set[str] | None) -> dict:
    out = {}
    for name, kw in jobs():
        if only and name not in only:
            continue
        if cold:
            clear_all()
        t0 = time.perf_counter()
        plan = ex.plan_training(kw.pop("cfg"), time_limit_s=NO_LIMIT_S, **kw)
        print(f"  {name}: {plan.config} ({time.perf_counter() - t0:.2f} s)", flush=True)
        out[name] = snapshot(plan)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path)
    ap.add_argument("--check", type=Path)
    ap.add_argument("--cold", action="store_true", help="clear every memo before each job")
    ap.add_argument("--only", action="append", help="a job's name (repeatable)")
    a = ap.parse_args(argv)
    got = run(a.cold, set(a.only) if a.only else None)
    if a.save:
        a.save.write_text(json.dumps(got, indent=1))
        print(f"saved {len(got)} plans to {a.save}")
    if a.check:
        want = json.loads(a.check.read_text())
        bad = [
            (job, key) for job in got for key in got[job]
            if key not in COUNTS and got[job][key] != want[job].get(key)
        ]  # fmt: skip
        for job, key in bad:
            print(f"DIFFERS: {job}: {key}")
        for job in got:  # the counts are reported, not compared: pruning changes them
            was = f"{want[job]['searched']} estimates, {want[job].get('pruned', 0)} pruned"
            now = f"{got[job]['searched']} estimates, {got[job]['pruned']} pruned"
            print(f"  {job}: {was} -> {now}")
        print(f"{len(got) - len({j for j, _ in bad})}/{len(got)} plans identical")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
