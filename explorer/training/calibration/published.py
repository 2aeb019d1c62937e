"""Published training runs, and our predictions for them.

``datasets/published/megatron_2021_table1.csv``: Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC21), Table 1:
GPT models on A100-80GB SXM (peak 312 TFLOP/s), sequence 2048, vocabulary 51200,
interleaved 1F1B, full recomputation, data parallel = GPUs / (TP * PP). The microbatch
size and the chunks per device are not in the table; `compare_megatron` lets the planner
pick them within the row's TP, PP, schedule and recomputation.

The calibration (`MEGATRON_PARAMS`) is one set of named efficiencies for every row, not
a per-row fit.

The other files are in the measured format (`published_runs`): the 2021-2024 paper tables,
and today's stacks (issue 24; `STACK_COLUMNS`, parsed cell by cell in ``stack_rows``): each
such row carries its role (fit or check), its stack (predicted with that stack's preset,
`measured_params`) and its precision.

Also data, not code paths: `FLOP_CONVENTIONS` (``flops``: how each source turned a step time
into TFLOP/s; the CSVs' ``flops_convention`` column names one per row), `RUN_FACTS` (what a
dataset's runs used beyond their layout: a fused attention kernel, a framework's overhead),
`FIT_ROWS` (the rows a default or fact was fitted on; every other row is check data) and
`EVEN_CHUNK_DATASETS`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ...errors import ExplorerError
from ...hardware import HardwareError, resolve
from ...models import ModelConfigError, datasets_dir, load
from ..config import SCHEDULES, ParallelConfig
from ..errors import CalibrationError, ParallelConfigError, TrainingError
from ..params import TrainingParams
from ..planning.homogeneous import plan_homogeneous
from ..planning.result import TrainingPlan
from ..planning.space import SearchSpace
from .flops import (
    FLOP_CONVENTIONS,
    FlopConvention,
    flops_per_step,
    megatron2024_flops_per_step,
    megatron_flops_per_iteration,
    palm_flops_per_step,
    step_flops,
)
from .measured import (
    PRECISIONS,
    STACK_COLUMNS,
    MeasuredRun,
    cluster_with_devices,
    load_measured_rows,
)
from .stack_rows import (
    STACK_NAMES,
    cell_choice,
    cell_float,
    cell_int,
    parse_knobs,
    per_layer_count,
    precision_supported,
    recompute_of,
    stack_params,
    with_precision,
)

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
    "megatron2024_flops_per_step",
    "palm_flops_per_step",
    "STACK_NAMES",
    "stack_params",
    "measured_params",
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
    fields for which the planner finds no configuration that fits in memory; in the files
    of today's stacks also a chip or model without a profile, FP8 where `TrainingParams`
    has no ``precision``, a layout `ParallelConfig` refuses such as ``ep`` not dividing
    ``dp``) are skipped when ``skip_unsupported`` (with the reason appended to
    ``skipped``), else raise. A malformed cell raises `CalibrationError` naming the file,
    the row and the column either way. ``where`` keeps only the rows it returns true for,
    given their raw text fields, before any row is planned (a row with open fields costs a
    planner search): ``where=lambda row: row["zero"] == "3"``.

    A stack file's row (`STACK_COLUMNS`) keeps its dataset, role, stack, precision,
    tokens/s, MFU, activation checkpointing and knobs on the `MeasuredRun`; its step time
    is the published one, else ``global_batch * seq / (tokens_per_s_per_gpu * gpus)``,
    else its TFLOP/s under its ``flops_convention``; ``memory_gib`` becomes
    ``memory_bytes``. Open fields are planned under `measured_params` (its stack's preset).

    >>> runs = published_runs("torchtitan_2024_perf", where=lambda r: r["hardware"] == "a100-80g")
    >>> runs[0].role, runs[0].stack, round(runs[0].step_time_s, 2)
    ('check', 'torchtitan', 2.82)
    """
    out = []
    for row in load_measured_rows(name):
        if where is not None and not where(row):
            continue
        if STACK_COLUMNS[0] in row:
            run = _stack_run(name, row, skip_unsupported, skipped)
        else:
            run = _paper_run(name, row, skip_unsupported, skipped)
        if run is not None:
            out.append(run)
    return tuple(out)


