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

The files of today's stacks (issue 24: torchtitan, Megatron-Core, NeMo, Megatron-Bridge,
NeMo AutoModel, MaxText; ``datasets/published/README.md``) append `STACK_COLUMNS` after
``note``: the row's role (``fit`` or ``check``), the stack, its precision, expert
parallelism, the published tokens/s per GPU, MFU and peak memory, the activation
checkpointing in the source's words and the stack's other settings. `measured_datasets`
lists the paper tables (``"papers"``, the default), the stack files (``"stacks"``) or both.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Literal, get_args

from ...checks import is_int, is_number
from ...hardware import Chip, Cluster, HardwareError, Level, resolve
from ...hardware import names as hardware_names
from ...models import ModelConfig, datasets_dir, load
from ...traces import KinetoTrace, RankTrace, TracesError, breakdown
from ..config import ParallelConfig
from ..errors import CalibrationError
from .efficiency import KERNEL_PARTS, kernel_samples

__all__ = [
    "MeasuredRun",
    "MEASURED_COLUMNS",
    "STACK_COLUMNS",
    "Role",
    "Precision",
    "measured_datasets",
    "load_measured_rows",
    "cluster_with_devices",
    "STEP_CATEGORIES",
    "step_categories",
]


MEASURED_COLUMNS = (
    "dataset", "model", "hardware", "gpus", "dp", "tp", "pp", "cp", "sp", "zero",
    "microbatch_size", "schedule", "virtual_stages", "recompute", "global_batch", "seq",
    "step_time_s", "tflops_per_gpu", "flops_convention", "source", "note",
)  # fmt: skip

# The columns today's stack files append after ``note`` (datasets/published/README.md).
STACK_COLUMNS = (
    "role", "stack", "stack_version", "precision", "fp8_recipe", "ep",
    "tokens_per_s_per_gpu", "mfu_percent", "memory_gib", "ac_mode", "sharding", "knobs",
)  # fmt: skip

# The parts of a step both a profiler trace and the step model name (`step_categories`):
# compute (forward, backward, recomputation), the optimizer step, communication not hidden
# behind compute, and idle time (pipeline bubbles; in a trace also launch gaps and host
# overhead). Per device and step they add up to the step time.
STEP_CATEGORIES: tuple[str, ...] = ("compute", "optimizer", "communication", "idle")


def step_categories(time_by_kind) -> dict[str, float]:
    """The step model's `SimResult.time_by_kind` as `STEP_CATEGORIES` seconds: compute is
    ``compute-forward + compute-backward + recompute``; communication every ``*-comm`` kind
    and ``zero-gather``.

    >>> step_categories((("compute-forward", 1.0), ("compute-backward", 2.0), ("dp-comm", 0.5),
    ...                  ("idle", 0.25), ("optimizer", 0.1)))
    {'compute': 3.0, 'optimizer': 0.1, 'communication': 0.5, 'idle': 0.25}
    """
    kinds = dict(time_by_kind)
    comm = sum(v for k, v in kinds.items() if k.endswith("-comm") or k == "zero-gather")
    return {
        "compute": kinds.get("compute-forward", 0.0) + kinds.get("compute-backward", 0.0)
        + kinds.get("recompute", 0.0),
        "optimizer": kinds.get("optimizer", 0.0),
        "communication": comm,
        "idle": kinds.get("idle", 0.0),
    }  # fmt: skip


