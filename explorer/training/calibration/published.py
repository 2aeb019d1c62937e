"""Published training runs, and our predictions for them.

``datasets/published/megatron_2021_table1.csv``: Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC21), Table 1:
GPT models on A100-80GB SXM (peak 312 TFLOP/s), sequence 2048, vocabulary 51200,
interleaved 1F1B, full recomputation, data parallel = GPUs / (TP * PP). The microbatch
size and the chunks per device are not in the table; `compare_megatron` lets the planner
pick them within the row's TP, PP, schedule and recomputation.

The calibration (`MEGATRON_PARAMS`) is one set of named efficiencies for every row, not
a per-row fit.

Also data, not code paths: `FLOP_CONVENTIONS` (how each source turned a step time into
TFLOP/s; the CSVs' ``flops_convention`` column names one per row), `RUN_FACTS` (what a
dataset's runs used beyond their layout: a fused attention kernel, a framework's overhead),
`FIT_ROWS` (the rows a default or fact was fitted on; every other row is check data) and
`EVEN_CHUNK_DATASETS`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ...errors import ExplorerError
from ...models import datasets_dir, load
from ...models.config import ModelConfig
from ..config import ParallelConfig
from ..errors import CalibrationError, TrainingError
from ..params import TrainingParams
from ..planning.homogeneous import plan_homogeneous
from ..planning.result import TrainingPlan
from ..planning.space import SearchSpace
from ..simulate import estimate
from .measured import MeasuredRun, cluster_with_devices, load_measured_rows

__all__ = [
    "PublishedRun",
    "Comparison",
    "load_published",
    "megatron_flops_per_iteration",
    "compare_megatron",
    "MEGATRON_PARAMS",
    "FlopConvention",
    "FLOP_CONVENTIONS",
    "flops_per_step",
    "RunFacts",
    "RUN_FACTS",
    "run_params",
    "EVEN_CHUNK_DATASETS",
    "DEEPSPEED_PIPELINE_OVERHEAD_S",
    "FIT_ROWS",
    "row_role",
    "published_runs",
    "megatron_table1_runs",
]

# Datasets whose runs used Megatron-LM 2021's interleaved schedule, which needs the layers
# to split evenly over pp * v chunks (Narayanan et al. 2021, section 2.2.2): the planner
# fills their open chunk counts only with such v.
EVEN_CHUNK_DATASETS = frozenset({"megatron_2021_table1", "megatron_2021_table2"})

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
    # Megatron-LM (2021) splits layers evenly over the chunks: only such v were runnable
    vs = tuple(v for v in (2, 3, 4) if run.layers % (run.pp * v) == 0) or (2,)
    return SearchSpace(
        tp=(run.tp,), pp=(run.pp,), schedules=(sched,), virtual_stages=vs, zero=(0,),
        recompute=(run.recompute,), sp=(False,),
    )  # fmt: skip


def compare_megatron(
    params: TrainingParams = MEGATRON_PARAMS, rows: tuple[PublishedRun, ...] | None = None
) -> tuple[Comparison, ...]:
    """Simulate each Table 1 configuration and count its FLOPs as the paper does."""
    out = []
    for run in rows or load_published():
        cfg = load(run.model)
        plan = plan_homogeneous(
            cfg, run.gpus, run.hardware, run.global_batch, run.seq, params,
            space=row_space(run), top_k=1, simulate_top=1,
        )  # fmt: skip
        flops = megatron_flops_per_iteration(cfg, run.global_batch, run.seq)
        pred = flops / plan.sim.step_time_s / run.gpus / 1e12
        out.append(Comparison(run, plan, pred))
    return tuple(out)


# ----- FLOP conventions: how each source turned a step time into TFLOP/s -----------------
@dataclass(frozen=True)
class FlopConvention:
    """One way of counting a training step's FLOPs, as a published paper did.

    Attributes:
        name: the key used in the CSVs' ``flops_convention`` column.
        formula: the count, in words and symbols (B sequences of s tokens, l layers,
            hidden h, vocabulary V, N parameters).
        source: where the formula is stated.
    """

    name: str
    formula: str
    source: str

    def flops(self, cfg: ModelConfig, batch: int, seq: int) -> float:
        """FLOPs of one step of ``batch`` sequences of ``seq`` tokens."""
        if self.name == "megatron2021":
            return megatron_flops_per_iteration(cfg, batch, seq)
        if self.name == "palm":
            return palm_flops_per_step(cfg, batch, seq)
        raise TrainingError(
            f"flops convention {self.name!r} has no closed form here; expected one of "
            f"{', '.join(k for k in FLOP_CONVENTIONS if k != 'model')}"
        )


def palm_flops_per_step(cfg: ModelConfig, batch: int, seq: int) -> float:
    """Model FLOPs as PaLM counts them for MFU: ``B s (6 N + 12 l h s)`` (non-causal
    attention, no recomputation), N the parameters without the input embedding table (a
    lookup; the untied output head is a matmul and counts).

    >>> f = palm_flops_per_step(load("llama3-405b"), 2048, 8192)
    >>> round(f / 1e19, 2)
    4.4
    """
    h, l = cfg.hidden_size, cfg.num_layers
    n = cfg.num_params() - cfg.vocab_size * h
    return batch * seq * (6 * n + 12 * l * h * seq)


FLOP_CONVENTIONS: dict[str, FlopConvention] = {
    c.name: c
    for c in (
        FlopConvention(
            "megatron2021",
            "96 B s l h^2 (1 + s/(6h) + V/(16 l h)): forward, backward and one more forward "
            "(full recomputation); non-causal attention",
            "Narayanan et al. 2021 (SC21), section 5.1, eq. (3); Megatron-DeepSpeed's "
            "throughput log (BLOOM) computes the same with its checkpoint factor 4",
        ),
        FlopConvention(
            "palm",
            "B s (6 N + 12 l h s): model FLOPs, no recomputation, non-causal attention",
            "Chowdhery et al. 2022 (PaLM), appendix B (the MFU definition)",
        ),
        FlopConvention(
            "model",
            "the simulator's model FLOPs (forward + backward of every op, no recomputation)",
            "this project (explorer.training.simulate.SimResult.tflops_per_device)",
        ),
    )
}


def flops_per_step(convention: str, cfg: ModelConfig, batch: int, seq: int) -> float:
    """FLOPs of one step under a named `FLOP_CONVENTIONS` entry (``model`` needs the
    simulator: `explorer.training.calibration.published` computes it)."""
    if convention not in FLOP_CONVENTIONS:
        raise TrainingError(
            f"flops_convention={convention!r}; expected one of {', '.join(FLOP_CONVENTIONS)}"
        )
    return FLOP_CONVENTIONS[convention].flops(cfg, batch, seq)


# ----- what a source says about the run beyond its layout ---------------------------------
@dataclass(frozen=True)
class RunFacts:
    """`TrainingParams` fields a dataset's runs used, with where each comes from; the
    bench predicts the dataset's rows with them (never tuned on the rows)."""

    values: tuple[tuple[str, object], ...]
    source: str


