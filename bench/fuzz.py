"""Benchmark (printed, not timed): the fuzz suite's outcomes per interface.

Runs each interface of ``tests/fuzz`` for a fixed number of derandomized examples and counts
the cases tried, the named errors (``ExplorerError`` subclasses; CLI exit code 2 with one
line) and the valid results. A builtin exception or a hang is a failure: it is counted,
its first message printed, and the script exits with code 1. Writes bench/results/fuzz.json.

    python bench/fuzz.py [EXAMPLES_PER_INTERFACE]   # default 200
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from tests.fuzz.interfaces import INTERFACES, outcome  # noqa: E402
from tests.fuzz.test_fuzz_core import CORE_INTERFACES  # noqa: E402
from tests.fuzz.test_fuzz_later import LATER_INTERFACES  # noqa: E402
from tests.fuzz.test_fuzz_newer import NEWER_INTERFACES  # noqa: E402
from tests.fuzz.test_fuzz_ops import OPS_INTERFACES  # noqa: E402

#: The loaders, ModelConfig, Mesh and the CLI, then the core values and trace import, then
#: ``ex.F`` ops eagerly and under ``@jit``, then the newer interfaces (re-planning, pools, jit
#: options, calibration files, datacenters, offload), then the importers, Megatron's
#: arguments and split helpers, migration, ``calibrate``, the offload terms and the exports.
ALL_INTERFACES = {**INTERFACES, **CORE_INTERFACES, **OPS_INTERFACES, **NEWER_INTERFACES,
                  **LATER_INTERFACES}  # fmt: skip


def count(name: str, examples: int, folder: Path) -> tuple[Counter, list[str]]:
    interface = ALL_INTERFACES[name]
    counts: Counter = Counter()
    failures: list[str] = []

    # Generation only (no shrinking): every case is counted once, failures included.
    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(interface.inputs)
    def run(value):
        counts["tried"] += 1
        try:
            counts[outcome(interface, value, folder)] += 1
        except AssertionError as e:
            counts["failed"] += 1
            failures.append(str(e)[:300])

    run()
    return counts, failures


def main() -> int:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rows, bad = [], []
    print(f"{'interface':16} {'tried':>6} {'named':>6} {'valid':>6} {'failed':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ALL_INTERFACES:
            folder = Path(tmp) / name
            folder.mkdir()
            counts, failures = count(name, examples, folder)
            row = {k: counts[k] for k in ("tried", "named", "valid", "failed")}
            rows.append({"interface": name, **row})
            bad += failures
            print(f"{name:16} {row['tried']:6} {row['named']:6} {row['valid']:6} "
                  f"{row['failed']:6}")  # fmt: skip
    for failure in bad[:10]:
        print("FAILED:", failure)
    out = ROOT / "bench" / "results" / "fuzz.json"
    out.parent.mkdir(exist_ok=True)
    result = {
        "examples_per_interface": examples,
        "derandomize": True,
        "interfaces": rows,
        "failures": bad[:20],
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
