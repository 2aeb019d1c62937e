"""Published training runs, and our predictions for them.

``datasets/published/megatron_2021_table1.csv``: Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC21), Table 1:
GPT models on A100-80GB SXM (peak 312 TFLOP/s), sequence 2048, vocabulary 51200,
interleaved 1F1B, full recomputation, data parallel = GPUs / (TP * PP). The microbatch
size and the chunks per device are not in the table; `compare_megatron` lets the planner
pick them within the row's TP, PP, schedule and recomputation.

The calibration (`MEGATRON_PARAMS`) is one set of named efficiencies for every row, not
a per-row fit.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

from ..models import datasets_dir, load
from ..models.config import ModelConfig
from .errors import TrainingError
from .plan import SearchSpace, TrainingPlan, plan_training
from .simulate import TrainingParams

__all__ = [
    "PublishedRun",
    "Comparison",
    "load_published",
    "megatron_flops_per_iteration",
    "compare_megatron",
    "MEGATRON_PARAMS",
]

# One calibration for every row: the default TrainingParams (CALIBRATED_COST: 65% of peak
# for contractions, 80% of bandwidth). Nothing here depends on a row.
MEGATRON_PARAMS = TrainingParams()


@dataclass(frozen=True)
class PublishedRun:
    """One row of a published table (fields as in the CSV)."""

    model: str
    params_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    achieved_tflops_per_gpu: float
    percent_of_peak: float
    hardware: str
    seq: int
    vocab: int
    schedule: str
    recompute: str
    source: str

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


def load_published(name: str = "megatron_2021_table1") -> tuple[PublishedRun, ...]:
    """Rows of ``datasets/published/NAME.csv``.

    >>> rows = load_published()
    >>> rows[0].model, rows[-1].achieved_tflops_per_gpu
    ('megatron-1.7b', 163.0)
    """
    path = datasets_dir() / "published" / f"{name}.csv"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.csv"))
        raise TrainingError(f"no published table {name!r}; available: {', '.join(have)}")
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            out.append(
                PublishedRun(
                    model=row["model"],
                    params_billion=float(row["params_billion"]),
                    heads=int(row["heads"]),
                    hidden=int(row["hidden"]),
                    layers=int(row["layers"]),
                    tp=int(row["tp"]),
                    pp=int(row["pp"]),
                    gpus=int(row["gpus"]),
                    global_batch=int(row["global_batch"]),
                    achieved_tflops_per_gpu=float(row["achieved_tflops_per_gpu"]),
                    percent_of_peak=float(row["percent_of_peak"]),
                    hardware=row["hardware"],
                    seq=int(row["seq"]),
                    vocab=int(row["vocab"]),
                    schedule=row["schedule"],
                    recompute=row["recompute"],
                    source=row["source"],
                )  # fmt: skip
            )
    return tuple(out)


def megatron_flops_per_iteration(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Narayanan et al. 2021's FLOPs per iteration (with full recomputation):
    ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``.

    >>> round(megatron_flops_per_iteration(load("megatron-1.7b"), 512, 2048) / 1e15, 1)
    15.5
    """
    h, l, V = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    return 96 * batch * seq * l * h**2 * (1 + seq / (6 * h) + V / (16 * l * h))


@dataclass(frozen=True)
class Comparison:
    """Published vs predicted for one run."""

    run: PublishedRun
    plan: TrainingPlan = field(repr=False)
    predicted_tflops_per_gpu: float

    @property
    def ratio(self) -> float:
        return self.predicted_tflops_per_gpu / self.run.achieved_tflops_per_gpu

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.run.model, "gpus": self.run.gpus, "tp": self.run.tp,
            "pp": self.run.pp, "global_batch": self.run.global_batch,
            "published_tflops_per_gpu": self.run.achieved_tflops_per_gpu,
            "predicted_tflops_per_gpu": self.predicted_tflops_per_gpu, "ratio": self.ratio,
            "config": str(self.plan.config), "step_time_s": self.plan.sim.step_time_s,
        }  # fmt: skip


def row_space(run: PublishedRun) -> SearchSpace:
    """The published configuration: its TP, PP, schedule, recomputation, no ZeRO and no
    sequence parallelism (2021); microbatch size and chunks per device left open."""
    sched = run.schedule if run.pp > 1 else "1f1b"
    return SearchSpace(
        tp=(run.tp,), pp=(run.pp,), schedules=(sched,), virtual_stages=(2, 3, 4), zero=(0,),
        recompute=(run.recompute,), sp=(False,),
    )  # fmt: skip


def compare_megatron(
    params: TrainingParams = MEGATRON_PARAMS, rows: tuple[PublishedRun, ...] | None = None
) -> tuple[Comparison, ...]:
    """Simulate each Table 1 configuration and count its FLOPs as the paper does."""
    out = []
    for run in rows or load_published():
        cfg = load(run.model)
        plan = plan_training(
            cfg, run.gpus, run.hardware, run.global_batch, run.seq, params,
            space=row_space(run), top_k=1, simulate_top=1,
        )  # fmt: skip
        flops = megatron_flops_per_iteration(cfg, run.global_batch, run.seq)
        pred = flops / plan.sim.step_time_s / run.gpus / 1e12
        out.append(Comparison(run, plan, pred))
    return tuple(out)
