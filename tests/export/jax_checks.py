"""Real JAX runs for tests/export/test_jax.py, in a process of its own: XLA_FLAGS must be
set before jax is imported, and must not leak into the other tests.

    PYTHONPATH=. python tests/export/jax_checks.py OUT.json

Writes one JSON object per check: output errors against the unsharded JAX run and the
float64 numpy reference, and the predicted-vs-XLA comparison rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import explorer as ex
from explorer.export import megatron_assignment, to_jax
from explorer.sharding import assign, node_strategies, reference
from tests.sharding.helpers import TINY, layer_graph

# explorer imports jax only inside the exporters: setting the flag in __main__ (never at
# import: pytest's doctest collection imports this file) is early enough. LLVM at -O0: the
# checks compare XLA's HLO (partitioning, collectives: every table identical to the default
# level's) and outputs within fp32 tolerances; unoptimised machine code compiles ~30% faster
FLAGS = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"

MESH = ex.Mesh({"dp": 2, "tp": 4})
GPT = ex.models.ModelConfig(
    name="tiny-gpt", arch="decoder", hidden_size=64, num_layers=2, num_heads=4, vocab_size=128,
    max_seq_len=16, dtype="fp32",
)  # fmt: skip


# graph (its text and attributes) -> (seeded values, unsharded JAX run, float64 numpy
# reference): the unsharded run does not depend on the plan, so the plans of one model are
# compared with one run of it (each unsharded run is a compilation of ~2 s)
_WHOLE: dict[tuple, tuple[dict, dict, dict]] = {}


def _errors(prog) -> dict:
    key = (str(prog.graph), tuple((n.name, n.attrs) for n in prog.graph.nodes))
    if key not in _WHOLE:
        values = prog.values()
        _WHOLE[key] = (values, prog.run_unsharded(values), reference(prog.graph, values))
    values, whole, ref = _WHOLE[key]
    got = prog.run(values)
    out = {}
    for o in prog.graph.outputs:
        scale = float(np.abs(ref[o]).max())
        out[o] = {
            "vs_unsharded": float(np.abs(got[o] - whole[o]).max()),
            "vs_numpy_fp64": float(np.abs(got[o].astype(np.float64) - ref[o]).max()),
            "scale": scale, "shape": list(got[o].shape),
        }  # fmt: skip
    return out


def _cmp(c) -> dict:
    return {
        "ok": c.ok, "rows": c.rows(), "table": c.table(), "matches": len(c.matches),
        "misses": len(c.misses), "extras": len(c.extras),
        "predicted_bytes": c.predicted_bytes, "observed_bytes": c.observed_bytes,
    }  # fmt: skip


def _data_parallel(graph, mesh, axes=("dp", "tp")):
    names = {}
    for n in graph.ops:
        options = node_strategies(graph, n.name, mesh)
        want = {options[0].first_letter: axes}  # the batch letter over every axis
        (s,) = [s for s in options if dict(s.dim_axes) == want]
        names[n.name] = s.name
    return assign(graph, mesh, names)


def main(out_path: str) -> None:
    if "jax" in sys.modules:
        raise SystemExit("jax was imported before XLA_FLAGS was set; run this file as a script")
    os.environ["XLA_FLAGS"] = FLAGS
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    layer = layer_graph(TINY, batch=2, seq=8)
    for name, sp in (("megatron_layer", False), ("sequence_parallel_layer", True)):
        prog = to_jax(layer, megatron_assignment(layer, MESH, sequence_parallel=sp), MESH)
        results[name] = {"errors": _errors(prog), "forward": _cmp(prog.compare())}
        if not sp:  # the tests check Megatron's gradient reductions (a compile of ~3 s)
            results[name]["gradients"] = _cmp(prog.compare_gradients())
    dp_layer = layer_graph(TINY, batch=8, seq=8)
    prog = to_jax(dp_layer, _data_parallel(dp_layer, MESH), MESH)
    results["data_parallel_layer"] = {"errors": _errors(prog), "forward": _cmp(prog.compare()),
                                      "gradients": _cmp(prog.compare_gradients())}  # fmt: skip
    gpt = ex.models.build(GPT, batch=2, seq=8)
    for name, sp in (("megatron_gpt", False), ("sequence_parallel_gpt", True)):
        prog = to_jax(gpt, megatron_assignment(gpt, MESH, sequence_parallel=sp), MESH)
        results[name] = {"errors": _errors(prog), "forward": _cmp(prog.compare())}
    # a LLaMA-style model: RMSNorm, SwiGLU, grouped-query attention, rotary (no table), no bias
    llama = dataclasses.replace(ex.models.load("llama3-8b"), hidden_size=64, num_layers=1,
                                num_heads=8, num_kv_heads=4, ffn_hidden_size=128,
                                vocab_size=128, max_seq_len=16, dtype="fp32")  # fmt: skip
    prog = to_jax(llama, megatron_assignment(ex.models.build(llama, 2, 8), MESH), MESH,
                  batch=2, seq=8)  # fmt: skip
    results["llama_like"] = {"errors": _errors(prog), "forward": _cmp(prog.compare())}
    # Llama 3's context parallelism: every activation's sequence also split over cp
    cp_mesh = ex.Mesh({"dp": 2, "cp": 2, "tp": 2})
    for name, sp in (("context_parallel_llama", False), ("context_parallel_sp_llama", True)):
        g = ex.models.build(llama, 2, 8)
        prog = to_jax(g, megatron_assignment(g, cp_mesh, sequence_parallel=sp), cp_mesh)
        results[name] = {"errors": _errors(prog), "forward": _cmp(prog.compare()),
                         "q_spec": list(prog.specs["layers.0.attn.q"])}  # fmt: skip
    bf16 = dataclasses.replace(GPT, dtype="bf16")
    prog = to_jax(bf16, megatron_assignment(ex.models.build(bf16, 2, 8), MESH), MESH,
                  batch=2, seq=8)  # fmt: skip
    results["megatron_gpt_bf16"] = {"errors": _errors(prog), "forward": _cmp(prog.compare())}
    plan = ex.search(layer, MESH)
    prog = to_jax(layer, plan, MESH)
    results["searched_layer"] = {"errors": _errors(prog), "forward": _cmp(prog.compare()),
                                 "method": plan.method}  # fmt: skip
    import jax

    results["meta"] = {"jax": jax.__version__, "devices": len(jax.devices()),
                       "seconds": time.perf_counter() - t0}  # fmt: skip
    Path(out_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