def _paper_run(name, row, skip_unsupported, skipped) -> MeasuredRun | None:
    """One row of a paper table (`MEASURED_COLUMNS` only)."""
    cp = _int(row, "cp", 1)
    what = f"{name}: {row['model']} on {row['gpus']} GPUs, seq {row['seq']}"
    if cp > 1 and not _supports_cp():
        if skip_unsupported:
            if skipped is not None:
                skipped.append(f"{what}: needs context parallelism (cp={cp})")
            return None
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
            params = run_params(row["dataset"])  # the dataset's facts (flash attention, ...)
            known.update(_planned(cfg, row, known, missing, hw, gb, seq, cp, params))
        except ExplorerError as e:
            if not skip_unsupported:
                raise
            if skipped is not None:
                skipped.append(f"{what}: the planner finds no configuration ({e})")
            return None
        source += f"; {', '.join(missing)} chosen by the planner (not published)"
    config = ParallelConfig(**known)
    step = row["step_time_s"].strip()
    if step:
        t = float(step)
    else:
        tflops = float(row["tflops_per_gpu"])
        flops = step_flops(row["flops_convention"], cfg, config, hw, gb, seq)
        t = flops / (tflops * 1e12 * config.devices)
        source += f"; step time from {tflops:g} TFLOP/s/GPU ({row['flops_convention']} FLOPs)"
    return MeasuredRun(cfg, config, hw, gb, seq, t, source=source)


