"""Activation recomputation: which layers recompute what, the activations they keep, the
time and FLOPs they add, and the working set a recomputed layer needs.

Policies (`ParallelConfig.recompute`): ``none``; ``selective`` (the attention core:
scores, softmax, context; Korthikanti et al. 2022; or torchtitan's op-level policy with
``TrainingParams.selective_recompute="op"``); ``full`` (keep the layer input only);
``per_layer`` (``n_full`` layers per stage full, the others selective).

Activation offload (``TrainingParams.activation_offload_layers``, Megatron-Core's
``cpu_offloading_num_layers`` over Transformer Engine's CPU offload) is the other way to
keep fewer activations: ``N`` layers of a stage copy what they keep to host memory after
their forward and back before their backward, over the chip's host link, on a stream of
their own behind the stage's compute (`offloaded_layers`, `offload_bytes`, `offload_copy_s`).
"""

from __future__ import annotations

import dataclasses

from ....hardware import HardwareError
from ....hardware.host import host_link
from ...errors import TrainingParamsError
from ...memory import (
    ActivationTerms,
    activation_bytes_per_layer,
    inner_bytes_per_token,
    layer_terms,
)
from ..view import StepView
from . import cp, dense

__all__ = [
    "layer_policies",
    "activation_terms",
    "layer_act",
    "layers_act",
    "layers_s",
    "selective_s",
    "working_set",
    "extra_flops_per_sequence",
    "module_bytes_per_token",
    "offloaded_layers",
    "offload_bytes",
    "offload_saved_bytes",
    "offload_copy_s",
]


def layer_policies(policy: str, n_layers: int, n_full: int | None) -> tuple[int, int, int]:
    """(layers with no recompute, selective, full) among ``n_layers`` of a stage.

    >>> layer_policies("per_layer", 5, 2)
    (0, 3, 2)
    """
    if policy == "none":
        return n_layers, 0, 0
    if policy == "selective":
        return 0, n_layers, 0
    if policy == "full":
        return 0, 0, n_layers
    k = min(n_full or 0, n_layers)
    return 0, n_layers - k, k


def activation_terms(s: StepView) -> ActivationTerms:
    """The activation terms of one layer of ``s.cfg``: Korthikanti et al.'s GPT constants
    (``TrainingParams.activations``) scaled to the model's norms, dropout, attention and MLP
    (`memory.layer_terms`); a MoE or MLA layer's split term is `dense.activation_terms`'.
    FP8 GEMMs with ``TrainingParams.fp8_saved_inputs`` keep their inputs in one byte."""
    cfg, tp_ = s.cfg, s.tparams
    plain = not (cfg.is_moe or cfg.is_mla)
    g = 1.0 if tp_.precision == "fp8" and tp_.fp8_saved_inputs else 2.0
    terms = dense.activation_terms(s)
    if not plain and g != 2.0:  # the MoE / MLA insides' FP8 GEMM inputs in one byte
        ratio = inner_bytes_per_token(cfg, g) / inner_bytes_per_token(cfg)
        terms = dataclasses.replace(terms, split_bytes=terms.split_bytes * ratio)
    return layer_terms(cfg, terms, split=plain, gemm_input_bytes=g)


def layer_act(s: StepView, policy: str) -> float:
    """Activation bytes one layer keeps per microbatch under ``policy`` (none, selective
    or full), Korthikanti et al. 2022 counted for the model's layer (`activation_terms`).
    With ``TrainingParams.flash_attention`` the fused kernel keeps no ``s x s`` scores,
    softmax or dropout mask (Dao et al. 2022), so a layer without recomputation keeps what
    a selectively recomputed one keeps. Selective with ``TrainingParams.recompute_modules``
    keeps what no recomputation keeps less those modules' outputs
    (`module_bytes_per_token`)."""
    cfg, par = s.cfg, s.par
    modules = s.tparams.recompute_modules
    if policy == "selective" and modules:
        none = layer_act(s, "none")
        dropped = sum(_module_bytes(s, m) for m in modules if m != "core_attn")
        if "core_attn" in modules:
            dropped += _core_attn_bytes(s)
        return max(none - dropped, layer_act(s, "full"))
    if policy == "selective" and s.tparams.selective_recompute == "op":
        keep = s.tparams.op_recompute_saved_bytes  # a policy that names what it saves
        if keep is None:
            keep = s.tparams.op_recompute_saved_fraction  # torchtitan's op-level policy
        full = layer_act(s, "full")
        return full + keep * (layer_act(s, "none") - full)
    if policy == "none" and s.tparams.flash_attention:
        policy = "selective"
    return activation_bytes_per_layer(
        s.seq, par.microbatch_size, cfg.hidden_size, cfg.num_heads, par.tp, par.sp,
        policy, activation_terms(s), par.cp, cp.kv_hidden(cfg, par.tp), par.cp_kv_exchange,
        not s.tparams.cp_kv_regather,
    )  # fmt: skip