# Seconds a stage's forward or backward of one microbatch costs in DeepSpeed's pipeline
# engine beyond its kernels (its schedule runs instruction by instruction in Python, with
# blocking point-to-point sends). Fitted by `bench/accuracy.py` (``fit_dataset_facts``:
# bounded least squares on log step time) on the FIT_ROWS of mtnlg_2022 only (530B on
# 2240 and 3360 GPUs); the 2800-GPU MT-NLG row and BLOOM (also Megatron-DeepSpeed) check it.
DEEPSPEED_PIPELINE_OVERHEAD_S = 0.0165

_DEEPSPEED_PIPE = RunFacts(
    (("microbatch_overhead_s", DEEPSPEED_PIPELINE_OVERHEAD_S),),
    "fitted on mtnlg_2022's fit rows (DEEPSPEED_PIPELINE_OVERHEAD_S): Megatron-DeepSpeed's "
    "PipelineEngine (MT-NLG: Smith et al. 2022 section 2; BLOOM: Bekman 2022) adds a fixed "
    "time per stage and microbatch that Megatron-LM's own schedule does not",
)

RUN_FACTS: dict[str, RunFacts] = {
    "llama3_2024_table4": RunFacts(
        (
            ("flash_attention", True),
            ("flash_attention_efficiency", 0.35),
            ("zero_grad_overlap_fraction", 1.0),
        ),
        "assumptions: a fused (flash) attention kernel (the Llama 3 paper does not name its "
        "attention kernel; 2024 H100 training stacks fuse attention, and only then does "
        "8K-token training fit without activation checkpointing, as section 3.3.2 says it "
        "did) running at FlashAttention-2's 35% of H100 peak (Shah et al. 2024, "
        "FlashAttention-3, arXiv:2407.08608, abstract; the default 0.6 is FlashAttention-2 "
        "on A100; FlashAttention-3, 75% on H100, was released after Llama 3's pretraining); "
        "PyTorch FSDP reduce-scatters each gradient on its own CUDA stream behind the "
        "backward that follows (Zhao et al. 2023, PyTorch FSDP, VLDB, section 3.3), so all "
        "of it may hide (still capped by the backward's length)",
    ),
    "mtnlg_2022": _DEEPSPEED_PIPE,
    "bloom_2022": _DEEPSPEED_PIPE,
}

