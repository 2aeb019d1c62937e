"""``scaling_curve``: the planned throughput of a model as the device count grows.

Weak scaling grows the global batch with the devices (same batch per device); strong
scaling keeps it fixed. Each point is a `plan_training` result, so each has its own best
configuration. Linearity is the per-device throughput relative to the smallest device
count that fits (1.0 = perfectly linear).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from ...checks import is_int
from ...errors import ExplorerError
from ...hardware import Cluster, resolve
from ...memo import Memo
from ...models import ModelConfig, load
from ..config import ParallelConfig
from ..errors import TrainingError, TrainingPlanError
from ..params import TrainingParams
from .homogeneous import ProgressFn, plan_homogeneous
from .space import SearchSpace

__all__ = ["ScalingMode", "ScalingPoint", "ScalingCurve", "scaling_curve"]

ScalingMode = Literal["weak", "strong"]
_PROGRESS_STEPS = 100  # progress units per device count

#: each device count's plan outcome, by every input of its `plan_homogeneous` call (model,
#: cluster, devices, batch, sequence, params, space, constraints): a weak and a strong curve
#: share their first point, curves over neighbouring ranges share the counts in common, and a
#: view planning a curve ahead of a change (`widgets.ScalingView`) leaves its points here
_POINTS: Memo[tuple] = Memo("training.scaling_points", maxsize=512)


@dataclass(frozen=True)
class ScalingPoint:
    """One device count: its plan (or why there is none) and its throughput."""

    devices: int
    global_batch: int
    config: ParallelConfig | None
    step_time_s: float | None
    tokens_per_s: float | None
    tokens_per_s_per_device: float | None
    tflops_per_device: float | None
    mfu: float | None
    linearity: float | None
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.config is not None

    def as_dict(self) -> dict[str, object]:
        return {
            "devices": self.devices, "global_batch": self.global_batch,
            "config": None if self.config is None else str(self.config),
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "tflops_per_device": self.tflops_per_device, "mfu": self.mfu,
            "linearity": self.linearity, "note": self.note,
        }  # fmt: skip


@dataclass(frozen=True)
class ScalingCurve:
    """Points in device order.

    >>> curve = scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512)
    >>> [p.devices for p in curve.points], curve.points[0].linearity
    ([8, 16], 1.0)
    """

    model: str
    hardware: str
    mode: ScalingMode
    seq: int
    points: tuple[ScalingPoint, ...]

    def records(self) -> list[dict[str, object]]:
        return [p.as_dict() for p in self.points]

    def table(self) -> str:
        lines = [
            f"{self.model} on {self.hardware}, {self.mode} scaling, sequence {self.seq}",
            f"{'devices':>8} {'batch':>6} {'tok/s/dev':>10} {'TFLOP/s':>8} {'MFU':>6} "
            f"{'linear':>7}  config",
        ]
        for p in self.points:
            if not p.fits:
                lines.append(f"{p.devices:>8} {p.global_batch:>6}  -- {p.note}")
                continue
            lines.append(
                f"{p.devices:>8} {p.global_batch:>6} {p.tokens_per_s_per_device:>10.1f} "
                f"{p.tflops_per_device:>8.1f} {p.mfu:>6.1%} {p.linearity:>7.3f}  {p.config}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def scaling_curve(
    cfg: ModelConfig | str, hardware: str | Cluster, device_counts: Sequence[int],
    global_batch: int | None = None, seq: int | None = None, mode: ScalingMode = "weak",
    params: TrainingParams | None = None, space: SearchSpace | None = None,
    progress: ProgressFn | None = None,
    on_point: Callable[[ScalingCurve], None] | None = None, constraints: Sequence | None = None,
) -> ScalingCurve:  # fmt: skip
    """Plan ``cfg`` at each of ``device_counts`` and compare per-device throughput.

    Args:
        global_batch: the batch at the smallest device count (weak: scaled with the
            devices) or at every count (strong); default one sequence per device at the
            smallest count.
        mode: ``weak`` or ``strong``.
        progress: ``progress(done, total)`` as the points are planned, in hundredths of a
            device count (``total = 100 * len(device_counts)``): each count's
            `plan_training` reports its own progress inside its share.
        on_point: ``on_point(curve)`` once each count is planned, with the curve of the
            points planned so far (a view draws them as they come; the last call has them
            all). An exception it raises stops the planning and propagates.
        constraints: passed to each count's `plan_training` (`planning.constraints`); a
            count they leave without a configuration becomes a point whose note says why.

    A count where nothing fits (or the batch cannot be split) becomes a point without a
    configuration whose ``note`` says why; linearity is relative to the first point that
    has one.
    """
    if mode not in get_args(ScalingMode):
        raise TrainingError(f"mode={mode!r}; expected 'weak' or 'strong'")
    counts = sorted(set(device_counts))
    if not counts or not all(is_int(n, minimum=1) for n in counts):
        raise TrainingError(f"device_counts={device_counts!r}; expected positive ints")
    cfg = load(cfg) if isinstance(cfg, str) else cfg
    cluster = resolve(hardware)
    seq = cfg.max_seq_len if seq is None else seq
    base = global_batch or counts[0]
    points: list[ScalingPoint] = []
    ref: float | None = None
    total = _PROGRESS_STEPS * len(counts)
    for i, n in enumerate(counts):
        if on_point is not None and points:
            on_point(ScalingCurve(cfg.name, cluster.name, mode, seq, tuple(points)))
        gb = base * n // counts[0] if mode == "weak" else base
        inner = None
        if progress is not None:

            def inner(done: int, of: int, i: int = i) -> None:
                progress(i * _PROGRESS_STEPS + _PROGRESS_STEPS * done // max(of, 1), total)

        key = _point_key(cfg, cluster, n, gb, seq, params, space, constraints)
        found = _POINTS.peek(key) if key is not None else None
        planned_before = found is not None
        if found is None:
            warm = _scaled(points[-1].config, points[-1].devices, n) if points else None
            found = _plan_point(
                cfg, n, cluster, gb, seq, params, space, inner, constraints, warm
            )  # fmt: skip
            if key is not None:
                _POINTS.put(key, found)
        if progress is not None and (planned_before or isinstance(found, str)):
            progress((i + 1) * _PROGRESS_STEPS, total)  # this count's share is done
        if isinstance(found, str):  # why nothing was planned
            points.append(ScalingPoint(n, gb, None, None, None, None, None, None, None, found))
            continue
        config, step_time_s, tokens_per_s, tflops, mfu = found
        per_dev = tokens_per_s / n
        ref = ref or per_dev
        points.append(
            ScalingPoint(
                devices=n,
                global_batch=gb,
                config=config,
                step_time_s=step_time_s,
                tokens_per_s=tokens_per_s,
                tokens_per_s_per_device=per_dev,
                tflops_per_device=tflops,
                mfu=mfu,
                linearity=per_dev / ref,
            )  # fmt: skip
        )
    curve = ScalingCurve(cfg.name, cluster.name, mode, seq, tuple(points))
    if on_point is not None:
        on_point(curve)
    return curve


def _point_key(cfg, cluster, n, gb, seq, params, space, constraints) -> tuple | None:
    """The memo key of one count's plan: every input of its `plan_homogeneous` call (None
    when one is not hashable: planned without the memo)."""
    key = (cfg, cluster, n, gb, seq, params, space,
           None if constraints is None else tuple(constraints))  # fmt: skip
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _scaled(config: ParallelConfig | None, devices: int, n: int) -> ParallelConfig | None:
    """The configuration planned at ``devices``, its data-parallel degree scaled to ``n``
    devices (None when it does not scale): the next count's warm start (neighbouring
    counts mostly choose the same layout; `BoundedSearch.run`'s ``first``)."""
    if config is None or n % devices:
        return None
    try:
        return config.replace(dp=config.dp * (n // devices))
    except ExplorerError:
        return None


def _plan_point(cfg, n, cluster, gb, seq, params, space, progress, constraints, warm=None):
    """(config, step time, tokens/s, TFLOP/s per device, MFU) of the plan at ``n`` devices,
    or the message of the `TrainingPlanError` saying why there is none; ``warm``: the
    search's warm start (the same plan, found sooner)."""
    try:
        plan = plan_homogeneous(
            cfg, n, cluster, gb, seq, params, space=space, simulate_top=1,
            progress=progress, constraints=constraints, chosen_only=True, warm_start=warm,
        )  # fmt: skip
    except TrainingPlanError as e:
        return str(e)
    s = plan.sim
    return plan.config, s.step_time_s, s.tokens_per_s, s.tflops_per_device, s.mfu
