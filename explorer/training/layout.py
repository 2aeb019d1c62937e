"""``check_layout``: whether a `ParallelConfig` can run a model at a sequence length — the one
validation of a layout against a model that the step model, the exports and the planners
share (what `simulate` refuses, `megatron_args` refuses too, with the same message).
"""

from __future__ import annotations

import math

from ..models import ModelConfig
from .config import ParallelConfig
from .errors import ParallelConfigError
from .step_model.terms import cp

__all__ = ["check_layout"]


def check_layout(cfg: ModelConfig, par: ParallelConfig, seq: int) -> None:
    """Raise `ParallelConfigError` (or `ContextParallelError`) naming the first thing of
    ``par`` that ``cfg`` at ``seq`` tokens cannot take, and the fix.

    >>> import explorer as ex
    >>> check_layout(ex.models.load("gpt2"), ex.ParallelConfig(tp=4), 1024)
    >>> check_layout(ex.models.load("gpt2"), ex.ParallelConfig(tp=5), 1024)
    Traceback (most recent call last):
    ...
    explorer.training.errors.ParallelConfigError: tp=5 does not divide the 12 attention heads of 'gpt2'; choose tp among the divisors of the head count
    """
    cp.validate(par, seq)
    if cfg.arch == "mlp":
        raise ParallelConfigError(
            f"model {cfg.name!r} is an MLP; the training simulator models transformers"
        )
    if cfg.num_heads % par.tp:
        raise ParallelConfigError(
            f"tp={par.tp} does not divide the {cfg.num_heads} attention heads of {cfg.name!r}; "
            "choose tp among the divisors of the head count"
        )
    if par.stages > cfg.num_layers + 2:
        raise ParallelConfigError(
            f"pp * virtual_stages = {par.stages} exceeds the {cfg.num_layers} layers of "
            f"{cfg.name!r} plus an embedding and a head stage; every stage needs a layer, "
            "the embedding or the head"
        )
    if par.ep > 1 and (not cfg.is_moe or cfg.num_experts % par.ep):
        raise ParallelConfigError(
            f"ep={par.ep} needs a mixture-of-experts model whose expert count it divides; "
            f"{cfg.name!r} has {cfg.num_experts} experts"
        )
    if par.recompute == "per_layer" and par.recompute_num_layers is not None:
        if par.recompute_num_layers > math.ceil(cfg.num_layers / par.stages):
            raise ParallelConfigError(
                f"recompute_num_layers={par.recompute_num_layers} exceeds the layers per "
                f"stage ({math.ceil(cfg.num_layers / par.stages)})"
            )
