"""``calibrate(runs)``: fit the step model's knobs to measured step times.

The fitted knobs are float fields of `TrainingParams`, named by their path
(``"cost.compute_efficiency"``) or, when unambiguous, by their last part
(``"compute_efficiency"``). The fit is a bounded least-squares problem on
``log(predicted) - log(measured)`` per run (`scipy.optimize.least_squares`, trust region
reflective); the predictions are `estimate`'s (the model `plan_training` ranks with) or,
on request, `simulate`'s.

Re-timing, not re-searching: the operator search's layouts (one search per model, tensor
parallelism, microbatch size and `CostParams`) are what a knob moved a little does not
change, so during the fit they stay those chosen under the starting params
(`stage_costs.decisions_fixed_at`) and each trial value only re-costs them; the stage
split, recomputation and everything else of the step model are evaluated as usual. After
the fit every run is simulated in full under the fitted params and the table reports
that; if the search there picks other layouts for some run (its full prediction differs
from the re-timed one), the fit is run again from its result with the layouts chosen under
the fitted params (at most `MAX_ROUNDS` fits); if they still change, a last fit from there
searches again at every trial value (``Calibration.exact``). ``exact=True`` does so from
the start (the slow path).

Runs read from a profiler trace (`MeasuredRun.from_trace`) also carry the time of each
part of the step (`STEP_CATEGORIES`: compute, optimizer, exposed communication, idle); the
fit then also minimises, per such run and category, ``(predicted - measured) / measured
step time`` (the step model's parts, `step_categories`), so knobs that move one part (a
link's efficiency, an overlap) are fitted by that part, not only through the step time;
`Calibration.category_text` reports each part measured, predicted before and after. Such a
run also carries its GEMMs and fused attention ops with their shapes (`MeasuredRun.kernels`):
per kernel part (``matmul``, ``attention``) the fit minimises ``(predicted - measured) /
measured step time`` too, the prediction being the step model's own kernel times of those
shapes (`efficiency.kernel_part_seconds`), so ``matmul_efficiency_cap`` and
``flash_attention_efficiency`` are fitted by their own kernels; the table reports those
parts beside the step's.

Fit data and check data stay apart: ``runs`` are fitted, ``check`` runs are only
predicted, and every row of `Calibration.table` says which it is. ``loo_error`` is the
median |error| of each fit run predicted by a fit on the other runs (leave-one-out).

>>> import explorer as ex
>>> runs = [ex.MeasuredRun("gpt2", ex.ParallelConfig(dp=d, tp=8 // d), "a100-80g", 32, 512,
...                        t) for d, t in ((8, 0.05), (4, 0.055), (2, 0.06))]
>>> cal = ex.calibrate(runs, fit=("matmul_efficiency_cap",), loo=False)
>>> cal.fit
('matmul_efficiency_cap',)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ...checks import is_int
from .. import stacks
from ..errors import CalibrationError, TrainingParamsError
from ..params import TrainingParams
from ..simulate import estimate, simulate
from ..stacks import Stack
from ..step_model.stage_costs import decisions_fixed_at
from .efficiency import kernels_measured, kernels_predicted
from .io import (
    calibration_from_json,
    calibration_to_json,
    read_calibration,
    write_calibration,
)
from .knobs import (
    default_bounds,
    default_fit,
    fit_bounds,
    float_fields,
    get_value,
    resolve_fit,
    with_values,
)
from .measured import MeasuredRun, step_categories

__all__ = [
    "calibrate",
    "Calibration",
    "CalibrationRow",
    "Evaluator",
    "float_fields",
    "default_fit",
    "default_bounds",
    "resolve_fit",
    "with_values",
    "predict",
    "predict_times",
    "predict_results",
    "MAX_ROUNDS",
]

Evaluator = Literal["estimate", "simulate"]
EVALUATORS = ("estimate", "simulate")
Role = Literal["fit", "check"]

# Fits at most, each from the last one's result with the layouts chosen under its params.
MAX_ROUNDS = 3
# Two predictions of a run within this relative difference are the same decisions: layouts
# that tie (mirror-image splits) cost the same up to the order of the floating-point sums.
SAME_TIME = 1e-9


# ----- predictions -----------------------------------------------------------------------
def predict(run: MeasuredRun, params: TrainingParams, evaluator: Evaluator = "estimate"):
    """The step model's `SimResult` for ``run`` under ``params``; a run the model
    cannot take raises `CalibrationError` naming the run."""
    fn = estimate if evaluator == "estimate" else simulate
    try:
        return fn(run.cfg, run.config, run.cluster, run.global_batch, run.seq, params)
    except CalibrationError:
        raise
    except Exception as e:  # the model's own errors: say which run
        raise CalibrationError(f"the step model cannot predict run {run.label}: {e}") from e


# ----- result ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationRow:
    """One run: measured, predicted before the fit and after it.

    Attributes:
        role: ``fit`` (the least squares saw it) or ``check`` (predicted only).
        measured_s, before_s, after_s: step times in seconds.
        loo_s: a fit row's prediction by a fit on the other fit rows (None for check
            rows or when leave-one-out was not run).
        fits_memory: whether the fitted model says the configuration fits in memory.
        categories: for a run with measured `STEP_CATEGORIES`, ``(category, measured s,
            before s, after s)`` per category.
    """

    run: MeasuredRun
    role: Role
    measured_s: float
    before_s: float
    after_s: float
    loo_s: float | None = None
    fits_memory: bool = True
    categories: tuple[tuple[str, float, float, float], ...] = ()

    @property
    def error_before(self) -> float:
        """predicted / measured - 1, before the fit."""
        return self.before_s / self.measured_s - 1

    @property
    def error_after(self) -> float:
        return self.after_s / self.measured_s - 1

    @property
    def error_loo(self) -> float | None:
        return None if self.loo_s is None else self.loo_s / self.measured_s - 1

    def as_dict(self) -> dict[str, object]:
        return {
            "run": self.run.as_dict(), "label": self.run.label, "role": self.role,
            "measured_s": self.measured_s, "before_s": self.before_s,
            "after_s": self.after_s, "loo_s": self.loo_s, "fits_memory": self.fits_memory,
            "categories": [list(c) for c in self.categories],
        }  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    """`TrainingParams` fitted to measured runs.

    Attributes:
        params: the fitted `TrainingParams` (pass to `simulate` / `plan_training`).
        base: the params the fit started from.
        fit: paths of the fitted fields; ``start``, ``values``: their values before and
            after; ``bounds``: their ranges.
        table: one `CalibrationRow` per run, fit rows first, then check rows.
        loo_error: median |leave-one-out error| over the fit rows (None when not run or
            with fewer fit runs than two).
        evaluator: ``estimate`` or ``simulate``; ``rms_log_error``: the root-mean-square
            residual in log step time of the fit runs fully simulated under ``params``;
            ``evaluations``: step-model calls of the fits (all rounds, leave-one-out
            aside); ``seconds``: wall time of the whole call.
        exact: True when the last fit searched the operator layouts again at every trial
            value (``exact=True``, or the fallback below); False when the fitted values
            come from re-timed layouts (see the module doc).
        rounds: fits run: a new one each time the fitted params changed some run's
            layouts (1 when they did not); when they still change after `MAX_ROUNDS`
            re-timed fits, one more fit from there searches at every trial value.
        redecided: labels of the fit runs whose layouts changed during the fit: at the end
            of some fit their full simulation differed from the re-timed prediction that
            fit used, so another fit followed (the table's "after" column is always the
            full simulation under ``params``, and the last fit used the same layouts).
        retime_gap: the largest ``|full / re-timed - 1|`` seen at the end of a fit: how
            far off a single re-timed fit would have been (0.0 when ``redecided`` is
            empty).
    """

    params: TrainingParams
    base: TrainingParams
    fit: tuple[str, ...]
    start: tuple[float, ...]
    values: tuple[float, ...]
    bounds: tuple[tuple[float, float], ...]
    table: tuple[CalibrationRow, ...]
    loo_error: float | None
    evaluator: Evaluator
    rms_log_error: float
    evaluations: int
    seconds: float
    exact: bool = False
    rounds: int = 1
    redecided: tuple[str, ...] = ()
    retime_gap: float = 0.0

    @property
    def fitted(self) -> dict[str, float]:
        return dict(zip(self.fit, self.values, strict=True))

    @property
    def at_bounds(self) -> tuple[str, ...]:
        """Fitted fields that ended on (within 0.1% of the range of) a bound."""
        out = []
        for n, v, (lo, hi) in zip(self.fit, self.values, self.bounds, strict=True):
            tol = 1e-3 * (hi - lo)
            if v - lo <= tol or hi - v <= tol:
                out.append(n)
        return tuple(out)

    @property
    def determined(self) -> bool:
        """More fitted observations (step times and measured categories of the fit runs)
        than fitted knobs: otherwise several values fit the runs equally well and the one
        returned depends on the start."""
        return _observations(r.run for r in self.rows("fit")) > len(self.fit)

    def rows(self, role: Role) -> tuple[CalibrationRow, ...]:
        return tuple(r for r in self.table if r.role == role)

    def median_error(self, role: Role = "fit", which: str = "after") -> float | None:
        errs = [abs(getattr(r, f"error_{which}")) for r in self.rows(role)]
        errs = [e for e in errs if e is not None]
        return float(np.median(errs)) if errs else None

    def to_json(self) -> str:
        return calibration_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        return calibration_from_json(text, cls, CalibrationRow)

    def save(self, path) -> None:
        """Write `to_json` to ``path`` (a path that cannot be written is named)."""
        write_calibration(self, path)

    @classmethod
    def load(cls, path) -> Calibration:
        """The calibration saved in ``path``, read by the project's JSON reader and checked
        (`explorer.training.calibration.io.read_calibration`)."""
        return read_calibration(path, cls, CalibrationRow)

    def table_text(self) -> str:
        """The table as text: one line per run, fit rows then check rows, with the
        measured and predicted step times and the errors before and after the fit.

        Columns: role, run, measured s, before s (error), after s (error)."""
        width = max((len(r.run.label) for r in self.table), default=3)
        lines = [f"{'role':5}  {'run':{width}}  {'measured':>9}  {'before':>17}  {'after':>17}"]
        for r in self.table:
            lines.append(
                f"{r.role:5}  {r.run.label:{width}}  {r.measured_s:8.3g}s  "
                f"{r.before_s:8.3g}s ({r.error_before:+6.1%})  "
                f"{r.after_s:8.3g}s ({r.error_after:+6.1%})"
            )
        return "\n".join(lines)

    def category_text(self) -> str:
        """Per run with measured categories: each part of the step measured, predicted
        before the fit and after it (seconds, and after / measured - 1)."""
        rows = [r for r in self.table if r.categories]
        if not rows:
            return "no run carries measured categories (MeasuredRun.from_trace gives them)"
        width = max(len(r.run.label) for r in rows)
        lines = [f"{'role':5}  {'run':{width}}  {'part':13}  {'measured':>10}  {'before':>10}  "
                 f"{'after':>10}  {'after err':>9}"]  # fmt: skip
        for r in rows:
            for name, m, b, a in (("step", r.measured_s, r.before_s, r.after_s),
                                  *r.categories):  # fmt: skip
                err = f"{a / m - 1:+9.1%}" if m > 0 else f"{'n/a':>9}"
                lines.append(f"{r.role:5}  {r.run.label:{width}}  {name:13}  {m:9.4g}s  "
                             f"{b:9.4g}s  {a:9.4g}s  {err}")  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        vals = ", ".join(f"{n}={v:.4g}" for n, v in self.fitted.items())
        med = self.median_error("fit")
        loo = "n/a" if self.loo_error is None else f"{self.loo_error:.1%}"
        warn = "" if self.determined else " (no more runs than knobs: not unique)"
        if self.redecided:
            warn += (
                f"; {len(self.redecided)} runs took other layouts during the fit (refitted "
                f"{self.rounds - 1} times)"
            )
        return (
            f"Calibration of {len(self.rows('fit'))} runs ({len(self.rows('check'))} check): "
            f"{vals}{warn}; median |error| {med:.1%} fitted, leave-one-out {loo}"
        )


# ----- the fit ---------------------------------------------------------------------------
def _check_runs(runs, what: str, allow_empty: bool) -> tuple[MeasuredRun, ...]:
    if isinstance(runs, MeasuredRun) or not isinstance(runs, Sequence):
        raise CalibrationError(f"{what}={runs!r}; expected a list of MeasuredRun")
    runs = tuple(runs)
    if not runs and not allow_empty:
        raise CalibrationError(f"{what} is empty; give at least one MeasuredRun to fit")
    for i, r in enumerate(runs):
        if not isinstance(r, MeasuredRun):
            raise CalibrationError(f"{what}[{i}]={r!r}; expected a MeasuredRun")
    return runs


def predict_times(runs, params: TrainingParams, evaluator: Evaluator = "estimate",
                  decided_at: TrainingParams | None = None) -> np.ndarray:  # fmt: skip
    """Predicted step times of ``runs`` under ``params``; with ``decided_at``, the
    operator layouts are those searched under ``decided_at.cost`` (re-timed, not
    re-searched: `stage_costs.decisions_fixed_at`)."""
    if decided_at is None:
        return np.array([predict(r, params, evaluator).step_time_s for r in runs])
    with decisions_fixed_at(decided_at.cost):
        return np.array([predict(r, params, evaluator).step_time_s for r in runs])


def predict_results(runs, params: TrainingParams, evaluator: Evaluator = "estimate",
                    decided_at: TrainingParams | None = None) -> list:  # fmt: skip
    """`predict`'s `SimResult` per run (layouts as in `predict_times`)."""
    if decided_at is None:
        return [predict(r, params, evaluator) for r in runs]
    with decisions_fixed_at(decided_at.cost):
        return [predict(r, params, evaluator) for r in runs]