Role = Literal["", "fit", "check"]
ROLES: tuple[str, ...] = get_args(Role)
Precision = Literal["bf16", "fp8"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
DatasetKind = Literal["papers", "stacks", "all"]


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
        dataset: the published file the run comes from (``""``: none).
        role: ``fit`` (a value was fitted on it), ``check`` (kept for checking) or ``""``.
        stack: the training framework that ran it (``torchtitan``, ``megatron-core``, ...).
        precision: ``bf16`` or ``fp8`` (FP8 GEMMs, BF16 elsewhere), as the source states.
        tokens_per_s_per_gpu, mfu_percent: as published, or None.
        ac_mode: activation checkpointing in the source's words (``selective-op``, ...).
        knobs: the stack's other settings as published, ``(("compile", "true"), ...)``
            (`knobs_dict`).
        kernels: the GEMMs and fused attention ops a trace timed, per device and step
            (`efficiency.kernel_samples`: ``(part, dims, calls, seconds)``), as `from_trace`
            records them; `calibrate` then fits each part's efficiency knob to its own
            kernels (the step model's kernel times of those shapes). ``()``: none.
        categories: measured seconds per step of some `STEP_CATEGORIES`
            (``(("compute", 0.02), ("communication", 0.004), ...)``), as `from_trace` reads
            them from a profiler trace; `calibrate` then fits them too. ``()``: the step
            time only.

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
    dataset: str = ""
    role: Role = ""
    stack: str = ""
    precision: Precision = "bf16"
    tokens_per_s_per_gpu: float | None = None
    mfu_percent: float | None = None
    ac_mode: str = ""
    knobs: tuple[tuple[str, str], ...] = ()
    categories: tuple[tuple[str, float], ...] = ()
    kernels: tuple[tuple[str, tuple[int, ...], float, float], ...] = ()

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
            if not is_int(v, minimum=1, numpy=True):
                raise CalibrationError(f"MeasuredRun.{name}={v!r}; expected an int >= 1")
            object.__setattr__(self, name, int(v))  # numpy ints stored as the ints they are
        _check_positive("step_time_s", self.step_time_s, "the measured seconds per step")
        object.__setattr__(self, "step_time_s", float(self.step_time_s))
        if self.memory_bytes is not None:
            _check_positive("memory_bytes", self.memory_bytes, "bytes per device, or None")
            object.__setattr__(self, "memory_bytes", float(self.memory_bytes))
        for name in ("source", "dataset", "stack", "ac_mode"):
            if not isinstance(getattr(self, name), str):
                raise CalibrationError(
                    f"MeasuredRun.{name}={getattr(self, name)!r}; expected a str"
                )
        if self.role not in ROLES:
            raise CalibrationError(
                f"MeasuredRun.role={self.role!r}; expected 'fit', 'check' or '' (not stated)"
            )
        if self.precision not in PRECISIONS:
            raise CalibrationError(
                f"MeasuredRun.precision={self.precision!r}; expected 'bf16' or 'fp8' (FP8 "
                "GEMMs with BF16 weights and activations)"
            )
        for name in ("tokens_per_s_per_gpu", "mfu_percent"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name), "as published, or None")
                object.__setattr__(self, name, float(getattr(self, name)))
        if not isinstance(self.knobs, tuple) or not all(
            isinstance(k, tuple) and len(k) == 2 and all(isinstance(x, str) for x in k)
            for k in self.knobs
        ):
            raise CalibrationError(
                f"MeasuredRun.knobs={self.knobs!r}; expected a tuple of (name, value) str "
                "pairs, e.g. (('compile', 'true'),)"
            )
        object.__setattr__(self, "categories", _check_categories(self.categories))
        object.__setattr__(self, "kernels", _check_kernels(self.kernels))
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

    @classmethod
    def from_trace(
        cls,
        trace: KinetoTrace | RankTrace,
        model: ModelConfig | str,
        config: ParallelConfig,
        hardware: str | Cluster,
        global_batch: int,
        seq: int,
        *,
        skip: int = 1,
        axes: dict[str, int] | None = None,
        source: str = "",
        **fields,
    ) -> MeasuredRun:
        """A measured run read from a profiler trace (`explorer.traces.load_kineto`): the step
        time and the time per `STEP_CATEGORIES`, from `explorer.traces.breakdown`.

        Per step, the step time is the slowest rank's (its analysed window: the ranks wait
        for each other at the collectives), each category the mean over the ranks; both are
        then averaged over the steps after the first ``skip`` (warm-up; all steps when
        there are no more). Compute is the rank's compute time less its optimizer kernels'.

        Args:
            trace: the run's trace (every rank, or the ones profiled).
            model, config, hardware, global_batch, seq: as for `MeasuredRun`: the run.
            skip: leading steps left out.
            axes: mesh axis sizes to name collective groups (`explorer.traces.breakdown`).
            source: where the trace comes from (default: its files).
            fields: other `MeasuredRun` fields (``memory_bytes``, ``stack``, ``role``, ...).

        Raises:
            CalibrationError: not a trace, a trace without steps, a bad ``skip``.
        """
        if not is_int(skip, minimum=0, numpy=True):
            raise CalibrationError(f"MeasuredRun.from_trace(skip={skip!r}); expected an int >= 0")
        try:
            rows = breakdown(trace, axes).rows
        except TracesError as e:
            raise CalibrationError(f"MeasuredRun.from_trace: {e}") from None
        if not rows:
            raise CalibrationError(
                "MeasuredRun.from_trace: no profiled step holds any activity (no kernel "
                "launched inside a ProfilerStep#N); profile at least one whole step"
            )
        numbers = sorted({r.step for r in rows})
        keep = set(numbers[int(skip) :] or numbers)
        per_step: dict[int, list] = {}
        for r in rows:
            if r.step in keep:
                per_step.setdefault(r.step, []).append(r)
        step_s = sum(max(r.window_s for r in rs) for rs in per_step.values()) / len(per_step)
        sums = dict.fromkeys(STEP_CATEGORIES, 0.0)
        n = sum(len(rs) for rs in per_step.values())
        for rs in per_step.values():
            for r in rs:
                opt = min(r.category("optimizer"), r.compute_s)
                sums["compute"] += r.compute_s - opt
                sums["optimizer"] += opt
                sums["communication"] += r.exposed_comm_s
                sums["idle"] += r.idle_s
        ranks = trace.ranks if isinstance(trace, KinetoTrace) else (trace,)
        where = source or ", ".join(sorted({str(r.path) for r in ranks}))
        trace = trace if isinstance(trace, KinetoTrace) else KinetoTrace((trace,))
        return cls(model, config, hardware, global_batch, seq, step_s, source=where,
                   categories=tuple((k, v / n) for k, v in sums.items()),
                   kernels=kernel_samples(trace, keep), **fields)  # fmt: skip

    @property
    def knobs_dict(self) -> dict[str, str]:
        """The stack's published settings as a dict (``{"compile": "true", ...}``)."""
        return dict(self.knobs)

    @property
    def label(self) -> str:
        """A short name for tables and plots: model and layout."""
        c = self.config
        cp = f" cp{c.cp}" if getattr(c, "cp", 1) > 1 else ""
        zero = f" zero{c.zero}" if c.zero else ""  # DDP and FSDP runs of one layout differ
        return f"{self.model_name} dp{c.dp} tp{c.tp} pp{c.pp}{cp}{zero} mb{c.microbatch_size}"

    def as_dict(self) -> dict[str, object]:
        """Plain JSON values; a model given as a `ModelConfig` is written out in full."""
        out: dict[str, object] = {
            "model": self.model_name, "config": self.config.as_dict(),
            "hardware": self.hardware_name, "hardware_max_nodes": self.cluster.max_nodes,
            "global_batch": self.global_batch, "seq": self.seq,
            "step_time_s": self.step_time_s, "memory_bytes": self.memory_bytes,
            "source": self.source, "dataset": self.dataset, "role": self.role,
            "stack": self.stack, "precision": self.precision,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu_percent": self.mfu_percent, "ac_mode": self.ac_mode,
            "knobs": [list(k) for k in self.knobs],
            "categories": [list(k) for k in self.categories],
            "kernels": [[p, list(d), c, t] for p, d, c, t in self.kernels],
        }  # fmt: skip
        if isinstance(self.model, ModelConfig):
            out["model_config"] = asdict(self.model)
        if _custom(self.hardware):
            out["hardware_profile"] = asdict(self.hardware)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> MeasuredRun:
        """Inverse of `as_dict` (hardware by catalog name, or a cluster of one's own
        written out in full; a profile grown to more nodes by `cluster_with_devices` keeps
        its node count)."""
        try:
            config = ParallelConfig(**d["config"])
            hw = d["hardware"]
            nodes = d.get("hardware_max_nodes")
            if d.get("hardware_profile") is not None:
                hw = _cluster_from(d["hardware_profile"])
            elif nodes is not None and nodes > resolve(hw).max_nodes:
                base = resolve(hw)
                hw = base.extended(nodes * base.chips_per_node)
            model = d["model"]
            if d.get("model_config") is not None:
                fields_ = {k: tuple(v) if isinstance(v, list) else v
                           for k, v in d["model_config"].items()}  # fmt: skip
                model = ModelConfig(**fields_)
            return cls(
                model, config, hw, d["global_batch"], d["seq"],
                d["step_time_s"], d.get("memory_bytes"), d.get("source", ""),
                dataset=d.get("dataset", ""), role=d.get("role", ""),
                stack=d.get("stack", ""), precision=d.get("precision", "bf16"),
                tokens_per_s_per_gpu=d.get("tokens_per_s_per_gpu"),
                mfu_percent=d.get("mfu_percent"), ac_mode=d.get("ac_mode", ""),
                knobs=tuple(tuple(k) for k in d.get("knobs", ())),
                categories=tuple(tuple(k) for k in d.get("categories", ())),
                kernels=tuple((p, tuple(dims), c, t) for p, dims, c, t in d.get("kernels", ())),
            )  # fmt: skip
        except (KeyError, TypeError, AttributeError) as e:
            raise CalibrationError(
                f"a measured run's record {d!r} is malformed ({e}); expected the keys of "
                "MeasuredRun.as_dict()"
            ) from None
        except HardwareError as e:
            raise CalibrationError(
                f"a measured run's record names hardware that cannot be rebuilt: {e}"
            ) from None

    def __str__(self) -> str:
        return f"{self.label} on {self.hardware_name}: {self.step_time_s:.4g} s/step"


def _custom(hw: str | Cluster) -> bool:
    """Whether ``hw`` is a cluster the catalog cannot give back by its name (a profile of
    one's own, or a catalog profile changed), so `as_dict` writes it out in full."""
    if not isinstance(hw, Cluster):
        return False
    if hw.name not in hardware_names():
        return True
    base = resolve(hw.name)
    return hw != base and hw != base.extended(hw.capacity)


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def _cluster_from(d: dict) -> Cluster:
    """A `Cluster` from ``dataclasses.asdict`` of one (lists back to tuples)."""
    d = {k: _tuples(v) for k, v in d.items()}
    chip = Chip(**{k: _tuples(v) for k, v in d.pop("chip").items()})
    levels = tuple(Level(**lv) for lv in d.pop("link_levels", ()))
    return Cluster(chip=chip, link_levels=levels, **d)


def _check_kernels(kernels: object) -> tuple:
    ok = isinstance(kernels, tuple) and all(
        isinstance(k, tuple) and len(k) == 4 and k[0] in KERNEL_PARTS
        and isinstance(k[1], tuple) and all(is_int(d, minimum=0, numpy=True) for d in k[1])
        and len(k[1]) == (4 if k[0] == "matmul" else 6)
        and is_number(k[2], minimum=0, numpy=True) and is_number(k[3], minimum=0, numpy=True)
        for k in kernels
    )  # fmt: skip
    if not ok:
        raise CalibrationError(
            f"MeasuredRun.kernels={kernels!r}; expected a tuple of (part, dims, calls, seconds) "
            "with part 'matmul' (dims batch, M, K, N) or 'attention' (dims b, h, s_q, d, s_k, "
            "backward), as MeasuredRun.from_trace records them"
        )
    return tuple((p, tuple(int(x) for x in d), float(c), float(t)) for p, d, c, t in kernels)


def _check_categories(cats: object) -> tuple[tuple[str, float], ...]:
    ok = isinstance(cats, tuple) and all(
        isinstance(c, tuple) and len(c) == 2 and c[0] in STEP_CATEGORIES
        and is_number(c[1], minimum=0, numpy=True)
        for c in cats
    )  # fmt: skip
    names = [c[0] for c in cats] if ok else []
    if not ok or len(set(names)) != len(names):
        raise CalibrationError(
            f"MeasuredRun.categories={cats!r}; expected a tuple of (category, seconds >= 0) "
            f"pairs, each of {', '.join(STEP_CATEGORIES)} at most once"
        )
    return tuple((k, float(v)) for k, v in cats)


def _check_positive(name: str, v: object, what: str) -> None:
    if not is_number(v, above=0, numpy=True):
        raise CalibrationError(f"MeasuredRun.{name}={v!r}; expected a finite number > 0 ({what})")


# ----- published runs -------------------------------------------------------------------
def measured_datasets(which: DatasetKind = "papers") -> tuple[str, ...]:
    """Names of the published files in the measured format: ``papers`` (the 2021-2024
    paper tables, columns `MEASURED_COLUMNS`), ``stacks`` (today's stacks, with
    `STACK_COLUMNS` appended) or ``all``.

    >>> "torchtitan_2024_perf" in measured_datasets("stacks")
    True
    """
    kinds = get_args(DatasetKind)
    if which not in kinds:
        raise CalibrationError(
            f"measured_datasets(which={which!r}); expected one of {', '.join(map(repr, kinds))}"
        )
    want = {"papers": (MEASURED_COLUMNS,), "stacks": (MEASURED_COLUMNS + STACK_COLUMNS,)}
    want["all"] = want["papers"] + want["stacks"]
    folder = datasets_dir() / "published"
    out = []
    for p in sorted(folder.glob("*.csv")):
        with p.open(newline="") as f:
            header = next(csv.reader(f), [])
        if tuple(header) in want[which]:
            out.append(p.stem)
    return tuple(out)


def load_measured_rows(name: str) -> tuple[dict[str, str], ...]:
    """The raw rows of ``datasets/published/NAME.csv`` (measured format, with or without
    `STACK_COLUMNS`); each row also holds ``_line``, its line in the file (for errors)."""
    path = datasets_dir() / "published" / f"{name}.csv"
    if name not in measured_datasets("all"):
        raise CalibrationError(
            f"no published table {name!r} in the measured format; available: "
            f"{', '.join(measured_datasets('all'))}"
        )
    return read_measured_csv(path)


def read_measured_csv(path) -> tuple[dict[str, str], ...]:
    """The rows of one measured-format CSV file; a header that is neither format, or a row
    with more or fewer cells than the header, raises `CalibrationError` naming the file and
    the row (the file's line)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if header not in (MEASURED_COLUMNS, MEASURED_COLUMNS + STACK_COLUMNS):
            raise CalibrationError(
                f"{path}: the header is not the measured format; expected the columns "
                f"{', '.join(MEASURED_COLUMNS)} (and optionally {', '.join(STACK_COLUMNS)})"
            )
        rows = []
        for cells in reader:
            if len(cells) != len(header):
                raise CalibrationError(
                    f"{path}, row {reader.line_num}: {len(cells)} cells for the "
                    f"{len(header)} columns of the header; quote a cell that holds a comma"
                )
            rows.append({**dict(zip(header, cells, strict=True)), "_line": str(reader.line_num)})
        return tuple(rows)


def cluster_with_devices(hardware: str | Cluster, devices: int) -> str | Cluster:
    """``hardware`` itself when it holds ``devices`` chips; else the same profile grown
    to enough nodes (`Cluster.extended`: a published run on more chips than the catalog's
    profile lists)."""
    cluster = resolve(hardware)
    if devices <= cluster.capacity:
        return hardware
    return cluster.extended(devices)
