"""Benchmark (printed, not timed): the prediction bands every SimResult carries.

Every CHECK row of the published runs of today's stacks (``datasets/published``, the stack
files; ``role`` column) is predicted uncalibrated with its stack's preset, as
``bench/accuracy.py`` section 5 predicts it (``measured_params``); ``measured / predicted``
of its step time (and of its peak memory where the source published one) is grouped by the
preset that models its framework (`stacks.FRAMEWORK_STACKS`) and its chip family
(`bands.chip_family`), and the 10th-90th percentiles are written to
``datasets/published/prediction_bands.json`` (`explorer.training.bands.write_bands`). FIT rows
are never used: the chip efficiencies were fitted on them, and a band measured there would
be too narrow. Prints each band with its rows.

    python bench/bands.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import explorer as ex  # noqa: E402
from explorer.training.bands import Residual, band, chip_family, write_bands  # noqa: E402
from explorer.training.calibration.fit import predict  # noqa: E402
from explorer.training.calibration.measured import measured_datasets  # noqa: E402
from explorer.training.calibration.published import measured_params, published_runs  # noqa: E402
from explorer.training.stacks import FRAMEWORK_STACKS  # noqa: E402


def residuals() -> tuple[list[Residual], list[str]]:
    out, skipped = [], []
    for name in measured_datasets("stacks"):
        for r in published_runs(name, skipped=skipped):
            if r.role != "check":
                continue
            try:
                sim = predict(r, measured_params(r))
            except ex.ExplorerError as e:
                skipped.append(f"{name}: {r.label}: {e}")
                continue
            mem = r.memory_bytes / sim.memory.total if r.memory_bytes else None
            out.append(Residual(FRAMEWORK_STACKS.get(r.stack, r.stack),
                                r.hardware_name.split("+")[0],
                                r.step_time_s / sim.step_time_s, mem))  # fmt: skip
    return out, skipped


def main() -> int:
    t0 = time.perf_counter()
    rows, skipped = residuals()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "unknown"  # fmt: skip
    path = write_bands(rows, f"bench/bands.py at {commit}: {len(rows)} check rows of the "
                             "stack files, uncalibrated, each with its stack's preset")  # fmt: skip
    print(f"check rows predicted: {len(rows)}; skipped: {len(skipped)}; "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    groups: dict[tuple[str, str], list[Residual]] = defaultdict(list)
    for r in rows:
        groups[(r.stack, chip_family(r.hardware))].append(r)
    print(
        f"{'stack':16s} {'chip family':12s} {'rows':>4s}  band (measured / predicted, "
        "10th-90th percentile; the one a run of this stack and family gets)"
    )
    for (stack, family), rs in sorted(groups.items()):
        hw = rs[0].hardware
        b = band(stack, hw)
        m = band(stack, hw, "memory")
        print(f"{stack:16s} {family:12s} {len(rs):4d}  step {b}")
        if m is not None and any(r.memory_ratio is not None for r in rs):
            print(f"{'':34s}memory {m}")
    print(f"hand-set params: {band(None, 'h100-sxm')}")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
