"""Run `DTensorPlan`s under torchrun and check each against the unsharded module.

    torchrun --nproc_per_node=4 -m explorer.export.dtensor_launch --spec plan.json \\
        --out result.json

Every rank builds the module from the spec's config, loads the same seeded weights
(`explorer.sharding.random_inputs`), runs it whole (the reference), then parallelizes a
copy over the DeviceMesh and runs its slice of the batch (``dp``) under
``CommDebugMode``. Rank 0 writes ``{"ok", "errors", "comm_counts", ...}`` as JSON.
CPU runs use gloo.

``--spec`` (with its ``--out``) may be repeated: the plans, all of one world size, run one
after the other in the same processes, which start (and import torch) once.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from ..models import build
from ..sharding import random_inputs
from .dtensor_export import DTensorPlan
from .torch_model import build_module, load_values, module_inputs

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, action="append",
                    help="JSON written by DTensorPlan.write; repeat to run several plans")  # fmt: skip
    ap.add_argument("--out", action="append", default=None,
                    help="where rank 0 writes the result JSON; one per --spec")  # fmt: skip
    ap.add_argument("--rtol", type=float, default=1e-5, help="relative to the largest value")
    ap.add_argument("--atol", type=float, default=1e-6)
    args = ap.parse_args(argv)
    if args.out is not None and len(args.out) != len(args.spec):
        ap.error(f"{len(args.spec)} --spec but {len(args.out)} --out; give one --out per --spec "
                 "or none")  # fmt: skip

    torch.set_num_threads(1)
    ok = True
    for k, spec in enumerate(args.spec):
        result = _run(spec, args.rtol, args.atol)
        if dist.get_rank() == 0:
            text = json.dumps(result, indent=1)
            if args.out:
                Path(args.out[k]).write_text(text)
            print(text)
        ok = ok and result["ok"]
    # Every rank reaches the barrier before any tears gloo down: without it a rank that
    # leaves first aborts a peer still in its last collective ("terminate called without an
    # active exception", seen once in about ten runs on a loaded 2-core machine).
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


def _run(spec: str, rtol: float, atol: float) -> dict:
    """One plan: the sharded run against the whole module, on every rank."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.debug import CommDebugMode

    raw = json.loads(Path(spec).read_text())
    seed = raw.get("seed", 0)
    plan = DTensorPlan.from_dict(raw)
    torch.manual_seed(seed)
    mesh = plan.device_mesh("cpu")  # initialises the default (gloo) group from torchrun's env
    if dist.get_world_size() != plan.world_size:
        raise SystemExit(
            f"{spec}: the plan needs {plan.world_size} processes, got {dist.get_world_size()}"
        )

    graph = build(plan.config, batch=plan.batch, seq=plan.seq)
    values = random_inputs(graph, seed)
    whole = build_module(plan.config)
    load_values(whole, values)
    inputs = module_inputs(values)
    with torch.no_grad():
        ref_logits, ref_loss = whole(**inputs)

    sharded = plan.parallelize(copy.deepcopy(whole), mesh)
    dp = plan.dp and mesh[plan.dp].size() > 1
    local = dict(inputs)
    if dp:
        n, k = mesh[plan.dp].size(), mesh[plan.dp].get_local_rank()
        step = plan.batch // n
        for key in ("tokens", "labels"):
            local[key] = inputs[key][k * step : (k + 1) * step]
    comm = CommDebugMode()
    with torch.no_grad(), comm:
        logits, loss = sharded(**local)
    if hasattr(logits, "full_tensor"):
        logits = logits.full_tensor()
    if dp:
        group = mesh[plan.dp].get_group()
        parts = [torch.empty_like(logits) for _ in range(mesh[plan.dp].size())]
        dist.all_gather(parts, logits.contiguous(), group=group)
        logits = torch.cat(parts)
        loss = loss.clone()
        dist.all_reduce(loss, group=group)
        loss = loss / mesh[plan.dp].size()
    errors = {
        "logits": float((logits - ref_logits).abs().max()),
        "loss": float((loss - ref_loss).abs().max()),
    }
    # fp32 with another summation order: errors scale with the largest value
    scale = {"logits": float(ref_logits.abs().max()), "loss": float(ref_loss.abs())}
    ok = all(errors[k] <= atol + rtol * scale[k] for k in errors)
    flags = torch.tensor([1 if ok else 0])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    counts = {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}
    return {
        "ok": bool(flags.item()), "errors": errors, "comm_counts": counts,
        "world_size": dist.get_world_size(), "loss": float(loss), "ref_loss": float(ref_loss),
        "styles": [str(s) for s in plan.styles],
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
