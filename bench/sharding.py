"""Sharding benchmark: strategy enumeration of a 24-layer GPT and SPMD verification of one
transformer layer. Prints a table and writes bench/results/sharding.json.

    .venv/bin/python bench/sharding.py
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import explorer as ex
from explorer import sharding
from explorer.ir import GraphBuilder
from explorer.models.layers import attention, mlp, norm

OUT = Path(__file__).parent / "results" / "sharding.json"


def layer_graph(cfg, batch: int, seq: int):
    b = GraphBuilder("layer", dtype=cfg.dtype)
    x = b.input("x", (batch, seq, cfg.hidden_size))
    with b.scope("attn"):
        x = b.op("add", x, attention(b, cfg, norm(b, cfg, x), causal=True), name="residual")
    with b.scope("mlp"):
        x = b.op("add", x, mlp(b, cfg, norm(b, cfg, x)), name="residual")
    return b.build([x])


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    rows = []
    graph = ex.models.build(ex.models.load("gpt2-medium"), batch=8, seq=1024)
    mesh = ex.Mesh({"dp": 2, "tp": 2, "pp": 2}, hardware="a100-80g")

    def cold():
        sharding.strategy._TEMPLATES.clear()
        return sharding.strategies(graph, mesh)

    t = best_of(cold)
    count = sum(len(v) for v in cold().values())
    rows.append(("enumerate gpt2-medium (24 layers) 2x2x2", t, 0.5,
                 f"{len(graph.nodes)} nodes, {count} strategies"))  # fmt: skip

    cfg = ex.models.ModelConfig(name="layer", arch="decoder", hidden_size=256, num_layers=1,
                                num_heads=8, vocab_size=128, max_seq_len=128, dtype="fp32")  # fmt: skip
    layer = layer_graph(cfg, batch=4, seq=64)
    mesh8 = ex.Mesh({"dp": 2, "tp": 4})
    names = {
        **{f"attn.{p}": "a=dp,n=tp" for p in ("q", "k", "v")},
        **{f"attn.{p}_bias": "a=dp,c=tp" for p in ("q", "k", "v")},
        **{f"attn.{p}_heads": "a=dp,c=tp" for p in ("q", "k", "v")},
        "attn.scores": "b=dp,n=tp", "attn.scale": "a=dp,b=tp", "attn.mask": "a=dp,b=tp",
        "attn.probs": "a=dp,b=tp", "attn.context": "b=dp,n=tp", "attn.merge_heads": "a=dp,c=tp",
        "attn.o": "a=dp,k=tp", "mlp.fc1": "a=dp,n=tp", "mlp.fc1_bias": "a=dp,c=tp",
        "mlp.gelu": "a=dp,c=tp", "mlp.fc2": "a=dp,k=tp",
    }  # fmt: skip
    for op in ("attn.norm", "attn.o_bias", "attn.residual", "mlp.norm", "mlp.fc2_bias",
               "mlp.residual"):  # fmt: skip
        names[op] = "a=dp"
    plan = sharding.assign(layer, mesh8, names)
    report = sharding.verify(layer, plan, mesh8)
    assert report.ok, str(report)
    t = best_of(lambda: sharding.verify(layer, plan, mesh8))
    rows.append(("verify 1 layer (h=256, b=4, s=64) dp2 x tp4", t, 2.0,
                 f"{report.num_collectives} collectives, err {report.max_abs_err:.1e}"))  # fmt: skip

    print(f"{'benchmark':<46} {'seconds':>8} {'target':>7} {'ratio':>6}  note")
    for name, sec, target, note in rows:
        print(f"{name:<46} {sec:8.3f} {target:7.1f} {sec / target:6.2f}  {note}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "python": platform.python_version(),
        "results": [{"name": n, "seconds": s, "target_s": t, "note": note}
                    for n, s, t, note in rows],
    }, indent=2) + "\n")  # fmt: skip
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