def _observations(runs) -> int:
    """Fitted numbers: one step time per run, plus its measured categories and kernel parts."""
    return sum(1 + len(r.categories) + len(kernels_measured(r)) for r in runs)


class _Objective:
    """Residuals of some runs, counting evaluations: ``log(predicted) - log(measured)`` per
    step time, then ``(predicted - measured) / measured step time`` per measured category;
    the layouts are searched under ``decided_at`` (None: under each trial's params)."""

    def __init__(self, runs, base, names, evaluator, decided_at=None):
        self.runs, self.base, self.names, self.evaluator = runs, base, names, evaluator
        self.decided_at = decided_at
        self.log_measured = np.log([r.step_time_s for r in runs])
        self.cat_measured = np.array(
            [v / r.step_time_s for r in runs for _, v in r.categories]
            + [v / r.step_time_s for r in runs for v in kernels_measured(r).values()]
        )
        self.calls = 0

    def params(self, x) -> TrainingParams:
        return with_values(self.base, dict(zip(self.names, x, strict=True)))

    def __call__(self, x) -> np.ndarray:
        p = self.params(x)
        self.calls += len(self.runs)
        res = predict_results(self.runs, p, self.evaluator, self.decided_at)
        steps = np.log([s.step_time_s for s in res]) - self.log_measured
        if not self.cat_measured.size:
            return steps
        cats = []
        for r, s in zip(self.runs, res, strict=True):
            pred = step_categories(s.time_by_kind)
            cats.extend(pred[k] / r.step_time_s for k, _ in r.categories)
        for r in self.runs:  # each kernel part by its own kernels
            pred = kernels_predicted(r, p)
            cats.extend(pred[k] / r.step_time_s for k in kernels_measured(r))
        return np.concatenate([steps, np.array(cats) - self.cat_measured])


