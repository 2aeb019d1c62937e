"""``MeasuredRun``: one training step timed on a real cluster, and the published runs.

A measured run is what `calibrate` fits the step model to: the model, the parallel
configuration, the hardware, the global batch, the sequence length and the measured step
time (and, if known, the memory per device).

Published runs live in ``datasets/published/*.csv``. Files in the measured format (every
file but ``megatron_2021_table1.csv``, which `load_published` reads) have one row per run
with the columns of `MEASURED_COLUMNS`. A row gives either ``step_time_s`` or
``tflops_per_gpu``; a TFLOP/s figure becomes a step time with the FLOP count the source
used (``flops_convention``: ``megatron2021``, Narayanan et al.'s formula with
recomputation; ``model``, the simulator's model FLOPs, forward + backward). Fields a paper
does not give (``microbatch_size``, ``virtual_stages``) are left empty and `published_runs`
fills them with the planner's choice within the row's layout, under the default
`TrainingParams`, and says so in the run's ``source``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property

from ..errors import ExplorerError
from ..hardware import Cluster, resolve
from ..models import ModelConfig, datasets_dir, load
from .config import ParallelConfig

__all__ = [
    "MeasuredRun",
    "CalibrationError",
    "MEASURED_COLUMNS",
    "measured_datasets",
    "load_measured_rows",
    "published_runs",
    "megatron_table1_runs",
    "cluster_with_devices",
]


class CalibrationError(ExplorerError, ValueError):
    """A measured run or a calibration request is malformed (a non-positive or non-finite
    time, an unknown parameter name, bounds that exclude the start); the message names
    the value, the reason and the fix."""


MEASURED_COLUMNS = (
    "dataset", "model", "hardware", "gpus", "dp", "tp", "pp", "cp", "sp", "zero",
    "microbatch_size", "schedule", "virtual_stages", "recompute", "global_batch", "seq",
    "step_time_s", "tflops_per_gpu", "flops_convention", "source", "note",
)  # fmt: skip


@dataclass(frozen=True)
class MeasuredRun:
    """One measured training step.

    Args:
        model: a `ModelConfig` or a zoo name such as ``"gpt3-175b"``.
        config: the `ParallelConfig` the run used.
        hardware: a hardware profile name or a `Cluster`.
        global_batch: sequences per step (divisible as ``config`` requires).
        seq: sequence length.
        step_time_s: the measured time of one step in seconds (finite, > 0).
        memory_bytes: the measured peak memory per device, or None.
        source: where the number comes from (a paper and table, a log file).

    >>> import explorer as ex
    >>> r = ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=2), "a100-80g", 16, 512, 0.2)
    >>> r.label
    'gpt2 dp2 tp1 pp1 mb1'
    """

    model: ModelConfig | str
    config: ParallelConfig
    hardware: str | Cluster
    global_batch: int
    seq: int
    step_time_s: float
    memory_bytes: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.model, (ModelConfig, str)):
            raise CalibrationError(
                f"MeasuredRun.model={self.model!r}; expected a ModelConfig or a zoo name "
                "such as 'gpt3-175b'"
            )
        if not isinstance(self.config, ParallelConfig):
            raise CalibrationError(
                f"MeasuredRun.config={self.config!r}; expected a ParallelConfig, e.g. "
                "ParallelConfig(dp=8, tp=8)"
            )
        for name in ("global_batch", "seq"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CalibrationError(f"MeasuredRun.{name}={v!r}; expected an int >= 1")
        _check_positive("step_time_s", self.step_time_s, "the measured seconds per step")
        if self.memory_bytes is not None:
            _check_positive("memory_bytes", self.memory_bytes, "bytes per device, or None")
        if not isinstance(self.source, str):
            raise CalibrationError(f"MeasuredRun.source={self.source!r}; expected a str")
        self.cfg  # noqa: B018 -- an unknown model name fails here, not in the fit
        self.cluster  # noqa: B018
        self.config.microbatches(self.global_batch)  # ParallelConfigError names the batch

    # Loaded once per run (a calibration predicts each run hundreds of times); the cached
    # values are not fields, so equality, hashing and as_dict see only the fields.
    @cached_property
    def cfg(self) -> ModelConfig:
        """The model config (loaded from the zoo when given by name)."""
        return self.model if isinstance(self.model, ModelConfig) else load(self.model)

    @cached_property
    def cluster(self) -> Cluster:
        """The hardware profile (loaded from the catalog when given by name)."""
        return resolve(self.hardware)

    @property
    def model_name(self) -> str:
        return self.model.name if isinstance(self.model, ModelConfig) else self.model

    @property
    def hardware_name(self) -> str:
        return self.hardware.name if isinstance(self.hardware, Cluster) else self.hardware

    @property
    def label(self) -> str:
        """A short name for tables and plots: model and layout."""
        c = self.config
        cp = f" cp{c.cp}" if getattr(c, "cp", 1) > 1 else ""
        return f"{self.model_name} dp{c.dp} tp{c.tp} pp{c.pp}{cp} mb{c.microbatch_size}"

    def as_dict(self) -> dict[str, object]:
        """Plain JSON values; a model given as a `ModelConfig` is written out in full."""
        out: dict[str, object] = {
            "model": self.model_name, "config": self.config.as_dict(),
            "hardware": self.hardware_name, "hardware_max_nodes": self.cluster.max_nodes,
            "global_batch": self.global_batch, "seq": self.seq,
            "step_time_s": self.step_time_s, "memory_bytes": self.memory_bytes,
            "source": self.source,
        }  # fmt: skip
        if isinstance(self.model, ModelConfig):
            out["model_config"] = asdict(self.model)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> MeasuredRun:
        """Inverse of `as_dict` (hardware by catalog name; a profile grown to more nodes
        by `cluster_with_devices` keeps its node count)."""
        try:
            config = ParallelConfig(**d["config"])
            hw = d["hardware"]
            nodes = d.get("hardware_max_nodes")
            if nodes is not None and nodes != resolve(hw).max_nodes:
                hw = replace(resolve(hw), max_nodes=nodes)
            model = d["model"]
            if d.get("model_config") is not None:
                fields_ = {k: tuple(v) if isinstance(v, list) else v
                           for k, v in d["model_config"].items()}  # fmt: skip
                model = ModelConfig(**fields_)
            return cls(
                model, config, hw, d["global_batch"], d["seq"],
                d["step_time_s"], d.get("memory_bytes"), d.get("source", ""),
            )  # fmt: skip
        except (KeyError, TypeError) as e:
            raise CalibrationError(
                f"a measured run's record {d!r} is malformed ({e}); expected the keys of "
                "MeasuredRun.as_dict()"
            ) from None

    def __str__(self) -> str:
        return f"{self.label} on {self.hardware_name}: {self.step_time_s:.4g} s/step"


def _check_positive(name: str, v: object, what: str) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if not ok or not math.isfinite(v) or v <= 0:
        raise CalibrationError(f"MeasuredRun.{name}={v!r}; expected a finite number > 0 ({what})")


# ----- published runs -------------------------------------------------------------------
def measured_datasets() -> tuple[str, ...]:
    """Names of the published files in the measured format."""
    folder = datasets_dir() / "published"
    out = []
    for p in sorted(folder.glob("*.csv")):
        with p.open(newline="") as f:
            header = next(csv.reader(f), [])
        if tuple(header) == MEASURED_COLUMNS:
            out.append(p.stem)
    return tuple(out)


def load_measured_rows(name: str) -> tuple[dict[str, str], ...]:
    """The raw rows of ``datasets/published/NAME.csv`` (measured format)."""
    path = datasets_dir() / "published" / f"{name}.csv"
    if name not in measured_datasets():
        raise CalibrationError(
            f"no published table {name!r} in the measured format; available: "
            f"{', '.join(measured_datasets())}"
        )
    with path.open(newline="") as f:
        return tuple(csv.DictReader(f))


def _int(row: dict[str, str], key: str, default: int | None = None) -> int | None:
    v = row[key].strip()
    return int(v) if v else default


def published_runs(
    name: str, skip_unsupported: bool = True, skipped: list[str] | None = None
) -> tuple[MeasuredRun, ...]:
    """The rows of a measured-format table as `MeasuredRun` values.

    Rows the step model cannot take (``cp`` > 1 without context parallelism, or open
    fields for which the planner finds no configuration that fits in memory) are skipped
    when ``skip_unsupported`` (with the reason appended to ``skipped``), else raise.
    """
    from .simulate import estimate

    out = []
    for row in load_measured_rows(name):
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


def cluster_with_devices(hardware: str | Cluster, devices: int) -> str | Cluster:
    """``hardware`` itself when it holds ``devices`` chips; else the same profile with
    enough nodes (a published run on more chips than the catalog's profile lists)."""
    cluster = resolve(hardware)
    nodes = -(-devices // cluster.chips_per_node)
    if nodes <= cluster.max_nodes:
        return hardware
    return replace(cluster, max_nodes=nodes)


def _supports_cp() -> bool:
    from .plan import SearchSpace

    names = {f.name for f in fields(ParallelConfig)} & {f.name for f in fields(SearchSpace)}
    return "cp" in names


def _planned(cfg, row, known, missing, hw, gb, seq, cp) -> dict[str, object]:
    """The planner's values for the fields a source leaves open, within its layout."""
    from .plan import SearchSpace, plan_training

    space: dict[str, object] = dict(tp=(known["tp"],), pp=(known["pp"],), sp=(known["sp"],))
    plural = {"microbatch_size": "microbatch_sizes", "zero": "zero", "recompute": "recompute",
              "virtual_stages": "virtual_stages", "schedule": "schedules"}  # fmt: skip
    for k, key in plural.items():
        if known[k] is not None and not (k == "virtual_stages" and known[k] == 1):
            space[key] = (known[k],)
    if "recompute" in missing:
        space["recompute"] = ("none", "selective", "full")
    from .published import EVEN_CHUNK_DATASETS, run_params

    if "virtual_stages" in missing and row["dataset"] in EVEN_CHUNK_DATASETS:
        L, pp = cfg.num_layers, known["pp"]  # the framework splits chunks evenly
        space["virtual_stages"] = tuple(v for v in (2, 3, 4) if L % (pp * v) == 0) or (2,)
    if cp > 1:
        space["cp"] = (cp,)
        space["cp_kv_exchange"] = ("all_gather",)  # the run's config keeps the default
    params = run_params(row["dataset"])  # the dataset's facts (flash attention, ...)
    plan = plan_training(
        cfg, _int(row, "gpus"), hw, gb, seq, params, space=SearchSpace(**space), top_k=1
    )
    return {k: getattr(plan.config, k) for k in missing}


def _step_flops(convention, cfg, config, hw, gb, seq, estimate) -> float:
    from .published import FLOP_CONVENTIONS, flops_per_step

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
    from .published import compare_megatron, megatron_flops_per_iteration

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
