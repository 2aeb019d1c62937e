"""Context parallelism (Llama Team 2024, "The Llama 3 Herd of Models", section 3.3.2): every
sequence is split over ``cp`` devices, which exchange keys and values for attention.

What a device does with ``cp`` ranks, per layer and microbatch:

- holds ``seq / cp`` positions of every activation (the sequence is cut into ``2 cp``
  chunks and rank ``i`` takes chunks ``i`` and ``2 cp - 1 - i``, so causal attention is
  balanced), and computes ``1 / cp`` of the layer's FLOPs: its time is the whole sequence's
  per-layer time divided by ``cp`` (`split_costs`; exact for FLOPs with that balancing);
- exchanges keys and values, ``kv = 2 b (s / cp) h_kv / t`` 16-bit elements (K and V of its
  positions, ``h_kv``: GQA's kv heads x head size, split over tp):

  ==============  =================================  ====================================
  exchange        forward                            backward
  ==============  =================================  ====================================
  ``all_gather``  all-gather K, V over cp: sends     reduce-scatter dK, dV: sends
  (Llama 3)       ``(cp - 1) kv``; exposed           ``(cp - 1) kv``; exposed
  ``ring``        cp - 1 send/recv of ``kv``, each   cp - 1 send/recv of K, V and dK, dV
                  overlapped with the attention of   (``2 kv``), each overlapped with the
                  the chunk in hand                  attention backward of one chunk
  ==============  =================================  ====================================

  Llama 3 takes the all-gather: it supports any attention mask, and with GQA K and V are
  small next to the O(s^2) attention, so the exposed all-gather is short. How long the
  gathered K, V live is the paper's silence: kept from the forward to the backward (the
  default: ``(cp - 1) kv`` more bytes per layer and microbatch in flight, `memory`), or,
  with ``TrainingParams.cp_kv_regather``, dropped after the forward and all-gathered again
  in the backward (TransformerEngine's ``AttnFuncWithCPAndKVAllGather``, which cites
  Llama 3 section 3.3.2, saves only the local K, V): the backward then sends
  ``2 (cp - 1) kv`` (all-gather K, V; reduce-scatter dK, dV).
- the layer in flight holds, besides what layers keep for their backward, the all-gather's
  whole-sequence dK, dV (``cp kv``) in its backward, and with ``cp_kv_regather`` the
  re-gathered K, V too (`transient_bytes`).
- holds the same weights as the other ranks: gradients are reduced over ``dp * cp``
  devices (`ParallelConfig.weight_replicas`, the ``cp`` axis in ``zero.AXES``).

A full recompute runs the forward exchange again before the backward.
"""

from __future__ import annotations

from dataclasses import replace

from ....models import ModelConfig
from ...config import ParallelConfig
from ...errors import ContextParallelError
from ..costs import PartCost, StageCosts
from ..kernels import flash_attention_s, fused_attention
from ..view import StepView

__all__ = [
    "AXIS",
    "validate",
    "local_seq",
    "device_share",
    "kv_hidden",
    "split_costs",
    "kv_bytes",
    "exchange",
    "attention_core_s",
    "stage_s",
    "comm_bytes",
    "needs_cp",
    "transient_bytes",
]

AXIS = ("cp",)


def validate(par: ParallelConfig, seq: int) -> None:
    """Raise `ContextParallelError` unless ``seq`` splits into ``2 cp`` equal chunks.

    >>> from explorer.training.config import ParallelConfig
    >>> validate(ParallelConfig(cp=16), 131072)
    >>> validate(ParallelConfig(cp=3), 100)
    Traceback (most recent call last):
    ...
    explorer.training.errors.ContextParallelError: cp=3 splits each sequence into 2 * cp = 6 chunks (balanced causal attention), but seq=100 is not divisible by 6; choose cp so that 2 * cp divides the sequence length
    """
    if par.cp > 1 and seq % (2 * par.cp):
        raise ContextParallelError(
            f"cp={par.cp} splits each sequence into 2 * cp = {2 * par.cp} chunks (balanced "
            f"causal attention), but seq={seq} is not divisible by {2 * par.cp}; choose cp so "
            "that 2 * cp divides the sequence length"
        )


