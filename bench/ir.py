"""Benchmark: building, printing and exporting the largest zoo graphs.

Targets: the full forward graph of llama3-405b (126 layers) builds in under 1 s;
its text form and networkx export take under 2 s. Prints a table and writes
bench/results/ir.json. Times are the best of a few runs (machines are noisy).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import explorer as ex


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rows = []
    for name in ("gpt3-175b", "llama3-405b", "megatron-1008b"):
        cfg = ex.models.load(name)
        graph = ex.models.build(cfg, batch=8, seq=2048)
        t_build = best_of(lambda cfg=cfg: ex.models.build(cfg, batch=8, seq=2048))
        t_text = best_of(lambda g=graph: str(g))
        t_nx = best_of(lambda g=graph: g.to_networkx())
        rows.append(
            {"model": name, "nodes": len(graph), "build_s": t_build, "text_s": t_text,
             "networkx_s": t_nx, "text_plus_networkx_s": t_text + t_nx}
        )  # fmt: skip
    print(f"{'model':16s} {'nodes':>6s} {'build s':>8s} {'text s':>8s} {'nx s':>8s}")
    for r in rows:
        print(
            f"{r['model']:16s} {r['nodes']:6d} {r['build_s']:8.3f} {r['text_s']:8.3f} "
            f"{r['networkx_s']:8.3f}"
        )
    target = next(r for r in rows if r["model"] == "llama3-405b")
    checks = {
        "llama3-405b build / 1 s target": target["build_s"] / 1.0,
        "llama3-405b text+networkx / 2 s target": target["text_plus_networkx_s"] / 2.0,
    }
    for k, v in checks.items():
        print(f"{k}: ratio {v:.2f} ({'met' if v < 1 else 'MISSED'})")
    out = Path(__file__).parent / "results" / "ir.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "ratios_to_target": checks}, indent=2) + "\n")


if __name__ == "__main__":
    main()
