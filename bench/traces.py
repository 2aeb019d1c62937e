"""Profiler traces: import speed and peak memory, and calibration from the CPU runs.

1. Import (``ex.traces.load_kineto``, streamed) of the largest vendored real trace
   (HTA's ``nccl_data.json.gz``, and the same file decompressed) and of a generated Kineto-like
   trace (GPU kernels, runtime launches and CPU ops in the proportions of that real trace;
   ``--mb`` sets its size, 64 MB by default; ``--gb`` makes a 1 GB one and writes
   ``results/traces_1gb.json`` with the import rows alone). Each import runs in a
   fresh process: events per second, and the peak resident memory above a process that only
   imported ``explorer`` (``ru_maxrss``), per GiB of trace. Beside it, in the same run: the
   same import with every kernel and op then made a Python tuple (how a trace was held before
   the columnar tables), and up to 128 MiB the files read whole with ``json.load``.
2. The CPU DDP and FSDP2 runs (``datasets/traces/kineto/cpu_gloo_*``; ``--fresh`` makes them
   again with ``profile_cpu_run``): the GEMM/attention efficiency (``kernel_efficiency``) and
   link latency/bandwidth (``link_fit``) each trace shows, and predicted vs measured step time
   and per-part times before and after calibration, fitted on one run and checked on the
   other, both ways (the rows say which is which), from the default knobs and from the fit
   run's own kernel and link figures. The links of HTA's 2-rank A100 NCCL trace too.

    .venv/bin/python bench/traces.py [--mb 64 | --gb] [--fresh]   # writes bench/results/traces.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import resource
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

OUT = Path(__file__).parent / "results" / "traces.json"


# ----- 1. import -------------------------------------------------------------------------
def _kernel(i: int, ts: float) -> str:
    return json.dumps({
        "ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn" if i % 3 else
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "pid": 0, "tid": 7, "ts": ts + 5, "dur": 3.5,
        "args": {"External id": i, "device": 0, "stream": 7, "correlation": i,
                 "grid": [108, 1, 1], "block": [256, 1, 1]},
    })  # fmt: skip


def _op(i: int, ts: float) -> str:
    return json.dumps({
        "ph": "X", "cat": "cpu_op", "name": "aten::mm" if i % 3 else "aten::add",
        "pid": 1, "tid": 1, "ts": ts, "dur": 4.0,
        "args": {"External id": i, "Input Dims": [[256, 1024], [1024, 1024]],
                 "Input type": ["float", "float"], "Ev Idx": i},
    })  # fmt: skip


def _runtime(i: int, ts: float) -> str:
    return json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": ts + 1, "dur": 2.0,
                       "args": {"External id": i, "correlation": i}})  # fmt: skip


def generate(path: Path, target_bytes: int) -> int:
    """A Kineto-like trace of about ``target_bytes``: per launch one CPU op, one runtime call
    and one kernel, ``ProfilerStep#N`` markers every 10,000 launches. Returns the events."""
    steps, per_step, i, written, events = [], 10_000, 0, 0, 0
    with open(path, "w") as f:
        head = ('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, '
                '"world_size": 8}, "traceEvents": [\n')  # fmt: skip
        f.write(head)
        written += len(head)
        while written < target_bytes:
            ts = i * 10.0
            if i % per_step == 0:
                steps.append(ts)
            for line in (_op(i, ts), _runtime(i, ts), _kernel(i, ts)):
                f.write(line + ",\n")
                written += len(line) + 2
                events += 1
            i += 1
        for n, ts in enumerate(steps):
            line = json.dumps({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                               "pid": 1, "tid": 1, "ts": ts, "dur": per_step * 10.0})  # fmt: skip
            f.write(line + ",\n")
            events += 1
        f.write(
            '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}\n]}\n'
        )
        events += 1
    return events


