"""Pipeline parallelism: stage-to-stage transfers and the tied head copy on the last stage.

The schedule itself (bubble, microbatches in flight) is ``pipeline/``; this module prices
what the pipeline sends.
"""

from __future__ import annotations

from ..view import StepView

__all__ = ["head_params", "p2p", "comm_bytes"]


def head_params(s: StepView) -> float:
    """Parameters of the head part (whole, before the tensor split): with tied embeddings
    and more than one stage, the last stage keeps its own copy of the embedding."""
    head = s.costs.head.params
    if s.cfg.tied_embeddings and s.par.stages > 1:
        head += s.cfg.vocab_size * s.cfg.hidden_size
    return head


def p2p(s: StepView) -> tuple[float, float]:
    """(seconds, bytes sent) of one microbatch's activation from one stage to the next.

    With ``TrainingParams.p2p_scatter_gather`` and tp > 1, each device sends 1/tp of the
    message between nodes and the receivers all-gather it (Narayanan et al. 2021, 4.1).
    """
    par, tp_ = s.par, s.tparams
    if par.pp == 1:
        return 0.0, 0.0
    bw_eff = tp_.cost.bandwidth_efficiency
    msg = par.microbatch_size * s.seq_local * s.cfg.hidden_size * s.act_dtype_bytes
    t = par.tp
    if tp_.p2p_scatter_gather and t > 1:
        seconds = (
            s.collective_s("send/recv", msg / t, ("pp",))
            + s.collective_s("all-gather", msg, ("tp",))
        ) / bw_eff
        return seconds, msg / t
    return s.collective_s("send/recv", msg, ("pp",)) / bw_eff, msg


def comm_bytes(s: StepView) -> float:
    """Bytes a device sends per step: an activation forward and a gradient backward per
    microbatch and model chunk."""
    par = s.par
    return 2 * s.p2p_bytes * s.m * par.virtual_stages if par.pp > 1 else 0.0
