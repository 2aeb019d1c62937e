"""Runs MooreThreads' SimuMax (github.com/MooreThreads/SimuMax) on a list of jobs and prints
its step times as JSON. Run by ``bench/simumax_peer.py`` under an interpreter that imports
``simumax`` (its dependencies: pandas, tabulate, matplotlib, sympy); this project's
environment need not have them, and this file imports nothing of the project.

Input (the file named by argv[1]): a JSON list of jobs, each ``{"key", "model", "strategy",
"system"}`` with SimuMax's own model, strategy and system config dicts. Output (stdout, last
line): a JSON list of ``{"key", "step_time_s", "error", "seconds"}``; a job SimuMax refuses
gets its exception text in ``error`` and no step time.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path


def run_job(job: dict, tmp: Path) -> dict:
    from simumax.core.config import ModelConfig, StrategyConfig, SystemConfig
    from simumax.core.perf_llm import PerfLLM

    paths = {}
    for part in ("model", "strategy", "system"):
        paths[part] = tmp / f"{part}.json"
        paths[part].write_text(json.dumps(job[part]))
    t0 = time.perf_counter()
    perf = PerfLLM()
    perf.configure(
        strategy_config=StrategyConfig.init_from_config_file(str(paths["strategy"])),
        model_config=ModelConfig.init_from_config_file(str(paths["model"])),
        system_config=SystemConfig.init_from_config_file(str(paths["system"])),
    )
    # as its examples align with Megatron: the vocabulary padded to a multiple of 128
    perf.model_config.padded_vocab_size = True
    perf.model_config.make_vocab_size_divisible_by = 128
    perf.run_estimate()
    cost = perf.analysis_cost()  # its times come back as text ("8.63 s"); tokens/s as numbers
    tokens, per_gpu = cost.get("all_tokens_per_iter"), cost.get("throughput_per_accelerator")
    return {
        "key": job["key"],
        "step_time_s": float(tokens) / (float(per_gpu) * job["strategy"]["world_size"]),
        "error": None,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    out = []
    with tempfile.TemporaryDirectory() as d:
        for job in jobs:
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    out.append(run_job(job, Path(d)))
            except Exception as e:  # SimuMax's own refusal of a layout, kept as data
                out.append({"key": job["key"], "step_time_s": None,
                            "error": f"{type(e).__name__}: {e}"[:300],
                            "seconds": time.perf_counter() - t0})  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