def _moves(runs, base, names, evaluator, decided_at=None) -> dict[str, float]:
    """Per knob of ``names`` that can be nudged by 1% (of the value, or of the range for a
    knob at 0) within its bounds: the largest move of a run's predicted log time."""
    ref = _Objective(runs, base, names, evaluator, decided_at)(
        np.array([get_value(base, n) for n in names])
    )
    moves: dict[str, float] = {}
    for n in names:
        v = get_value(base, n)
        lo, hi = default_bounds(n, v, base)
        step = 0.01 * abs(v) if v else 0.01 * (hi - lo)
        nudged = v - step if v - step >= lo else v + step
        if not lo <= nudged <= hi or nudged == v:
            continue
        o = _Objective(runs, with_values(base, {n: nudged}), names, evaluator, decided_at)
        moves[n] = float(np.max(np.abs(o(np.array([get_value(o.base, m) for m in names])) - ref)))
    return moves


def _refuse_inert(runs, base, names, evaluator, decided_at=None) -> None:
    """A knob named in ``fit=`` that no run's predicted time moves with (nudged by 1%) would
    be "fitted" to its start value: refused, naming it and the knobs that do move them."""
    for n, move in _moves(runs, base, names, evaluator, decided_at).items():
        if move <= 1e-12:
            movers = [m for m in default_fit(base) if m != n]
            raise CalibrationError(
                f"fit names {n!r}, which changes no predicted time of these runs (nudged by "
                f"1% it moves none); its fitted value would be its start value. Fit knobs the "
                f"runs use, e.g. {', '.join(movers[:4])} (fit=None picks them)"
            )


