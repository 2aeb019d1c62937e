"""``StepView``: what the cost terms (``terms/``) may read of the configuration they price.

`StepModel` is one; the terms are annotated against this Protocol rather than the whole
class, so they stand below it: the model imports the terms, never the other way round.
"""

from __future__ import annotations

from typing import Protocol

from ...hardware import Cluster, Mesh
from ...models import ModelConfig
from ..config import ParallelConfig
from ..params import TrainingParams
from .costs import DenseLayers, StageCosts

__all__ = ["StepView"]


class StepView(Protocol):
    """One configuration being costed: its inputs, its per-part costs and the exchanges
    the model prices once (pipeline, expert and context-parallel)."""

    cfg: ModelConfig
    par: ParallelConfig
    cluster: Cluster
    tparams: TrainingParams
    seq: int
    seq_local: int  # positions per context-parallel rank
    m: int  # microbatches per step
    mesh: Mesh
    costs: StageCosts
    act_dtype_bytes: int
    layer_params: float
    ep_s: float
    ep_bytes: float
    cp_fwd_s: float
    cp_bwd_s: float
    cp_fwd_bytes: float
    cp_bwd_bytes: float
    dense: DenseLayers | None

    def collective_s(self, kind: str, size: float, axes: tuple[str, ...]) -> float: ...

    def layer_policies(self, n_layers: int, n_full: int | None) -> tuple[int, int, int]: ...

    def layer_act(self, policy: str) -> float: ...  # `recompute.layer_act`, computed once