def layers_act(s: StepView, n_layers: int, n_full: int | None) -> float:
    """Activation bytes ``n_layers`` layers of one stage keep per microbatch."""
    none_, sel, full = layer_policies(s.par.recompute, n_layers, n_full)
    act = none_ * s.layer_act("none") + sel * s.layer_act("selective")
    return act + full * s.layer_act("full")


def layers_s(s: StepView, n_layers: int, n_full: int | None) -> float:
    """Seconds ``n_layers`` layers of one stage spend recomputing per microbatch: the whole
    forward (with its tensor-parallel collectives) of a full layer, the attention core of a
    selective one."""
    _, sel, full = layer_policies(s.par.recompute, n_layers, n_full)
    L = s.costs.layer
    return full * (L.forward_s + L.tp_forward_s) + sel * selective_s(s)


def selective_s(s: StepView) -> float:
    """Seconds one selectively recomputed layer spends recomputing: its attention core's
    forward, or with ``selective_recompute="op"`` the share of its forward whose outputs
    were not kept (``1 - op_recompute_saved_fraction``), or with ``recompute_modules``
    those modules' forward (`_module_s`)."""
    L, tp_ = s.costs.layer, s.tparams
    if tp_.recompute_modules:
        return sum(_module_s(s, m) for m in tp_.recompute_modules)
    if tp_.selective_recompute == "op":
        return (1.0 - tp_.op_recompute_saved_fraction) * L.forward_s
    return L.recompute_selective_s


def working_set(s: StepView, layer_counts: list[int], n_full: int | None) -> float:
    """Bytes a device needs while recomputing one layer (stages with ``layer_counts``
    layers): a full layer's activations when any layer is fully recomputed, the attention
    core's when only selective recompute runs."""
    policies = [layer_policies(s.par.recompute, n, n_full) for n in layer_counts]
    if any(f for _, _, f in policies):
        return s.layer_act("none")
    if any(sel for _, sel, _ in policies):
        return s.layer_act("none") - s.layer_act("selective")
    return 0.0


def extra_flops_per_sequence(s: StepView) -> float:
    """FLOPs recomputation adds per sequence, whole model: every layer's forward (full),
    or the attention core's share of it, by time (selective, per_layer)."""
    c, cfg, r = s.costs, s.cfg, s.par.recompute
    if r == "full":
        return cfg.num_layers * c.layer.flops
    if r in ("selective", "per_layer"):
        core = selective_s(s) / max(c.layer.forward_s, 1e-30)
        return cfg.num_layers * c.layer.flops * core  # the core's share, by time
    return 0.0


def offloaded_layers(s: StepView, n_layers: int) -> int:
    """Layers of a stage of ``n_layers`` whose activations go to the host: the first
    ``activation_offload_layers`` of them, never its last (Megatron-Core requires fewer than
    the layers: the last layer's backward follows its forward at once).

    >>> from types import SimpleNamespace as NS
    >>> offloaded_layers(NS(tparams=NS(activation_offload_layers=40)), 80)
    40
    >>> offloaded_layers(NS(tparams=NS(activation_offload_layers=40)), 20)
    19
    """
    return min(s.tparams.activation_offload_layers, max(n_layers - 1, 0))


def offload_bytes(s: StepView, n_layers: int, n_full: int | None) -> float:
    """Activation bytes of one microbatch the offloaded layers of a stage of ``n_layers``
    copy to the host (and back): their share of what the stage's layers keep
    (`layers_act`, the layers' mean under the stage's policies)."""
    k = offloaded_layers(s, n_layers)
    if k == 0:
        return 0.0
    return k * layers_act(s, n_layers, n_full) / n_layers


def offload_saved_bytes(s: StepView, n_layers: int, n_full: int | None) -> float:
    """Activation bytes of one microbatch a stage of ``n_layers`` no longer holds on the
    device: its offloaded layers' (`offload_bytes`), less the reload buffers the backward
    fills (``TrainingParams.activation_offload_buffer_layers`` layers, at most the
    offloaded ones) beyond what the layers kept on the device hold. Transformer Engine
    offloads the first layers, so at the end of the forward, the peak, only the last
    ``n_layers - k`` layers' activations are on the device; the backward reloads the
    offloaded ones as it frees those, and needs more only when they are fewer than the
    reload buffers.

    >>> from types import SimpleNamespace as NS
    >>> tparams = NS(activation_offload_layers=3, activation_offload_buffer_layers=2.0)
    >>> s = NS(tparams=tparams, par=NS(recompute="none"), layer_act=lambda policy: 1.0)
    >>> offload_saved_bytes(s, 80, None), offload_saved_bytes(s, 4, None)
    (3.0, 2.0)
    """
    k = offloaded_layers(s, n_layers)
    if k == 0:
        return 0.0
    per_layer = offload_bytes(s, n_layers, n_full) / k
    buffers = min(float(k), s.tparams.activation_offload_buffer_layers)
    return (k - max(buffers - (n_layers - k), 0.0)) * per_layer