def local_seq(seq: int, cp: int) -> int:
    """Positions of each sequence one device holds: ``seq / cp`` (validated to divide)."""
    return seq // cp


def kv_hidden(cfg: ModelConfig, tp: int) -> int:
    """Key/value channels of a layer counted before the tensor split: ``kv_heads x head
    size``, or ``tp x head size`` when tp exceeds the kv heads (each rank then keeps one
    replicated kv head).

    >>> from explorer.models import load
    >>> kv_hidden(load("llama3-405b"), 8), kv_hidden(load("llama3-405b"), 16)
    (1024, 2048)
    """
    return max(cfg.kv_heads, tp) * cfg.dim_head


def device_share(seconds: float, cp: int) -> float:
    """One device's share of a whole-sequence time: ``1 / cp`` of it (its positions'
    matmuls and collectives, and with the balanced chunks ``1 / cp`` of the attention)."""
    return seconds / cp


def _split(p: PartCost, cp: int) -> PartCost:
    return replace(
        p,
        forward_s=device_share(p.forward_s, cp),
        backward_s=device_share(p.backward_s, cp),
        tp_forward_s=device_share(p.tp_forward_s, cp),
        tp_backward_s=device_share(p.tp_backward_s, cp),
        recompute_selective_s=device_share(p.recompute_selective_s, cp),
    )


def split_costs(costs: StageCosts, cp: int) -> StageCosts:
    """One device's share of the whole-sequence part costs: every time divided by ``cp``
    (its positions' matmuls and tensor-parallel collectives, and, with Llama 3's balanced
    chunks, 1/cp of the attention); parameters and FLOPs (whole, per microbatch) kept."""
    if cp == 1:
        return costs
    return replace(
        costs,
        layer=_split(costs.layer, cp),
        embed=_split(costs.embed, cp),
        head=_split(costs.head, cp),
    )


def kv_bytes(s: StepView) -> float:
    """Bytes of one layer's K and V for a device's ``seq / cp`` positions of one
    microbatch, ``2 b (s / cp) h_kv / t`` elements."""
    par = s.par
    kv = kv_hidden(s.cfg, par.tp) / par.tp
    return 2 * par.microbatch_size * s.seq_local * kv * s.act_dtype_bytes


def exchange(s: StepView) -> tuple[float, float, float, float]:
    """(forward seconds, backward seconds, forward bytes sent, backward bytes sent) of one
    layer's key/value exchange for one microbatch on one device (the table above)."""
    par = s.par
    if par.cp == 1:
        return 0.0, 0.0, 0.0, 0.0
    bw_eff = s.tparams.cost.bandwidth_efficiency
    kv = kv_bytes(s)
    if par.cp_kv_exchange == "all_gather":
        full = kv * par.cp  # the gathered K, V (all-gather's size convention)
        fwd = s.collective_s("all-gather", full, AXIS) / bw_eff
        bwd = s.collective_s("reduce-scatter", full, AXIS) / bw_eff
        sent_f = s.mesh.collective_bytes("all-gather", full, AXIS)
        sent_b = s.mesh.collective_bytes("reduce-scatter", full, AXIS)
        if s.tparams.cp_kv_regather:  # K, V all-gathered again for the backward
            bwd += fwd
            sent_b += sent_f
        return fwd, bwd, sent_f, sent_b
    # ring: cp - 1 steps; step k sends the chunk held while attending to it, and every
    # step is 1/cp of the device's attention (`attention_core_s`)
    steps = par.cp - 1
    core_f, core_b = (t / par.cp for t in attention_core_s(s))
    send_f = s.collective_s("send/recv", kv, AXIS) / bw_eff
    send_b = s.collective_s("send/recv", 2 * kv, AXIS) / bw_eff
    fwd = steps * max(0.0, send_f - core_f)
    bwd = steps * max(0.0, send_b - core_b)
    return fwd, bwd, steps * kv, steps * 2 * kv