def _stack_run(name, row, skip_unsupported, skipped) -> MeasuredRun | None:
    """One row of a stack file (`STACK_COLUMNS` appended); None when skipped."""
    path = f"datasets/published/{name}.csv"
    c = {k: cell_int(path, row, k) for k in (
        "gpus", "dp", "tp", "pp", "cp", "microbatch_size", "virtual_stages", "global_batch",
        "seq", "ep")}  # fmt: skip
    zero = cell_int(path, row, "zero", minimum=0)
    x = {k: cell_float(path, row, k) for k in (
        "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "mfu_percent",
        "memory_gib")}  # fmt: skip
    role = cell_choice(path, row, "role", ("fit", "check"))
    precision = cell_choice(path, row, "precision", PRECISIONS)
    sp = cell_choice(path, row, "sp", ("", "true", "false"))
    schedule = cell_choice(path, row, "schedule", ("", *SCHEDULES)) or None
    policy, recompute_why = recompute_of(path, row)
    stack = cell_choice(path, row, "stack", STACK_NAMES)
    knobs = parse_knobs(path, row)
    for k in ("gpus", "dp", "tp", "pp", "cp", "global_batch", "seq"):
        if c[k] is None:
            raise CalibrationError(
                f"{path}, row {row['_line']}, column {k!r}: empty; every row gives its "
                "GPUs, dp, tp, pp, cp, global batch and sequence length"
            )
    if c["dp"] * c["tp"] * c["pp"] * c["cp"] != c["gpus"]:
        raise CalibrationError(
            f"{path}, row {row['_line']}, column 'gpus': {c['gpus']} GPUs but dp x tp x pp x "
            f"cp = {c['dp']} x {c['tp']} x {c['pp']} x {c['cp']}; dp is GPUs / (tp x pp x cp)"
        )
    if not (x["step_time_s"] or x["tokens_per_s_per_gpu"] or x["tflops_per_gpu"]):
        raise CalibrationError(
            f"{path}, row {row['_line']}, column 'step_time_s': no measurement; give "
            "step_time_s, tokens_per_s_per_gpu or tflops_per_gpu"
        )
    gpus, gb, seq, ep = c["gpus"], c["global_batch"], c["seq"], c["ep"] or 1
    what = (f"{name} row {row['_line']} ({role}): {row['model']} on {gpus} {row['hardware']}, "
            f"{precision}, seq {seq}")  # fmt: skip

    def skip(reason: str) -> None:
        if not skip_unsupported:
            raise CalibrationError(f"{what}: {reason}")
        if skipped is not None:
            skipped.append(f"{what}: {reason}")

    try:
        resolve(row["hardware"])
    except HardwareError:
        return skip(
            f"no hardware profile {row['hardware']!r} in datasets/hardware (add one to predict "
            "this row)"
        )
    try:
        cfg = load(row["model"])
    except ModelConfigError:
        return skip(f"no model config {row['model']!r} (datasets/models, datasets/models/runs)")
    if precision != "bf16" and not precision_supported():
        return skip(
            f"precision {precision}: TrainingParams has no precision field in this version "
            "(FP8 GEMMs are not modelled)"
        )
    layout = dict(dp=c["dp"], tp=c["tp"], pp=c["pp"], cp=c["cp"], ep=ep)
    try:
        ParallelConfig(**layout)
        etp_why = ""
    except ParallelConfigError as e:
        etp_why = _expert_tp_one(layout)
        if not etp_why:
            return skip(f"the layout cannot be expressed: {e}")
    base, which = stack_params(stack, name, precision, knobs, cfg, seq)
    params = with_precision(run_params(name, base), precision)
    n_full = per_layer_count(cfg.num_layers, c["pp"]) if policy == "per_layer" else None
    known: dict[str, object] = dict(
        dp=c["dp"], tp=c["tp"], pp=c["pp"],
        sp=False if c["tp"] == 1 else {"true": True, "false": False}.get(sp),
        schedule=schedule, zero=zero, recompute=policy,
        microbatch_size=c["microbatch_size"], virtual_stages=c["virtual_stages"],
    )  # fmt: skip
    if schedule not in (None, "interleaved_1f1b"):
        known["virtual_stages"] = 1
    source = f"{row['source']}; {recompute_why}"
    missing = [k for k, v in known.items() if v is None]
    if c["cp"] > 1:
        known["cp"] = c["cp"]
    if ep > 1:
        known["ep"] = ep
    shard = _hsdp_shard(row["sharding"], c["dp"])
    if shard:  # hybrid sharding: ZeRO over the FSDP group, replicated over DP (HSDP)
        known["dp_shard"] = shard
        source += f"; HSDP: dp_shard {shard} of dp {c['dp']} (sharding column)"
    if etp_why:
        known["etp"] = 1
        source += f"; {etp_why}"
    if n_full is not None:
        known["recompute_num_layers"] = n_full
    hw = cluster_with_devices(row["hardware"], gpus)
    if missing:
        try:
            known.update(_planned(cfg, row, known, missing, hw, gb, seq, c["cp"], params,
                                  pin=True))  # fmt: skip
        except ExplorerError as e:
            return skip(f"the planner finds no configuration for the open fields ({e})")
        source += f"; {', '.join(missing)} chosen by the planner under {which} (not published)"
    try:
        config = ParallelConfig(**known)
        config.microbatches(gb)
    except ParallelConfigError as e:
        return skip(f"the layout cannot be expressed: {e}")
    if x["step_time_s"]:
        t = x["step_time_s"]
    elif x["tokens_per_s_per_gpu"]:
        t = gb * seq / (x["tokens_per_s_per_gpu"] * gpus)
        source += f"; step time from {x['tokens_per_s_per_gpu']:g} tokens/s/GPU"
    else:
        convention = row["flops_convention"].strip()
        try:
            flops = step_flops(convention, cfg, config, hw, gb, seq)
        except TrainingError as e:
            raise CalibrationError(
                f"{path}, row {row['_line']}, column 'flops_convention': {e}"
            ) from None
        t = flops / (x["tflops_per_gpu"] * 1e12 * gpus)
        source += f"; step time from {x['tflops_per_gpu']:g} TFLOP/s/GPU ({convention} FLOPs)"
    if row["sharding"].strip():
        source += f"; sharding: {row['sharding'].strip()}"
    if row["fp8_recipe"].strip():
        source += f"; FP8 recipe: {row['fp8_recipe'].strip()}"
    memory = x["memory_gib"] * 2**30 if x["memory_gib"] else None
    return MeasuredRun(
        cfg, config, hw, gb, seq, t, memory, source, dataset=name, role=role, stack=stack,
        precision=precision, tokens_per_s_per_gpu=x["tokens_per_s_per_gpu"],
        mfu_percent=x["mfu_percent"], ac_mode=row["ac_mode"].strip(), knobs=knobs,
    )  # fmt: skip


