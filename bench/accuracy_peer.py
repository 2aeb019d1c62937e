"""Section 6 of bench/accuracy.py (``--peer``): MooreThreads' SimuMax (driven by
bench/simumax_peer.py) and this project on the same rows of today's stack files, each row with
the layout this project predicts it with."""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import simumax_peer as peer

import explorer as ex
from explorer.training.calibration.fit import predict
from explorer.training.calibration.measured import ROLES, measured_datasets
from explorer.training.calibration.published import STACK_NAMES, measured_params, published_runs


def _peer_line(label: str, xs: list[dict]) -> tuple[str, dict]:
    ours = np.abs([x["ours"] for x in xs])
    peer = np.abs([x["simumax"] for x in xs])
    st = {"n": len(xs), "ours_within_10": int((ours <= 0.1).sum()),
          "simumax_within_10": int((peer <= 0.1).sum()),
          "ours_median": float(np.median(ours)), "simumax_median": float(np.median(peer))}  # fmt: skip
    line = (f"   {label:44s} {st['n']:4d}   {st['ours_within_10']:4d} {st['ours_median']:7.1%}"
            f"   {st['simumax_within_10']:4d} {st['simumax_median']:7.1%}")  # fmt: skip
    return line, st


def peer_simumax() -> dict:
    """Section 6: SimuMax (bench/simumax_peer.py) and this project on the same rows of
    today's stack files, each row with the layout this project predicts it with."""
    print("6. The best open peer on the same rows: SimuMax", peer.SIMUMAX_COMMIT)
    python, why = peer.available()
    if python is None:
        print(f"   not run: {why}")
        return {"available": False, "why": why}
    t0 = time.perf_counter()
    jobs, ours, skipped = [], {}, defaultdict(list)
    for name in measured_datasets("stacks"):
        for r in published_runs(name, skipped=[]):
            key = f"{name} | {r.role} | {r.label} | {r.precision} | {r.hardware_name}"
            params = measured_params(r)
            try:
                sim = predict(r, params)
            except ex.ExplorerError:
                continue
            try:
                job = {"key": key, "model": peer.model_config(r.cfg),
                       "strategy": peer.strategy_config(r, params),
                       "system": peer.system_config(r.hardware_name.split("+")[0])}  # fmt: skip
            except ValueError as e:
                skipped[str(e)].append(key)
                continue
            jobs.append(job)
            ours[key] = (r, sim.step_time_s / r.step_time_s - 1)
    res = peer.run_simumax(jobs, python)
    rows = []
    for key, (r, err) in ours.items():
        got = res.get(key, {})
        if got.get("step_time_s") is None:
            skipped[f"SimuMax refused: {got.get('error')}"].append(key)
            continue
        rows.append({"dataset": key.split(" | ")[0], "stack": r.stack, "role": r.role,
                     "run": r.label, "precision": r.precision,
                     "hardware": r.hardware_name.split("+")[0], "measured_s": r.step_time_s,
                     "ours": err, "simumax": got["step_time_s"] / r.step_time_s - 1})  # fmt: skip
    print("   SimuMax's system configs: this project's hardware profiles' datasheet figures "
          "with SimuMax's template efficiencies (0.75 compute, 0.9 HBM, 0.5 links); no "
          "measured tables (it ships an A100 PCIe and a one-node B200 only); layouts, "
          "recomputation and ZeRO stage as this project predicts each row with")  # fmt: skip
    print(f"   error = predicted / measured step time - 1; {len(rows)} rows run by both "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    print(f"   {'dataset / stack / role, or group':44s} {'n':>4s}   ours: 10% median   "
          "SimuMax: 10% median")  # fmt: skip
    out: dict = {"available": True, "rows": rows, "groups": {},
                 "skipped": {k: len(v) for k, v in skipped.items()}}  # fmt: skip
    groups: dict = defaultdict(list)
    for x in rows:
        groups[f"{x['dataset']} / {x['stack']} / {x['role']}"].append(x)
    for g in sorted(groups):
        line, out["groups"][g] = _peer_line(g, groups[g])
        print(line)
    for role in ROLES:
        xs = [x for x in rows if x["role"] == role]
        if xs:
            line, out["groups"][f"all / {role}"] = _peer_line(f"all {role} rows", xs)
            print(line)
    for stack in STACK_NAMES:
        xs = [x for x in rows if x["stack"] == stack and x["role"] == "check"]
        if xs:
            line, out["groups"][f"{stack} / check"] = _peer_line(f"{stack} check rows", xs)
            print(line)
    print("   rows not run by SimuMax (reason: count):")
    for why_, keys in sorted(skipped.items()):
        print(f"     {why_}: {len(keys)}")
    out["seconds"] = time.perf_counter() - t0
    return out