def transient_bytes(s: StepView) -> float:
    """Bytes the layer in flight holds for its key/value exchange beyond what every layer
    keeps for its backward (one layer, one microbatch, all-gather only): the whole
    sequence's dK, dV before their reduce-scatter (``cp kv``), and with
    ``cp_kv_regather`` the re-gathered K, V as well. The ring's chunks in transit
    (``kv`` each) are not counted."""
    par = s.par
    if par.cp == 1 or par.cp_kv_exchange != "all_gather":
        return 0.0
    return par.cp * kv_bytes(s) * (2 if s.tparams.cp_kv_regather else 1)


def attention_core_s(s: StepView) -> tuple[float, float]:
    """(forward, backward) seconds of one device's attention core per layer and microbatch:
    what the ring exchange hides behind, priced as the layer's own time prices it.

    - A fused (flash) kernel (`kernels.fused_attention`): `kernels.flash_attention_s` of
      the whole sequence's core divided by ``cp``, the share `split_costs` gives the
      device. Per ring step: with the zig-zag chunks (rank ``i`` holds chunks ``i`` and
      ``2 cp - 1 - i`` of ``seq / (2 cp)`` positions) every one of the ``cp`` steps runs
      half of its ``(seq / cp)^2`` block of (query, key) pairs: with another rank's K, V
      two of the four chunk pairs, unmasked; with its own, the two diagonal pairs under
      the causal mask and one unmasked. So each step is ``1 / cp`` of the device's kernel,
      whose causal fraction ``(n_b + 1) / (2 n_b)`` over the sequence's flash blocks
      applies to every step alike.
    - Otherwise the core's separate kernels (``recompute_selective_s``, already the
      device's share) and ``backward_compute_ratio`` times that for the backward.
    """
    layer, tp_ = s.costs.layer, s.tparams
    if fused_attention(layer.kernels, tp_):
        chip = s.cluster.chip
        fwd, bwd = (flash_attention_s(layer.kernels, b, chip, tp_) for b in (False, True))
        return device_share(fwd, s.par.cp), device_share(bwd, s.par.cp)
    core = layer.recompute_selective_s
    return core, core * tp_.cost.backward_compute_ratio


def stage_s(s: StepView, n_layers: int, n_full: int | None) -> tuple[float, float]:
    """(forward, backward) exposed seconds of the exchanges of ``n_layers`` layers of a
    stage for one microbatch; fully recomputed layers exchange their forward again."""
    if s.par.cp == 1:
        return 0.0, 0.0
    _, _, full = s.layer_policies(n_layers, n_full)
    return n_layers * s.cp_fwd_s, n_layers * s.cp_bwd_s + full * s.cp_fwd_s


def comm_bytes(s: StepView, n_layers: int) -> float:
    """Bytes a device sends per step for ``n_layers`` layers: forward and backward
    exchange of every microbatch (a full recompute's repeated forward not counted)."""
    return (s.cp_fwd_bytes + s.cp_bwd_bytes) * n_layers * s.m


def needs_cp(seq: int, min_seq_per_rank: int) -> tuple[int, ...]:
    """The context-parallel degrees `plan_training` searches at sequence length ``seq``:
    1, and the powers of two cp with ``seq / cp >= min_seq_per_rank`` that split the
    sequence into ``2 cp`` chunks. Below ``2 * min_seq_per_rank`` only 1: the sequence is
    too short to need splitting.

    >>> needs_cp(8192, 8192), needs_cp(131072, 8192)
    ((1,), (1, 2, 4, 8, 16))
    """
    out = [1]
    cp = 2
    while seq // cp >= min_seq_per_rank and seq % (2 * cp) == 0:
        out.append(cp)
        cp *= 2
    return tuple(out)
