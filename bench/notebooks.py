"""Run-all time of every notebook on this machine, cold and warm; writes
bench/results/notebooks.json.

Each notebook runs top to bottom in a fresh kernel (nbclient), twice: "cold" is the first
run of the process (operating-system file caches may still be cold for the engines), "warm"
the second. The slowest cells of the warm run are listed so that a regression points at its
cell. The README quotes the warm figures. Printed, never asserted: machines are noisy.

Run: ``.venv/bin/python bench/notebooks.py [names...]``.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
RESULTS = Path(__file__).parent / "results" / "notebooks.json"
TARGET_01_WARM_S = 60.0  # notebook 01 under a minute, warm


def _run(path: Path) -> tuple[float, list[tuple[float, int, str]]]:
    nb = nbformat.read(path, as_version=4)
    cells: list[tuple[float, int, str]] = []
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    t0 = time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            c0 = time.perf_counter()
            client.execute_cell(cell, i)
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            cells.append((time.perf_counter() - c0, i, first[:70]))
    return time.perf_counter() - t0, sorted(cells, reverse=True)


def main(argv: list[str]) -> int:
    names = argv or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    rows = {}
    print(f"{'notebook':34s} {'cold s':>7s} {'warm s':>7s}   slowest warm cells")
    for name in names:
        cold, _ = _run(NOTEBOOKS / name)
        warm, cells = _run(NOTEBOOKS / name)
        slow = [f"[{i}] {t:.1f} s {src}" for t, i, src in cells[:3]]
        rows[name] = {"cold_s": round(cold, 1), "warm_s": round(warm, 1),
                      "slowest_cells": slow}  # fmt: skip
        print(f"{name:34s} {cold:7.1f} {warm:7.1f}   {slow[0] if slow else ''}")
        for line in slow[1:]:
            print(f"{'':51s}{line}")
    if "01_tour.ipynb" in rows:
        w = rows["01_tour.ipynb"]["warm_s"]
        print(f"01 warm {w:.1f} s against the target {TARGET_01_WARM_S:.0f} s: "
              f"{'met' if w < TARGET_01_WARM_S else 'MISSED'}")  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "when": datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
        "python": platform.python_version(), "notebooks": rows,
    }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