def offload_copy_s(s: StepView, n_layers: int, n_full: int | None) -> float:
    """Seconds the offloaded layers of a stage of ``n_layers`` spend copying one
    microbatch's activations one way (device to host in the forward, back in the
    backward) over the chip's host link (`explorer.hardware.host.host_link`: PCIe, or
    NVLink-C2C on a GB200), one transfer per layer; `StepModel.stage_segments` lays the
    copies behind the stage's compute."""
    k = offloaded_layers(s, n_layers)
    if k == 0:
        return 0.0
    try:
        link = host_link(s.cluster)
    except HardwareError as e:
        raise TrainingParamsError(
            f"TrainingParams.activation_offload_layers={s.tparams.activation_offload_layers} "
            f"needs the chip's host link: {e}; or set activation_offload_layers=0"
        ) from None
    return offload_bytes(s, n_layers, n_full) / link.bandwidth_bytes_per_s + k * link.latency_s


# Bytes a memory-bound module moves per byte of the output it recomputes: a norm reads its
# input and writes its output (2); the SwiGLU activation reads the gate and up outputs
# (twice its output) and writes its output (3).
_MODULE_TRAFFIC = {"layernorm": 2.0, "moe_act": 3.0}


def module_bytes_per_token(cfg, module: str, gemm_input_bytes: float = 2.0) -> tuple[float, float]:
    """(split, replicated) activation bytes per token one layer of ``cfg`` keeps in the
    outputs of Megatron-Core's recompute module ``module`` (what ``recompute_modules``
    drops for the backward): ``mla_up_proj`` MLA's Q, K (``n (d_nope + d_rope)`` each) and
    V (``n d_v``) in BF16; ``moe_act`` the routed experts' SwiGLU (or GELU) outputs, ``k f``
    in BF16; ``layernorm`` the two norms' outputs, the QKV and MLP GEMMs' inputs
    (``gemm_input_bytes`` each per ``h``; tensor parallelism keeps them whole). 0 for what
    the model does not have.

    >>> from explorer.models import load
    >>> module_bytes_per_token(load("deepseek-v3"), "mla_up_proj")
    (131072.0, 0.0)
    >>> module_bytes_per_token(load("deepseek-v3"), "moe_act")
    (32768.0, 0.0)
    """
    if module == "mla_up_proj" and cfg.is_mla:
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        return 2.0 * cfg.num_heads * (2 * qk + cfg.v_head_dim), 0.0
    if module == "moe_act" and cfg.is_moe:
        return 2.0 * cfg.experts_top_k * cfg.moe_ffn, 0.0
    if module == "layernorm":
        return 0.0, 2.0 * gemm_input_bytes * cfg.hidden_size
    return 0.0, 0.0


def _module_bytes(s: StepView, module: str) -> float:
    """Bytes of one layer and microbatch in ``module``'s outputs on a device (the split
    part over tp, the replicated part over tp with sequence parallelism)."""
    g = 1.0 if s.tparams.precision == "fp8" and s.tparams.fp8_saved_inputs else 2.0
    split, repl = module_bytes_per_token(s.cfg, module, g)
    tokens = s.seq_local * s.par.microbatch_size
    return tokens * (split / s.par.tp + repl / (s.par.tp if s.par.sp else 1))


def _core_attn_bytes(s: StepView) -> float:
    """The attention core's bytes (Korthikanti et al.'s selective policy), computed without
    ``recompute_modules``."""
    plain = dataclasses.replace(s.tparams, recompute_modules=())
    view = _With(s, plain)
    return layer_act(view, "none") - layer_act(view, "selective")


def _module_s(s: StepView, module: str) -> float:
    """Seconds one layer spends recomputing ``module`` for a microbatch: the attention core
    as the selective policy prices it; MLA's up-projections by their share of the layer's
    forward FLOPs; a memory-bound module by the bytes it moves at the chip's HBM bandwidth
    (``hbm_efficiency``)."""
    L, cfg = s.costs.layer, s.cfg
    if module == "core_attn":
        return L.recompute_selective_s
    if module == "mla_up_proj" and cfg.is_mla:
        q_in = cfg.q_lora_rank or cfg.hidden_size
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        per_token = (
            2
            * cfg.num_heads
            * (q_in * qk + cfg.kv_lora_rank * (cfg.qk_nope_head_dim + cfg.v_head_dim))
        )
        flops = per_token * s.seq_local * s.par.microbatch_size / s.par.tp
        return L.forward_s * min(flops / max(L.flops, 1e-30), 1.0)
    traffic = _MODULE_TRAFFIC.get(module, 0.0) * _module_bytes(s, module)
    bw = s.cluster.chip.memory_bandwidth_bytes_per_s * s.tparams.hbm_efficiency
    return traffic / bw


class _With:
    """``s`` seen with other TrainingParams (the layer's terms under another policy)."""

    def __init__(self, s: StepView, tparams) -> None:
        self._s, self.tparams = s, tparams

    def __getattr__(self, name: str):
        return getattr(self._s, name)

    def layer_act(self, policy: str) -> float:
        return layer_act(self, policy)