# Rows that set a default or a dataset fact (fit data); every other row is check data.
# (dataset, model, dp): Narayanan et al. 2021 Table 1 set matmul_efficiency_cap (all ten
# rows, in sample); the even ZeRO-3 rows of Table 2 set zero_gather_overlap_fraction and
# zero_grad_overlap_fraction; MT-NLG's first and last rows set DEEPSPEED_PIPELINE_OVERHEAD_S.
FIT_ROWS: frozenset[tuple[str, str, int]] = frozenset(
    {("megatron_2021_table1", "*", 0)}
    | {("megatron_2021_table2", "gpt3-175b", 384), ("megatron_2021_table2", "gpt3-175b", 1536),
       ("megatron_2021_table2", "megatron-529.6b", 2240)}
    | {("mtnlg_2022", "megatron-529.6b", 8), ("mtnlg_2022", "megatron-529.6b", 12)}
)  # fmt: skip


def row_role(dataset: str, model: str, dp: int) -> str:
    """``fit`` when the row set a default or a dataset fact (`FIT_ROWS`), else ``check``."""
    if (dataset, "*", 0) in FIT_ROWS or (dataset, model, dp) in FIT_ROWS:
        return "fit"
    return "check"


def run_params(dataset: str, base: TrainingParams | None = None) -> TrainingParams:
    """``base`` (default `TrainingParams()`) with the `RUN_FACTS` of ``dataset``."""
    base = base or TrainingParams()
    facts = RUN_FACTS.get(dataset)
    return base.replace(**dict(facts.values)) if facts else base


# --- the measured-format tables as MeasuredRun values ----------------------------------
def _int(row: dict[str, str], key: str, default: int | None = None) -> int | None:
    v = row[key].strip()
    return int(v) if v else default


def published_runs(
    name: str, skip_unsupported: bool = True, skipped: list[str] | None = None,
    where: Callable[[dict[str, str]], bool] | None = None,
) -> tuple[MeasuredRun, ...]:  # fmt: skip
    """The rows of a measured-format table as `MeasuredRun` values.

    Rows the step model cannot take (``cp`` > 1 without context parallelism, or open
    fields for which the planner finds no configuration that fits in memory) are skipped
    when ``skip_unsupported`` (with the reason appended to ``skipped``), else raise.
    ``where`` keeps only the rows it returns true for, given their raw text fields, before
    any row is planned (a row with open fields costs a planner search):
    ``where=lambda row: row["zero"] == "3"``.
    """
    out = []
    for row in load_measured_rows(name):
        if where is not None and not where(row):
            continue
        cp = _int(row, "cp", 1)
        what = f"{name}: {row['model']} on {row['gpus']} GPUs, seq {row['seq']}"
        if cp > 1 and not _supports_cp():
            if skip_unsupported:
                if skipped is not None:
                    skipped.append(f"{what}: needs context parallelism (cp={cp})")
                continue
            raise CalibrationError(
                f"{name}: row {row['model']} on {row['gpus']} GPUs needs ParallelConfig(cp="
                f"{cp}) and SearchSpace.cp, which this version lacks"
            )
        gb, seq = _int(row, "global_batch"), _int(row, "seq")
        hw = cluster_with_devices(row["hardware"], _int(row, "gpus"))
        cfg = load(row["model"])
        known = dict(
            dp=_int(row, "dp"), tp=_int(row, "tp"), pp=_int(row, "pp"),
            sp=row["sp"].strip().lower() == "true", schedule=row["schedule"].strip() or None,
            zero=_int(row, "zero"), recompute=row["recompute"].strip() or None,
            microbatch_size=_int(row, "microbatch_size"),
            virtual_stages=_int(row, "virtual_stages"),
        )  # fmt: skip
        if cp > 1:
            known["cp"] = cp
        if known["schedule"] not in (None, "interleaved_1f1b"):
            known["virtual_stages"] = 1
        source = row["source"]
        missing = [k for k, v in known.items() if v is None]
        if missing:
            try:
                known.update(_planned(cfg, row, known, missing, hw, gb, seq, cp))
            except ExplorerError as e:
                if not skip_unsupported:
                    raise
                if skipped is not None:
                    skipped.append(f"{what}: the planner finds no configuration ({e})")
                continue
            source += f"; {', '.join(missing)} chosen by the planner (not published)"
        config = ParallelConfig(**known)
        step = row["step_time_s"].strip()
        if step:
            t = float(step)
        else:
            tflops = float(row["tflops_per_gpu"])
            flops = _step_flops(row["flops_convention"], cfg, config, hw, gb, seq, estimate)
            t = flops / (tflops * 1e12 * config.devices)
            source += f"; step time from {tflops:g} TFLOP/s/GPU ({row['flops_convention']} FLOPs)"
        out.append(MeasuredRun(cfg, config, hw, gb, seq, t, source=source))
    return tuple(out)