def _child(kind: str, path: str, q) -> None:
    import explorer  # noqa: F401 -- the baseline process imports it too

    t0 = time.perf_counter()
    if kind in ("stream", "objects"):
        import explorer as ex

        t = ex.traces.load_kineto(path)
        events = t.events
        if kind == "objects":  # every kernel and op as a Python tuple (how they were kept)
            held = [(tuple(r.kernels), tuple(r.ops)) for r in t.ranks]  # noqa: F841
    elif kind == "json.load":
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            events = len(json.load(f)["traceEvents"])
    else:
        events = 0
    q.put((events, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


def _in_child(kind: str, path: str) -> tuple[int, float, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(kind, path, q))
    p.start()
    out = q.get()
    p.join()
    return out


def import_rows(paths: dict[str, Path], whole_file: bool) -> list[dict]:
    _, _, base_kb = _in_child("baseline", "")
    rows = []
    for label, path in paths.items():
        events, secs, kb = _in_child("stream", str(path))
        _, _, okb = _in_child("objects", str(path))
        size = path.stat().st_size
        row = {"trace": label, "bytes": size, "events": events,
               "seconds": secs, "events_per_s": events / secs,
               "peak_mib_above_import": max(kb - base_kb, 0) / 1024,
               "peak_mib_per_gib": max(kb - base_kb, 0) / 1024 / (size / 2**30),
               "as_objects_peak_mib_above_import": max(okb - base_kb, 0) / 1024}  # fmt: skip
        if whole_file:
            _, jsecs, jkb = _in_child("json.load", str(path))
            row.update(json_load_seconds=jsecs,
                       json_load_peak_mib_above_import=max(jkb - base_kb, 0) / 1024)  # fmt: skip
        rows.append(row)
        print(
            f"{label:34s} {row['bytes'] / 2**20:8.1f} MiB {events:>10,} events "
            f"{row['events_per_s']:>10,.0f} ev/s  peak +{row['peak_mib_above_import']:7.1f} MiB"
            f" ({row['peak_mib_per_gib']:6.0f} MiB per GiB; every event as a tuple: "
            f"+{row['as_objects_peak_mib_above_import']:.1f} MiB)"
            + (
                f"  (json.load: {row['json_load_seconds']:.2f} s, peak "
                f"+{row['json_load_peak_mib_above_import']:.1f} MiB)"
                if whole_file
                else ""
            )
        )
    return rows


# ----- 2. calibration from the CPU runs ------------------------------------------------
def calibration_rows(fresh: bool) -> list[dict]:
    import explorer as ex
    from explorer.traces.cpu_runs import host_cluster, profile_cpu_run, tiny_gpt_config

    cfg = tiny_gpt_config()
    layouts = {"ddp": ex.ParallelConfig(dp=2, microbatch_size=4),
               "fsdp": ex.ParallelConfig(dp=2, zero=3, microbatch_size=4)}  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="bench-traces-"))
    folders = {w: profile_cpu_run(w, tmp / w, microbatch=4, steps=3) if fresh
               else ex.traces.vendored(f"cpu_gloo_{w}") for w in layouts}  # fmt: skip
    cluster = host_cluster(folders["ddp"])
    base = ex.TrainingParams()
    fp32 = replace(base, state=replace(base.state, weight_bytes=4.0, gradient_bytes=4.0))
    traces = {w: ex.traces.load_kineto(folders[w]) for w in layouts}
    hosts = {w: host_cluster(folders[w]) for w in layouts}
    measured = {}  # what each trace says of its own kernels and links (read, not fitted)
    for w in layouts:
        eff = ex.training.kernel_efficiency(traces[w], hosts[w], fp32, dtype="fp32")
        links = ex.traces.link_fit(traces[w], hosts[w])
        print(f"\n--- {w}: kernels and links read from the trace\n{eff}\n{links}")
        measured[w] = {"efficiency": eff, "links": links}
    out = []
    # start "defaults": the host profile and the default knobs; start "trace": the fit run's
    # own GEMM/attention efficiency (kernel_efficiency) and link latency and bandwidth
    # (link_fit) before the fit
    for start in ("defaults", "trace"):
        for fit_on, check_on in (("ddp", "fsdp"), ("fsdp", "ddp")):
            p0, hw = fp32, cluster
            if start == "trace":
                p0 = measured[fit_on]["efficiency"].params(fp32)
                hw = measured[fit_on]["links"].cluster()
            runs = {w: ex.MeasuredRun.from_trace(traces[w], cfg, layouts[w], hw, 8, 32,
                                                 axes={"dp": 2}, source=f"cpu_gloo_{w}")
                    for w in layouts}  # fmt: skip
            cal = ex.calibrate([runs[fit_on]], check=[runs[check_on]], params=p0, loo=False)
            print(f"\n--- start {start}, fit on {fit_on}, check on {check_on}: {cal}")
            print(cal.category_text())
            for w, row in zip((fit_on, check_on), cal.table, strict=True):
                out.append({
                    "start": start, "fit_on": fit_on, "run": w, "label": row.run.label,
                    "role": row.role, "fitted": cal.fitted,
                    "step": {"measured_s": row.measured_s, "before_s": row.before_s,
                             "after_s": row.after_s},
                    "parts": {name: {"measured_s": m, "before_s": b, "after_s": a}
                              for name, m, b, a in row.categories},
                })  # fmt: skip
    reads = {w: {"efficiency": [{"part": r.part, "class": r.shape_class, "calls": r.calls,
                                 "measured_s": r.measured_s, "before_s": r.before_s,
                                 "before": r.before, "fitted": r.efficiency, "note": r.note}
                                for r in m["efficiency"].rows],
                 "links": [_link_row(f) for f in m["links"].fits]}
             for w, m in measured.items()}  # fmt: skip
    real = ex.traces.link_fit(ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz")),
                              ex.hardware.load("a100-80g"))  # fmt: skip
    print(f"\n--- HTA nccl_data (2 x A100, NCCL): links read from the trace\n{real}")
    reads["nccl_data"] = {"links": [_link_row(f) for f in real.fits]}
    shutil.rmtree(tmp, ignore_errors=True)
    return out, reads