def _hsdp_shard(sharding: str, dp: int) -> int | None:
    """The FSDP group of a row whose ``sharding`` column reads ``FSDP <n> x DP <r>`` with
    ``r > 1`` and ``n * r == dp`` (MaxText's ici_fsdp_parallelism inside
    dcn_data_parallelism: hybrid sharding, `ParallelConfig.dp_shard`); else None.

    >>> _hsdp_shard("JAX FSDP 128 x DP 4", 512), _hsdp_shard("JAX FSDP 64 x DP 1", 64)
    (128, None)
    """
    m = re.search(r"FSDP\s+(\d+)\s*x\s*DP\s+(\d+)", sharding or "")
    if not m or int(m.group(2)) == 1 or int(m.group(1)) * int(m.group(2)) != dp:
        return None
    return int(m.group(1))


def _expert_tp_one(layout: dict[str, int]) -> str:
    """Why expert tensor parallelism 1 is the row's, when the layout is refused with the
    default (``etp = tp``) and accepted with ``etp = 1``; else ``""``. Megatron-Core checks
    ``world % (etp x ep x pp) == 0`` (MoE parallel folding), so a published layout that
    fails it with ``etp = tp`` ran with a smaller ``etp``; 1 is the one the recipes use."""
    if "etp" not in {f.name for f in fields(ParallelConfig)} or layout["tp"] == 1:
        return ""
    try:
        ParallelConfig(**layout, etp=1)
    except ParallelConfigError:
        return ""
    return (
        f"etp 1 (not published): with etp = tp = {layout['tp']}, etp x ep does not divide a "
        "stage's devices, which Megatron-Core refuses"
    )


def measured_params(run: MeasuredRun, base: TrainingParams | None = None) -> TrainingParams:
    """The `TrainingParams` ``run`` is predicted with: ``base`` (default: for a stack row
    the preset of its stack with its precision and knobs, `stack_params`; else
    `TrainingParams()`) with its dataset's `RUN_FACTS` and its precision (`with_precision`)."""
    if base is None and run.stack:
        base = stack_params(run.stack, run.dataset, run.precision, run.knobs, run.cfg, run.seq)[0]
    elif base is None:
        base = TrainingParams()
    params = run_params(run.dataset, base) if run.dataset else base
    if run.stack or run.precision != "bf16":
        params = with_precision(params, run.precision)
    return params


def _supports_cp() -> bool:
    names = {f.name for f in fields(ParallelConfig)} & {f.name for f in fields(SearchSpace)}
    return "cp" in names


def _planned(cfg, row, known, missing, hw, gb, seq, cp, params, pin=False) -> dict[str, object]:
    """The planner's values for the fields a source leaves open, within its layout under
    ``params``; ``pin`` also holds the row's cp (1 included) and ep, and lets it choose
    sequence parallelism when the source does not say."""
    sp = (known["sp"],) if known["sp"] is not None else (True, False)
    space: dict[str, object] = dict(tp=(known["tp"],), pp=(known["pp"],), sp=sp)
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
    if cp > 1 or pin:
        space["cp"] = (cp,)
        space["cp_kv_exchange"] = ("all_gather",)  # the run's config keeps the default
    if pin:
        space["ep"] = (known.get("ep", 1),)
        if "etp" in known:
            space["etp"] = (known["etp"],)
    # a stack row ranks by `estimate` and simulates the best one only (220 rows are planned)
    plan = plan_homogeneous(
        cfg, _int(row, "gpus"), hw, gb, seq, params, space=SearchSpace(**space), top_k=1,
        simulate_top=1 if pin else 3,
    )  # fmt: skip
    return {k: getattr(plan.config, k) for k in missing}


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
