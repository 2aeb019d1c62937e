"""``diff(a, b)`` of two training plans (TrainingPlan, SimResult or ParallelConfig): what
differs in the layout, the stages, the collectives and the memory rows, and the step-time
difference split into the simulator's event kinds, largest first.

The terms are the simulated step's seconds per event kind (`SimResult.time_by_kind`:
compute, each parallelism's communication, optimizer, idle pipeline time); their
differences sum to the step-time difference (a residual term ``other`` holds what the kinds
do not cover, such as an estimate's overlap, and is listed only when it is not zero).

Configurations are parsed from text too (`parse_config`): ``"dp16 tp8"``,
``"dp16 x tp8 x pp1, mb2, zero1, recompute full"`` (the form ``str(ParallelConfig)`` prints).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from ...hardware import Cluster, resolve
from ...models import ModelConfig, load
from .. import stacks
from ..config import ParallelConfig
from ..errors import ParallelConfigError, TrainingPlanError
from ..params import TrainingParams
from ..simulate import SimResult, simulate

__all__ = ["TrainingDiff", "DiffRow", "Context", "diff_training", "parse_config", "context_of",
           "complete", "is_plan"]  # fmt: skip

_GIB = 2**30


@dataclass(frozen=True)
class Context:
    """What a configuration is simulated in: model, cluster, batch, sequence, params."""

    model: ModelConfig
    cluster: Cluster
    global_batch: int
    seq: int
    params: TrainingParams

    def simulate(self, config: ParallelConfig) -> SimResult:
        return simulate(self.model, config, self.cluster, self.global_batch, self.seq,
                        self.params)  # fmt: skip

    def key(self) -> tuple:
        return (self.model.name, self.cluster.name, self.global_batch, self.seq)


def is_plan(x: object) -> bool:
    """A TrainingPlan (read by its fields: this module stands below `result`, whose
    ``why_not`` and ``robustness`` use it)."""
    return isinstance(getattr(x, "sim", None), SimResult) and hasattr(x, "alternatives")


def context_of(plan) -> Context:
    """The context a TrainingPlan was made in (its params and cluster, else its stack's
    preset and hardware profile)."""
    params = plan.params
    if params is None:
        params = stacks.params(plan.sim.stack or stacks.DEFAULT_STACK)
    return Context(plan.model_config or load(plan.model), plan.cluster or resolve(plan.hardware),
                   plan.global_batch, plan.seq, params)  # fmt: skip


@dataclass(frozen=True)
class DiffRow:
    """One aspect of the two plans: ``group`` (layout, stages, collectives, memory, ...),
    ``name``, the two values as text, and ``delta`` (``b - a`` in ``unit``; None for a
    choice that has no number)."""

    group: str
    name: str
    a: str
    b: str
    delta: float | None = None
    unit: str = ""

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TrainingDiff:
    """The difference ``b - a`` of two simulated training steps.

    Attributes:
        rows: the aspects that differ (layout, schedule, stages, layer strategies, bytes
            sent per collective kind, memory rows), in that order.
        terms: ``(event kind, b - a seconds)`` largest ``|value|`` first; they sum to
            ``total``.
        total: ``b.step_time_s - a.step_time_s``.
        memory: ``(row, a bytes, b bytes)`` for every memory row of the device needing the
            most, then ``total``.
    """

    a: SimResult
    b: SimResult
    rows: tuple[DiffRow, ...]
    terms: tuple[tuple[str, float], ...]
    total: float
    memory: tuple[tuple[str, float, float], ...]

    @property
    def largest_memory_row(self) -> tuple[str, float, float]:
        """The memory row b needs most above a (or least below)."""
        rows = [r for r in self.memory if r[0] != "total"]
        return max(rows, key=lambda r: r[2] - r[1])

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": "training", "a": str(self.a.config), "b": str(self.b.config),
            "step_a_s": self.a.step_time_s, "step_b_s": self.b.step_time_s,
            "total": self.total, "unit": "seconds", "terms": dict(self.terms),
            "fits_a": self.a.fits, "fits_b": self.b.fits,
            "memory": [{"row": r, "a_bytes": x, "b_bytes": y} for r, x, y in self.memory],
            "rows": [r.as_dict() for r in self.rows],
        }  # fmt: skip

    def text(self) -> str:
        a, b = self.a, self.b
        lines = [
            f"training plan diff: {a.model} on {a.hardware}, global batch {a.global_batch}, "
            f"sequence {a.seq}",
            f"  a: {a.config}: step {a.step_time_s:.4g} s, {a.memory.total / _GIB:.1f} GiB"
            + ("" if a.fits else " (over memory)"),
            f"  b: {b.config}: step {b.step_time_s:.4g} s, {b.memory.total / _GIB:.1f} GiB"
            + ("" if b.fits else " (over memory)"),
            f"  b - a {self.total:+.4g} s ({self.total / a.step_time_s:+.1%}); terms, largest "
            "first: "
            + (
                ", ".join(f"{k} {v:+.3g} s" for k, v in self.terms if abs(v) > 1e-9 * a.step_time_s)
                or "none"
            ),
        ]
        group = None
        for r in self.rows:
            if r.group != group:
                lines.append(f"  {r.group}:")
                group = r.group
            d = "" if r.delta is None else f"   b - a {_fmt(r.delta, r.unit, sign=True)}"
            lines.append(f"    {r.name}: {r.a} -> {r.b}{d}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _fmt(v: float, unit: str, sign: bool = False) -> str:
    if unit == "bytes":
        return f"{v / _GIB:+.2f} GiB" if sign else f"{v / _GIB:.2f} GiB"
    return f"{v:+.3g} {unit}" if sign else f"{v:.3g} {unit}"


def _stages(s: SimResult) -> str:
    counts = s.partition.layer_counts()
    if len(set(counts)) == 1:
        return f"{len(counts)} stages of {counts[0]} layers ({s.partition_choice.method})"
    return f"{len(counts)} stages, {min(counts)}-{max(counts)} layers ({s.partition_choice.method})"


def _rows(a: SimResult, b: SimResult) -> list[DiffRow]:
    ca, cb = a.config, b.config
    rows = []

    def add(group, name, x, y, delta=None, unit=""):
        if x != y or (delta is not None and delta != 0):
            rows.append(DiffRow(group, name, str(x), str(y), delta, unit))

    for f in ("dp", "tp", "pp", "cp", "ep", "etp", "sp"):
        add("layout", f, getattr(ca, f), getattr(cb, f))
    add("schedule", "microbatch", f"mb{ca.microbatch_size} x {ca.num_microbatches}",
        f"mb{cb.microbatch_size} x {cb.num_microbatches}")  # fmt: skip
    add("schedule", "schedule", f"{ca.schedule}(v{ca.virtual_stages})",
        f"{cb.schedule}(v{cb.virtual_stages})")  # fmt: skip
    add("schedule", "bubble", f"{a.bubble_fraction:.1%}", f"{b.bubble_fraction:.1%}")
    add("memory policy", "zero", ca.zero, cb.zero)
    add("memory policy", "recompute", ca.recompute + _n(ca), cb.recompute + _n(cb))
    add("stages", "split", _stages(a), _stages(b))
    add("stages", "layer strategies", a.strategies, b.strategies)
    rows += _stage_rows(a, b)
    ba, bb = dict(a.comm_bytes), dict(b.comm_bytes)
    for k in sorted(set(ba) | set(bb)):
        x, y = ba.get(k, 0.0), bb.get(k, 0.0)
        if x != y:
            rows.append(DiffRow("collectives (bytes sent per device per step)", k,
                                f"{x / _GIB:.2f} GiB", f"{y / _GIB:.2f} GiB", y - x, "bytes"))  # fmt: skip
    for r, x, y in _memory(a, b):
        if x != y:
            rows.append(DiffRow("memory per device", r, f"{x / _GIB:.2f} GiB",
                                f"{y / _GIB:.2f} GiB", y - x, "bytes"))  # fmt: skip
    return rows


def _per_device(s: SimResult) -> list[tuple[int, float]]:
    """Per pipeline device: the layers it holds (its chunks) and its peak memory."""
    counts = s.partition.layer_counts()
    pp = s.config.pp
    layers = [sum(counts[g] for g in range(d, len(counts), pp)) for d in range(pp)]
    mems = [m.total for m in s.memory_per_device]
    if len(mems) != pp:  # an estimate keeps one breakdown per distinct stage shape
        mems = [s.memory.total] * pp
    return list(zip(layers, mems, strict=True))


def _stage_rows(a: SimResult, b: SimResult) -> list[DiffRow]:
    """One row per pipeline device (runs of equal rows merged): layers held, peak memory."""
    da, db = _per_device(a), _per_device(b)
    n = max(len(da), len(db))
    cells = []
    for d in range(n):
        x = da[d] if d < len(da) else None
        y = db[d] if d < len(db) else None
        cells.append((_cell(x), _cell(y), y[1] - x[1] if x and y else None))
    rows, start = [], 0
    for d in range(1, n + 1):
        if d < n and cells[d] == cells[start]:
            continue
        if cells[start][0] != cells[start][1]:
            name = f"device {start}" if d - start == 1 else f"devices {start}-{d - 1}"
            x, y, delta = cells[start]
            rows.append(DiffRow("pipeline devices (layers, peak memory)", name, x, y, delta,
                                "bytes"))  # fmt: skip
        start = d
    return rows


def _cell(v: tuple[int, float] | None) -> str:
    return "no stage" if v is None else f"{v[0]} layers, {v[1] / _GIB:.1f} GiB"


def _n(c: ParallelConfig) -> str:
    return f"({c.recompute_num_layers})" if c.recompute_num_layers is not None else ""


def _memory(a: SimResult, b: SimResult) -> tuple[tuple[str, float, float], ...]:
    ra, rb = dict(a.memory.rows()), dict(b.memory.rows())
    rows = [(r, ra.get(r, 0.0), rb.get(r, 0.0)) for r in dict.fromkeys([*ra, *rb])]
    rows.append(("total", a.memory.total, b.memory.total))
    return tuple(rows)


def _terms(a: SimResult, b: SimResult) -> tuple[tuple[str, float], ...]:
    ta, tb = dict(a.time_by_kind), dict(b.time_by_kind)
    terms = {k: tb.get(k, 0.0) - ta.get(k, 0.0) for k in dict.fromkeys([*ta, *tb])}
    total = b.step_time_s - a.step_time_s
    rest = total - sum(terms.values())
    if abs(rest) > 1e-9 * max(a.step_time_s, b.step_time_s):
        terms["other"] = rest
    return tuple(sorted(terms.items(), key=lambda kv: (-abs(kv[1]), kv[0])))


# --- configurations as text ---------------------------------------------------------------
_INT_FIELDS = {"dp": "dp", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "etp": "etp",
               "mb": "microbatch_size", "zero": "zero", "v": "virtual_stages",
               "hsdp": "dp_shard"}  # fmt: skip
_TOKEN = re.compile(r"^(dp|tp|pp|cp|ep|etp|mb|zero|v|hsdp)(\d+)$")
_SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved": "interleaved_1f1b",
              "interleaved_1f1b": "interleaved_1f1b"}  # fmt: skip
_RECOMPUTE = ("none", "selective", "full", "per_layer")


def parse_config(text: object, base: ParallelConfig | None = None) -> dict[str, Any]:
    """The fields a configuration names: from a ParallelConfig (all of them), a dict of
    ParallelConfig fields, or text such as ``"dp16 tp8"``, ``"dp16xtp8 pp1"`` or
    ``"dp32 x tp4 x pp8 +sp, mb2, interleaved_1f1b(v4), zero1, recompute full"``.

    >>> parse_config("dp16 x tp8, mb2, zero1, recompute full")
    {'dp': 16, 'tp': 8, 'microbatch_size': 2, 'zero': 1, 'recompute': 'full'}
    """
    if isinstance(text, ParallelConfig):
        return dataclasses.asdict(text)
    if isinstance(text, dict):
        names = {f.name for f in dataclasses.fields(ParallelConfig)}
        bad = [k for k in text if k not in names]
        if bad:
            raise ParallelConfigError(
                f"config {text!r}: {', '.join(map(repr, bad))} is not a ParallelConfig field; "
                f"the fields are {', '.join(sorted(names))}"
            )
        return dict(text)
    if not isinstance(text, str) or not text.strip():
        raise ParallelConfigError(
            f"config={text!r}: expected a ParallelConfig, a dict of its fields or text such as "
            "'dp16 tp8' or 'dp16 x tp8 x pp1, mb2, zero1, recompute full'"
        )
    out: dict[str, Any] = {}
    s = text.lower().replace(",", " ").replace("+sp", " sp ")
    s = re.sub(r"(?<=\d)x(?=[a-z])", " ", s)  # "dp16xtp8"
    s = re.sub(r"\((v\d+)\)", r" \1", s)  # "interleaved_1f1b(v4)"
    s = re.sub(r"\((\d+)\)", r" layers\1", s)  # "per_layer(3)"
    words = [w for w in s.split() if w not in ("x", "*", "recompute")]
    for w in words:
        m = _TOKEN.match(w)
        if m:
            out[_INT_FIELDS[m.group(1)]] = int(m.group(2))
        elif w in ("sp", "nosp"):
            out["sp"] = w == "sp"
        elif w in _SCHEDULES:
            out["schedule"] = _SCHEDULES[w]
        elif w in _RECOMPUTE:
            out["recompute"] = w
        elif w.startswith("layers") and w[6:].isdigit():
            out["recompute_num_layers"] = int(w[6:])
        elif w == "ring":
            out["cp_kv_exchange"] = "ring"
        else:
            raise ParallelConfigError(
                f"config {text!r}: cannot read {w!r}; write degrees as dp16 tp8 pp2 cp2 ep8 "
                "etp1 hsdp4 (ZeRO shard group), mb2 (microbatch size), zero0-3, a schedule (gpipe, 1f1b, interleaved, "
                "v4), a recompute policy (none, selective, full, per_layer) and sp"
            )
    return out


def complete(fields: dict[str, Any], base: ParallelConfig, devices: int) -> ParallelConfig:
    """``base`` with ``fields`` changed; the microbatch count derived again, and the one
    degree among dp and pp the text left out set so that the devices are all used."""
    fields = dict(fields)
    if fields.get("pp") == 1 and "schedule" not in fields and base.schedule == "interleaved_1f1b":
        fields.update(schedule="1f1b", virtual_stages=None)  # nothing left to interleave
    fields.setdefault("num_microbatches", None)
    c = dataclasses.replace(base, **fields)
    if "recompute" in fields and "recompute_num_layers" not in fields:
        c = dataclasses.replace(c, recompute_num_layers=None)
    if "schedule" in fields and "virtual_stages" not in fields:
        c = dataclasses.replace(c, virtual_stages=None)
    other = c.tp * c.cp
    for free in ("pp", "dp"):
        if c.devices == devices or free in fields:
            continue
        rest = c.dp * c.pp * other // getattr(c, free)
        if devices % rest == 0:
            c = dataclasses.replace(c, **{free: devices // rest})
    if c.pp == 1 and c.schedule == "interleaved_1f1b":
        c = dataclasses.replace(c, schedule="1f1b", virtual_stages=None)
    if c.devices != devices:
        raise ParallelConfigError(
            f"{c} uses dp x tp x pp x cp = {c.devices} devices but the plan has {devices}; "
            "give degrees whose product is the device count"
        )
    return c


def _as_sim(x: object, ctx: Context | None, name: str, other: object) -> SimResult:
    if is_plan(x):
        return x.sim
    if isinstance(x, SimResult):
        return x
    if ctx is None:
        raise TrainingPlanError(
            f"diff: {name}={x!r} is a configuration with nothing to simulate it in; pass a "
            "TrainingPlan or SimResult as the other side, or model=, hardware=, global_batch=, "
            "seq= (and params=)"
        )
    if isinstance(x, ParallelConfig):
        return ctx.simulate(x)
    fields = parse_config(x)
    base = other.sim if is_plan(other) else other
    if isinstance(base, SimResult):  # text changes the other side's configuration
        return ctx.simulate(complete(fields, base.config, base.config.devices))
    return ctx.simulate(ParallelConfig(**fields))


def diff_training(a: object, b: object, **context: Any) -> TrainingDiff:
    """``b - a`` of two training steps: TrainingPlans, SimResults or configurations
    (ParallelConfig, dict or text, simulated in the other side's context or in the
    ``model=, hardware=, global_batch=, seq=, params=`` given).

    >>> import explorer as ex
    >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    >>> d = ex.diff(plan, ex.ParallelConfig(dp=8, microbatch_size=8))
    >>> abs(sum(v for _, v in d.terms) - d.total) < 1e-9
    True
    """
    ctx = None
    for x in (a, b):
        if is_plan(x):
            ctx = context_of(x)
            break
    if context:
        ctx = _context(context, ctx, a, b)
    elif ctx is None:
        sims = [x for x in (a, b) if isinstance(x, SimResult)]
        if sims and not all(isinstance(x, SimResult) for x in (a, b)):
            s = sims[0]
            params = stacks.params(s.stack) if s.stack else None
            if params is None:
                raise TrainingPlanError(
                    f"diff: the SimResult of {s.config} was simulated with hand-set params, "
                    "which it does not keep; pass params= to simulate the other side alike"
                )
            ctx = Context(load(s.model), resolve(s.hardware), s.global_batch, s.seq, params)
    sa, sb = _as_sim(a, ctx, "a", b), _as_sim(b, ctx, "b", a)
    if (sa.model, sa.hardware, sa.global_batch, sa.seq) != (
        sb.model,
        sb.hardware,
        sb.global_batch,
        sb.seq,
    ):
        raise TrainingPlanError(
            f"diff: a is {sa.model} on {sa.hardware} (batch {sa.global_batch}, seq {sa.seq}) "
            f"and b is {sb.model} on {sb.hardware} (batch {sb.global_batch}, seq {sb.seq}); "
            "a diff compares two plans of one job: plan both for the same model, hardware, "
            "global batch and sequence"
        )
    if sa.config.devices != sb.config.devices:
        raise TrainingPlanError(
            f"diff: a uses {sa.config.devices} devices ({sa.config}) and b "
            f"{sb.config.devices} ({sb.config}); compare plans of one device count"
        )
    return TrainingDiff(
        a=sa, b=sb, rows=tuple(_rows(sa, sb)), terms=_terms(sa, sb),
        total=sb.step_time_s - sa.step_time_s, memory=_memory(sa, sb),
    )  # fmt: skip


def _context(kw: dict[str, Any], base: Context | None, a, b) -> Context:
    known = {"model", "hardware", "global_batch", "seq", "params", "stack"}
    bad = sorted(set(kw) - known)
    if bad:
        raise TrainingPlanError(
            f"diff: unknown argument {', '.join(bad)}; a training diff takes "
            f"{', '.join(sorted(known))}"
        )
    model = kw.get("model", base.model if base else None)
    if model is None:
        raise TrainingPlanError("diff: configurations need model= (a name or ModelConfig)")
    model = load(model) if isinstance(model, str) else model
    cluster = resolve(kw.get("hardware", base.cluster if base else "a100-80g"))
    gb = kw.get("global_batch", base.global_batch if base else None)
    seq = kw.get("seq", base.seq if base else model.max_seq_len)
    if gb is None:
        raise TrainingPlanError("diff: configurations need global_batch=")
    params = stacks.resolve(kw.get("params"), kw.get("stack"), "diff")
    if "params" not in kw and "stack" not in kw and base is not None:
        params = base.params
    return Context(model, cluster, gb, seq, params)
