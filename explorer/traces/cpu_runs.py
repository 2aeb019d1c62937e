"""Real profiler traces made on this machine: a tiny GPT trained for a few steps with
PyTorch DDP or FSDP2 on CPU over gloo in 2 processes, each rank profiled with
``torch.profiler`` and written as a Kineto Chrome trace (``rank-N.json``).

The model is `tiny_gpt_config` built in torch layer for layer as the planner counts it
(GPT-2 style: token and learned position embeddings, pre-norm blocks of fused-QKV
attention and a GELU MLP with biases, a final LayerNorm, the head tied to the embedding),
so its parameter count is the config's and the collectives' bytes can be checked against
the plan. FSDP2 shards every block and the rest of the model as units that re-gather in the
backward (as the planner's ZeRO-3 does); the root holds no parameters.

Rank 0 also measures the host (``host.json``): fp32 matmul FLOP/s on one thread, copy
bandwidth, and a gloo all-reduce's bandwidth and latency between the two processes;
`host_cluster` turns those measurements into a `Cluster` to plan and calibrate with.

torch is imported inside the functions (the core does not need it).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Literal

from ..checks import positive_int
from ..hardware.chip import Chip
from ..hardware.cluster import Cluster
from ..models import load
from .errors import TracesError

__all__ = ["Wrapper", "tiny_gpt_config", "profile_cpu_run", "host_cluster"]

Wrapper = Literal["ddp", "fsdp"]
WRAPPERS: tuple[str, ...] = ("ddp", "fsdp")
WORLD = 2


def tiny_gpt_config(hidden: int = 64, layers: int = 2, heads: int = 4, vocab: int = 128,
                    seq: int = 32):  # fmt: skip
    """The run's model as a `ModelConfig`: GPT-2's architecture at a tiny size, fp32.

    >>> tiny_gpt_config().num_params()
    110336
    """
    return replace(
        load("gpt2"), name=f"gpt-tiny-h{hidden}-l{layers}", hidden_size=hidden,
        num_layers=layers, num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
        ffn_hidden_size=4 * hidden, vocab_size=vocab, max_seq_len=seq, dtype="fp32",
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(cfg):  # pragma: no cover - runs in the workers
    import torch
    from torch import nn

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg.hidden_size
            self.wte = nn.Embedding(cfg.vocab_size, h)
            self.wpe = nn.Embedding(cfg.max_seq_len, h)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(
                    h,
                    cfg.num_heads,
                    cfg.ffn,
                    dropout=0.0,
                    activation="gelu",
                    batch_first=True,
                    norm_first=True,
                )  # fmt: skip
                for _ in range(cfg.num_layers)
            )
            self.ln_f = nn.LayerNorm(h)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            for b in self.blocks:
                x = b(x, src_mask=mask, is_causal=True)
            return nn.functional.linear(self.ln_f(x), self.wte.weight)  # tied head

    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Body()

        def forward(self, idx):
            return self.body(idx)

    return Root()


def _measure_host(dist, torch) -> dict:  # pragma: no cover - runs in the workers
    """fp32 matmul FLOP/s (one thread), copy bandwidth, gloo all-reduce bandwidth/latency."""
    a = torch.randn(512, 512)
    torch.mm(a, a)
    t0, reps = time.perf_counter(), 20
    for _ in range(reps):
        torch.mm(a, a)
    flops = 2 * 512**3 * reps / (time.perf_counter() - t0)
    x = torch.empty(8 * 2**20)
    y = torch.empty_like(x)
    y.copy_(x)
    t0 = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    copy = 2 * x.numel() * 4 * 10 / (time.perf_counter() - t0)  # read + write
    small, big = torch.zeros(1), torch.zeros(2**20)
    for buf in (small, big):
        dist.all_reduce(buf)
    out = {}
    for name, buf in (("small", small), ("big", big)):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(10):
            dist.all_reduce(buf)
        out[name] = (time.perf_counter() - t0) / 10
    size = big.numel() * 4
    return {
        "matmul_flops_per_s": flops,
        "copy_bytes_per_s": copy,
        # ring all-reduce on 2: each sends S; time = latency + S / bandwidth
        "allreduce_latency_s": out["small"],
        "allreduce_bytes_per_s": size / max(out["big"] - out["small"], 1e-9),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _worker(rank, port, wrapper, out, cfg, micro, steps):  # pragma: no cover
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        model = _model(cfg)
        if wrapper == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard  # FSDP2: runs on CPU over gloo

            for b in model.body.blocks:
                fully_shard(b)
            fully_shard(model.body)
            net = fully_shard(model)
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(rank)
        idx = torch.randint(cfg.vocab_size, (micro, cfg.max_seq_len), generator=gen)
        target = torch.randint(cfg.vocab_size, (micro, cfg.max_seq_len), generator=gen)
        # one warm-up step outside the record (DDP builds its buckets there), then `steps`
        sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
        with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                     record_shapes=True) as prof:  # fmt: skip
            for _ in range(steps + 1):
                opt.zero_grad()
                logits = net(idx)
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, cfg.vocab_size), target.reshape(-1)
                )
                loss.backward()
                opt.step()
                prof.step()
        prof.export_chrome_trace(str(Path(out) / f"rank-{rank}.json"))
        host = _measure_host(dist, torch)
        if rank == 0:
            n = sum(p.numel() for p in model.parameters())
            host.update(wrapper=wrapper, microbatch=micro, steps=steps, params=int(n),
                        model=cfg.name)  # fmt: skip
            (Path(out) / "host.json").write_text(json.dumps(host, indent=1))
    finally:
        dist.destroy_process_group()


def profile_cpu_run(wrapper: Wrapper, out_dir=None, *, cfg=None, microbatch: int = 4,
                    steps: int = 3) -> Path:  # fmt: skip
    """Train ``cfg`` (default `tiny_gpt_config`) for ``steps`` profiled steps with
    ``wrapper`` (``ddp`` or ``fsdp``) on 2 CPU processes over gloo, ``microbatch``
    sequences of ``cfg.max_seq_len`` tokens per rank and step. Returns the folder holding
    ``rank-0.json``, ``rank-1.json`` and ``host.json``.

    Raises:
        TracesError: torch missing, an unknown wrapper, or a worker that failed.
    """
    if wrapper not in WRAPPERS:
        raise TracesError(f"wrapper={wrapper!r}; expected one of {WRAPPERS}")
    micro = positive_int(microbatch, "microbatch", error=TracesError, numpy=True)
    steps = positive_int(steps, "steps", error=TracesError, numpy=True)
    cfg = cfg if cfg is not None else tiny_gpt_config()
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        raise TracesError(
            "profile_cpu_run needs torch; install the project's torch extra "
            "(pip install 'parallel-explorer[torch]')"
        ) from e
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="kineto-"))
    out.mkdir(parents=True, exist_ok=True)
    args = (_free_port(), wrapper, str(out), cfg, micro, steps)
    try:
        mp.start_processes(_worker, args=args, nprocs=WORLD, join=True, start_method="spawn")
    except Exception as e:  # ProcessRaisedException and friends: say which run failed
        raise TracesError(f"the {wrapper} CPU run in {out} failed: {e}") from e
    return out


def host_cluster(folder):
    """A 2-chip `Cluster` from a run's ``host.json``: each "chip" is one CPU process with
    the measured fp32 matmul FLOP/s as its peak, the measured copy bandwidth as its memory
    bandwidth and the measured gloo all-reduce bandwidth and latency as its link (one node
    of 2). Memory: the machine's RAM split in two (`os.sysconf`)."""
    path = Path(folder) / "host.json"
    try:
        h = json.loads(path.read_text())
        flops, copy = float(h["matmul_flops_per_s"]), float(h["copy_bytes_per_s"])
        bw, lat = float(h["allreduce_bytes_per_s"]), float(h["allreduce_latency_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TracesError(
            f"{path}: not a host measurement written by profile_cpu_run ({e})"
        ) from None
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    chip = Chip("cpu-process", {"fp32": flops, "bf16": flops, "fp16": flops},
                memory_bytes=int(ram // WORLD), memory_bandwidth_bytes_per_s=copy)  # fmt: skip
    return Cluster(
        name="cpu-gloo-2", chip=chip, chips_per_node=WORLD,
        intra_node_bandwidth_bytes_per_s=bw, intra_node_latency_s=lat,
        inter_node_bandwidth_bytes_per_s=bw, inter_node_latency_s=lat, max_nodes=1,
        source=f"measured on this machine by profile_cpu_run ({path})",
    )  # fmt: skip