def _sensitive(runs, base, names, evaluator, decided_at=None) -> tuple[str, ...]:
    """The default knobs worth fitting to ``runs``: those that move at least one run's
    predicted time by 1e-4 (relative) when nudged by 1% (`_moves`), the most sensitive first
    and at most one fewer than the fitted observations (`_observations`: step times and
    measured categories; at least one), so the fit stays determined. Fitting
    a knob the runs never use (fused attention's efficiency without fused attention) only
    costs evaluations."""
    moves = {n: m for n, m in _moves(runs, base, names, evaluator, decided_at).items()
             if m > 1e-4}  # fmt: skip
    if not moves:
        raise CalibrationError(
            f"none of the default knobs ({', '.join(names)}) changes the predicted time of "
            "these runs; name the fields to fit with fit=(...)"
        )
    top = sorted(moves, key=lambda n: -moves[n])[: max(1, _observations(runs) - 1)]
    return tuple(n for n in names if n in top)


@dataclass(frozen=True)
class _Solution:
    x: np.ndarray
    fun: np.ndarray


def _solve(objective: _Objective, x0, lo, hi, max_nfev: int | None) -> _Solution:
    """Bounded least squares; a knob whose range excludes 0 is searched on its log (step
    times scale as a power of an efficiency, so the problem is nearly linear there and
    converges in fewer evaluations)."""
    from scipy.optimize import least_squares

    logs = lo > 0
    to_x = lambda z: np.where(logs, np.exp(np.where(logs, z, 0.0)), z)  # noqa: E731
    z0 = np.where(logs, np.log(np.where(logs, x0, 1.0)), x0)
    zlo = np.where(logs, np.log(np.where(logs, lo, 1.0)), lo)
    zhi = np.where(logs, np.log(np.where(logs, hi, 1.0)), hi)
    span = zhi - zlo
    # Finite-difference step of 1e-3 (relative, or absolute on a log): the step model is
    # piecewise smooth (a strategy or a recompute count can switch), so tiny steps would
    # see the jumps. Tolerances: 1e-3 on the knobs, well under any measurement's noise.
    sol = least_squares(
        lambda z: objective(to_x(z)), np.clip(z0, zlo, zhi), bounds=(zlo, zhi), method="trf",
        diff_step=1e-3, x_scale=np.minimum(np.maximum(np.abs(z0), span / 10), span),
        xtol=1e-3, ftol=1e-5, max_nfev=max_nfev,
    )  # fmt: skip
    return _Solution(np.clip(to_x(sol.x), lo, hi), sol.fun)


