"""``TrainingView``: what PipelineView and MemoryView share — one training configuration
under study (model, hardware, batch, sequence, ParallelConfig), simulated through a small
cache, adopted from a ``TrainingPlan`` published on the linked selection.

The device count stays fixed while the controls move: changing ``pp`` changes ``dp``
(``devices = dp * tp * pp * cp``), and the microbatch count is a divisor of the sequences per
data-parallel replica (``global_batch / dp``), so the work per step never changes and step
times stay comparable.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import traitlets as tl

import explorer as ex
from explorer.models import ModelConfig
from explorer.training import ParallelConfig, SimResult

from .base import View
from .heap import gc_paused
from .selection import Selection

__all__ = ["TrainingView", "divisors", "simulate_cached"]

SIM_CACHE_SIZE = 64
_SIMS: OrderedDict[tuple, SimResult] = OrderedDict()


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def simulate_cached(cfg: ModelConfig, par: ParallelConfig, hardware: str, gb: int, seq: int,
                    stack: str | None = None):  # fmt: skip
    """``ex.simulate`` (under ``stack``, default the default stack) through an LRU cache
    (SimResults are immutable values): moving a control back is instant."""
    stack = stack or ex.stacks.DEFAULT_STACK
    key = (cfg, par, hardware, gb, seq, stack)
    sim = _SIMS.get(key)
    if sim is None:
        sim = ex.simulate(cfg, par, hardware=hardware, global_batch=gb, seq=seq, stack=stack)
        _SIMS[key] = sim
        if len(_SIMS) > SIM_CACHE_SIZE:
            _SIMS.popitem(last=False)
    else:
        _SIMS.move_to_end(key)
    return sim


class TrainingView(View):
    """Base of the training views. Subclasses implement ``_draw()`` (sim changed) and
    ``_mark()`` (selected stage or microbatch changed) and fill ``controls``."""

    # --- the configuration under study --------------------------------------------------
    model_config = tl.Instance(ModelConfig)
    hardware = tl.Unicode("a100-80g")
    stack = tl.Unicode(None, allow_none=True, help="the training stack (None: the default)")
    global_batch = tl.Int(1)
    seq = tl.Int(1024)
    config = tl.Instance(ParallelConfig)
    # --- result -------------------------------------------------------------------------
    sim = tl.Any(None, allow_none=True, help="the SimResult drawn")
    simulate_s = tl.Float(0.0, help="seconds of the last simulate (0 on a cache hit)")
    # --- mirrored from the selection ----------------------------------------------------
    stage = tl.Int(None, allow_none=True)
    microbatch = tl.Int(None, allow_none=True)

    selection_traits = ("training", "stage", "microbatch")

    def __init__(
        self, model: ModelConfig | str, config: ParallelConfig, *, hardware: str = "a100-80g",
        global_batch: int | None = None, seq: int | None = None,
        selection: Selection | None = None, stack: str | None = None,
    ) -> None:  # fmt: skip
        self._ready = False
        super().__init__(selection=None)
        cfg = ex.models.load(model) if isinstance(model, str) else model
        self.model_config, self.hardware = cfg, hardware
        self.stack = None if stack is None else ex.stacks.get(stack).name
        self.seq = seq or cfg.max_seq_len
        m = config.num_microbatches or 4 * config.pp
        self.global_batch = global_batch or config.dp * config.microbatch_size * m
        self.config = config.replace(num_microbatches=None, recompute_num_layers=None)
        self._bulk = False

    def _finish(self, selection: Selection | None) -> None:
        self._ready = True
        self.link(selection or Selection())

    # --- derived ------------------------------------------------------------------------
    @property
    def devices(self) -> int:
        return self.config.devices

    @property
    def per_replica(self) -> int:
        """Sequences per data-parallel replica and step."""
        return self.global_batch // self.config.dp

    def _simulate(self, config: ParallelConfig) -> SimResult:
        import time

        t0 = time.perf_counter()
        stack = self.stack or ex.stacks.DEFAULT_STACK
        key_hit = (self.model_config, config, self.hardware, self.global_batch, self.seq,
                   stack) in _SIMS  # fmt: skip
        sim = simulate_cached(self.model_config, config, self.hardware, self.global_batch,
                              self.seq, stack)  # fmt: skip
        self.simulate_s = 0.0 if key_hit else time.perf_counter() - t0
        return sim

    def set_config(self, config: ParallelConfig, global_batch: int | None = None) -> None:
        """Simulate ``config`` (at ``global_batch``, default the current one) and draw it.
        An invalid one raises; the view keeps the last valid configuration and result (the
        control that asked for it keeps the refused value, with its error beside it). The
        simulation and the redraw run with the cyclic collector paused (`heap.gc_paused`)."""
        config = config.replace(num_microbatches=None, recompute_num_layers=None)
        old = self.global_batch
        self.global_batch = global_batch or old
        with gc_paused():
            try:
                sim = self._simulate(config)
            except Exception:
                self.global_batch = old
                raise
            self.config, self.sim = config, sim
            self._sync_controls()
            self._draw()

    # --- hooks --------------------------------------------------------------------------
    def _sync_controls(self) -> None:
        """Put every control's options and value in line with ``self.config``."""

    def _draw(self) -> None:
        """Redraw the figure from ``self.sim``."""

    def _mark(self) -> None:
        """Redraw the selected stage / microbatch only."""

    # --- selection ----------------------------------------------------------------------
    def adopt(self, plan) -> None:
        """Study the configuration of a ``TrainingPlan`` (what the dashboard publishes)."""
        cfg = plan.model_config or ex.models.load(plan.model)
        self.model_config, self.hardware = cfg, plan.hardware
        self.stack = plan.sim.stack  # None: hand-set params, priced here with the default
        self.global_batch, self.seq = plan.global_batch, plan.seq
        self.set_config(plan.config)

    def _on_linked(self, selection: Selection) -> None:
        if not getattr(self, "_ready", False):
            return
        if selection.training is not None and hasattr(selection.training, "config"):
            self.adopt(selection.training)
        self.stage, self.microbatch = selection.stage, selection.microbatch
        self._mark()

    def on_selection(self, change: dict[str, Any]) -> None:
        name = change["name"]
        if name == "training":
            if change["new"] is not None and hasattr(change["new"], "config"):
                self.adopt(change["new"])
        elif name in ("stage", "microbatch"):
            setattr(self, name, change["new"])
            self._mark()

    def _control_key(self, change: dict[str, Any]) -> str:
        return next(k for k, w in self.controls.items() if w is change["owner"])

    def _set_control(self, key: str, *, options=None, value=None, disabled=None) -> None:
        """Change a control without triggering our own observer."""
        w = self.controls[key]
        self._bulk = True
        try:
            if options is not None:
                w.options = options
            if value is not None:
                w.value = value
            if disabled is not None:
                w.disabled = disabled
        finally:
            self._bulk = False
