"""The Pareto-front line of bench/beyond.py : ``plan_training(...,
objectives=...)`` for gpt3-175b on 1024 A100s, timed, with the front's size and the cost of
the front over the plain plan.

``pareto_line()`` returns a dict (the numbers and a printable ``line``); bench/beyond.py
imports it (bench/ is on ``sys.path`` when a bench script runs). Run alone:
``.venv/bin/python bench/pareto_front.py``.

Timing: the first call is the one the target is about (``plan_s``: the search, the top-3
simulations and the front, in a process that has not planned this job yet when run alone);
then ``rounds`` interleaved rounds of the plain plan and the multi-objective plan on warm
caches (each once per round, so machine noise hits both alike), and ``front_overhead_s`` is
the difference of their fastest rounds.
"""

from __future__ import annotations

import time

import explorer as ex

__all__ = ["pareto_line", "TARGET_S"]

TARGET_S = 10.0  # the target for the whole multi-objective plan
OBJECTIVES = ("step_time", "memory", "communication", "cost")


def pareto_line(
    model: str = "gpt3-175b", devices: int = 1024, hardware: str = "a100-80g",
    global_batch: int = 1536, seq: int = 2048, objectives: tuple[str, ...] = OBJECTIVES,
    rounds: int = 2,
) -> dict[str, object]:  # fmt: skip
    """Plan ``model`` with ``objectives`` and time it; returns the numbers and a ``line``."""
    job = {"devices": devices, "hardware": hardware, "global_batch": global_batch, "seq": seq}
    t0 = time.perf_counter()
    plan = ex.plan_training(model, **job, objectives=objectives)
    first = time.perf_counter() - t0
    plains, agains = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        plain = ex.plan_training(model, **job)
        plains.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ex.plan_training(model, **job, objectives=objectives)
        agains.append(time.perf_counter() - t0)
    plain_s, again = min(plains), min(agains)
    f = plan.pareto
    out = {
        "model": model, "devices": devices, "hardware": hardware,
        "objectives": list(objectives), "plan_s": round(first, 3),
        "plain_plan_warm_s": round(plain_s, 3), "pareto_plan_warm_s": round(again, 3),
        "front_overhead_s": round(again - plain_s, 3),
        "front_compute_s": round(f.compute_time_s, 4),
        "fitting": len(f.points), "front": len(f.front), "dominated": f.n_dominated,
        "ties": len(f.ties), "same_config_as_plain": plan.config == plain.config,
        "fastest_is_config": f.fastest.config == plan.config,
        "target_s": TARGET_S, "meets_target": first < TARGET_S,
    }  # fmt: skip
    out["line"] = (
        f"Pareto front, {model} on {devices} x {hardware} ({', '.join(objectives)}): "
        f"{first:.2f} s (target {TARGET_S:g} s: {'YES' if first < TARGET_S else 'NO'}); "
        f"{len(f.front)} of {len(f.points)} fitting plans on the front, {f.n_dominated} "
        f"dominated; warm plan {plain_s:.2f} s plain vs {again:.2f} s with the front "
        f"({f.compute_time_s * 1e3:.0f} ms for the domination test)"
    )
    return out


if __name__ == "__main__":
    print(pareto_line()["line"])