def _link_row(f) -> dict:
    return {"level": f.level, "latency_s": f.latency_s, "bandwidth_bytes_per_s":
            f.bandwidth_bytes_per_s, "before_latency_s": f.before_latency_s,
            "before_bandwidth_bytes_per_s": f.before_bandwidth_bytes_per_s,
            "messages": f.messages, "samples": f.samples, "error_before": f.error_before,
            "error_after": f.error_after, "note": f.note}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="size of the generated trace in MB")
    ap.add_argument("--gb", action="store_true", help="generate a 1 GB trace instead")
    ap.add_argument("--fresh", action="store_true", help="make the CPU runs again (torch)")
    args = ap.parse_args()
    import explorer as ex

    size = 2**30 if args.gb else args.mb * 2**20
    tmp = Path(tempfile.mkdtemp(prefix="bench-traces-"))
    real = ex.traces.vendored("nccl_data.json.gz")
    plain = tmp / "nccl_data.json"
    plain.write_bytes(gzip.decompress(real.read_bytes()))
    gen = tmp / "generated.json"
    t0 = time.perf_counter()
    n = generate(gen, size)
    print(
        f"generated {gen.stat().st_size / 2**20:.0f} MiB, {n:,} events in "
        f"{time.perf_counter() - t0:.1f} s\n"
    )
    paths = {"HTA nccl_data.json.gz (real)": real, "HTA nccl_data.json (plain)": plain,
             f"generated {gen.stat().st_size / 2**20:.0f} MiB": gen}  # fmt: skip
    rows = import_rows(paths, whole_file=size <= 128 * 2**20)  # json.load of more: GBs
    shutil.rmtree(tmp, ignore_errors=True)
    out = OUT if size < 2**30 else OUT.with_name("traces_1gb.json")
    if size >= 2**30:  # the 1 GB import alone
        out.write_text(json.dumps({"import": rows, "generated_bytes": size}, indent=1))
        print(f"\nwrote {out}")
        return
    cal, reads = calibration_rows(args.fresh)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"import": rows, "calibration": cal, "read_from_traces": reads,
                               "generated_bytes": size, "fresh_runs": args.fresh},
                              indent=1))  # fmt: skip
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