def calibrate(
    runs: Sequence[MeasuredRun],
    params: TrainingParams | None = None,
    fit: Sequence[str] | None = None,
    bounds: dict[str, tuple[float, float]] | None = None,
    *,
    check: Sequence[MeasuredRun] = (),
    loo: bool = True,
    evaluator: Evaluator = "estimate",
    max_nfev: int | None = 50,
    exact: bool = False,
    stack: str | Stack | None = None,
) -> Calibration:
    """Fit the ``fit`` fields of ``params`` to ``runs`` within ``bounds``.

    Args:
        runs: the measured runs to fit (fit data).
        params: the starting `TrainingParams`, used as given.
        stack: start from a training stack's preset instead (`explorer.training.stacks`,
            a name or a `Stack`); neither: the default stack (``megatron-core``); both: an
            error naming the fix. The stack's knobs left to the chip (None) are filled
            from the runs' chip when they all ran on one (so they can be fitted).
        fit: field names or paths (default: the `default_fit` knobs that move these
            runs' predictions, the most sensitive first, fewer than the runs).
        bounds: ``{name: (low, high)}``; others get `default_bounds`.
        check: runs predicted before and after but not fitted (check data).
        loo: also fit once per fit run without it, for ``loo_error`` (each such fit
            re-times the layouts of the main fit's last round, unless ``exact``; the run
            left out is then predicted by the full simulation).
        evaluator: ``estimate`` (closed-form pipeline, as `plan_training` ranks) or
            ``simulate`` (the event simulation).
        max_nfev: the most objective evaluations per fit (each evaluates every run).
        exact: search the operator layouts again at every trial value (slow: a search
            per run layout and trial) instead of re-timing the layouts of the start.

    Raises:
        CalibrationError: malformed runs, a run the step model cannot take (named), an
            unknown field, bounds that are not a range or leave the field's valid values.
    """
    t0 = time.perf_counter()
    runs = _check_runs(runs, "runs", allow_empty=False)
    check = _check_runs(check, "check", allow_empty=True)
    both = [r for r in check if r in runs]
    if both:
        raise CalibrationError(
            f"{len(both)} of the check runs are fit runs too (first: {both[0].label}); check "
            "runs are held out from the fit: pass each run in one of runs= and check="
        )
    if params is not None and not isinstance(params, TrainingParams):
        raise CalibrationError(f"params={params!r}; expected a TrainingParams or None")
    try:
        base = stacks.resolve(params, stack, "calibrate")
    except TrainingParamsError as e:
        raise CalibrationError(str(e)) from None
    chips = {r.cluster.chip for r in runs + check}
    if len(chips) == 1:  # the chip's figures become numbers the fit can move
        base = base.resolved(next(iter(chips)))
    if evaluator not in EVALUATORS:
        raise CalibrationError(f"evaluator={evaluator!r}; expected one of {EVALUATORS}")
    for name, flag in (("exact", exact), ("loo", loo)):
        if not isinstance(flag, bool):
            raise CalibrationError(f"{name}={flag!r}; expected True or False")
    if max_nfev is not None and not is_int(max_nfev, minimum=1):
        raise CalibrationError(
            f"max_nfev={max_nfev!r}; expected an int >= 1 (objective evaluations per fit) "
            "or None (scipy's default)"
        )
    names = resolve_fit(fit, base)
    # Every run predicted once before the fit: a run the model cannot take fails here,
    # named (`predict`), not in the middle of the least squares.
    before_res = predict_results(runs + check, base, evaluator)
    before = np.array([r.step_time_s for r in before_res])
    decided_at = None if exact else base
    if fit is None:
        names = _sensitive(runs, base, names, evaluator, decided_at)
    rng = fit_bounds(names, bounds, base)
    if fit is not None:  # after the arguments are checked: it predicts
        _refuse_inert(runs, base, names, evaluator, decided_at)
    lo = np.array([b[0] for b in rng])
    hi = np.array([b[1] for b in rng])
    start = np.array([get_value(base, n) for n in names], dtype=float)
    # least_squares needs a start strictly inside the range
    x = np.clip(start, lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))

    evaluations, rounds, searched = 0, 0, exact
    gaps = np.zeros(len(runs))  # per run, the largest |full / re-timed - 1| at a fit's end
    while True:
        rounds += 1
        objective = _Objective(runs, base, names, evaluator, None if searched else decided_at)
        sol = _solve(objective, x, lo, hi, max_nfev)
        x, evaluations = sol.x, evaluations + objective.calls
        fitted = objective.params(x)
        after = predict_times(runs, fitted, evaluator)  # the full simulation
        retimed = after if searched else predict_times(runs, fitted, evaluator, decided_at)
        step = np.abs(after / retimed - 1)
        gaps = np.maximum(gaps, step)
        if searched or np.max(step) <= SAME_TIME:
            break
        if rounds >= MAX_ROUNDS:
            # The layouts still change near the optimum (it sits where the search switches
            # between layouts): a last fit from here searches at every trial value.
            searched = True
        else:
            decided_at = fitted  # fit again, with the layouts chosen under the fitted params
    redecided = tuple(r.label for r, g in zip(runs, gaps, strict=True) if g > SAME_TIME)

    loo_s: list[float | None] = [None] * len(runs)
    if loo and len(runs) >= 2:
        for i in range(len(runs)):
            rest = runs[:i] + runs[i + 1 :]
            o = _Objective(rest, base, names, evaluator, decided_at)
            held = _solve(o, x, lo, hi, max_nfev)  # warm start from the full fit
            loo_s[i] = predict(runs[i], o.params(held.x), evaluator).step_time_s

    table = []
    roles = ["fit"] * len(runs) + ["check"] * len(check)
    for j, (r, role) in enumerate(zip(runs + check, roles, strict=True)):
        res = predict(r, fitted, evaluator)
        b, a = step_categories(before_res[j].time_by_kind), step_categories(res.time_by_kind)
        kb, ka = kernels_predicted(r, base), kernels_predicted(r, fitted)
        kernel_rows = tuple((k, v, kb[k], ka[k]) for k, v in kernels_measured(r).items())
        table.append(
            CalibrationRow(
                r,
                role,
                r.step_time_s,
                float(before[j]),
                res.step_time_s,
                loo_s[j] if role == "fit" else None,
                res.fits,
                tuple((k, v, b[k], a[k]) for k, v in r.categories) + kernel_rows,
            )  # fmt: skip
        )
    loo_errs = [abs(t / r.step_time_s - 1) for t, r in zip(loo_s, runs, strict=True) if t]
    rms = float(np.sqrt(np.mean((np.log(after) - objective.log_measured) ** 2)))
    return Calibration(
        params=fitted, base=base, fit=names, start=tuple(float(v) for v in start),
        values=tuple(float(v) for v in x), bounds=tuple(rng), table=tuple(table),
        loo_error=float(np.median(loo_errs)) if loo_errs else None, evaluator=evaluator,
        rms_log_error=rms, evaluations=evaluations, seconds=time.perf_counter() - t0,
        exact=searched, rounds=rounds, redecided=redecided, retime_gap=float(np.max(gaps)),
    )  # fmt: skip