def _supports_cp() -> bool:
    names = {f.name for f in fields(ParallelConfig)} & {f.name for f in fields(SearchSpace)}
    return "cp" in names


def _planned(cfg, row, known, missing, hw, gb, seq, cp) -> dict[str, object]:
    """The planner's values for the fields a source leaves open, within its layout."""
    space: dict[str, object] = dict(tp=(known["tp"],), pp=(known["pp"],), sp=(known["sp"],))
    plural = {"microbatch_size": "microbatch_sizes", "zero": "zero", "recompute": "recompute",
              "virtual_stages": "virtual_stages", "schedule": "schedules"}  # fmt: skip
    for k, key in plural.items():
        if known[k] is not None and not (k == "virtual_stages" and known[k] == 1):
            space[key] = (known[k],)
    if "recompute" in missing:
        space["recompute"] = ("none", "selective", "full")
    if "virtual_stages" in missing and row["dataset"] in EVEN_CHUNK_DATASETS:
        L, pp = cfg.num_layers, known["pp"]  # the framework splits chunks evenly
        space["virtual_stages"] = tuple(v for v in (2, 3, 4) if L % (pp * v) == 0) or (2,)
    if cp > 1:
        space["cp"] = (cp,)
        space["cp_kv_exchange"] = ("all_gather",)  # the run's config keeps the default
    params = run_params(row["dataset"])  # the dataset's facts (flash attention, ...)
    plan = plan_homogeneous(
        cfg, _int(row, "gpus"), hw, gb, seq, params, space=SearchSpace(**space), top_k=1
    )
    return {k: getattr(plan.config, k) for k in missing}


def _step_flops(convention, cfg, config, hw, gb, seq, estimate) -> float:
    if convention in FLOP_CONVENTIONS and convention != "model":
        return flops_per_step(convention, cfg, gb, seq)
    if convention == "model":
        sim = estimate(cfg, config, hw, gb, seq)  # model FLOPs do not depend on the efficiencies
        return sim.tflops_per_device * 1e12 * sim.step_time_s * config.devices
    raise CalibrationError(
        f"flops_convention={convention!r}; expected one of {', '.join(FLOP_CONVENTIONS)}"
    )


def megatron_table1_runs() -> tuple[MeasuredRun, ...]:
    """Narayanan et al. 2021, Table 1 as measured runs: each row's TFLOP/s turned into a
    step time with the paper's FLOP formula; microbatch size and chunks per device are the
    planner's choice (the table does not give them), as in `compare_megatron`."""
    out = []
    for c in compare_megatron():
        r = c.run
        cfg = load(r.model)
        t = megatron_flops_per_iteration(cfg, r.global_batch, r.seq) / (
            r.achieved_tflops_per_gpu * 1e12 * r.gpus
        )
        src = (
            f"{r.source}; step time from {r.achieved_tflops_per_gpu:g} TFLOP/s/GPU "
            "(megatron2021 FLOPs); microbatch size and chunks per device chosen by the planner"
        )
        config = c.plan.config.replace(num_microbatches=None)
        out.append(MeasuredRun(cfg, config, r.hardware, r.global_batch, r.seq, t, source=src))
    return tuple(out)
