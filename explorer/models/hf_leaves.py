"""Leaf handlers: transformers' MoE blocks and DeepSeek's MLA attention as first-class ops.

Registered (`register_leaf`) for every traced model on import of this module, which
`explorer.models.torch_import` performs; ``moe_leaves(capacity_factor=...)`` gives handlers
with a capacity to pass as ``from_torch(..., leaves=...)``.

================================ ===========================================================
module class                     emitted
================================ ===========================================================
MixtralSparseMoeBlock            router (softmax, top-k, renormalised), experts, combine
Qwen2MoeSparseMoeBlock           the same without renormalisation unless norm_topk_prob,
                                 plus the shared expert times sigmoid(shared_expert_gate)
Qwen3MoeSparseMoeBlock           router (norm_topk_prob), experts, combine
DeepseekV2Moe                    softmax router (greedy or group-limited greedy by the
                                 largest score), routed_scaling_factor, shared experts
Llama4TextMoe                    sigmoid of the top-k logits scaling each token before its
                                 experts (transformers runs all experts densely), shared
                                 expert
PhimoeSparseMoeBlock             PhiMoE's sparsemixer router (eval mode: two banded top-1
                                 picks, ``router_jitter_noise``), experts, combine
DeepseekV3MoE                    sigmoid router with e_score_correction_bias (an ``input``
                                 node), group-limited by the top-2 sum, normalised, scaled;
                                 shared experts
DeepseekV3Attention              MLA: q (low-rank or not), ``mla_attention``, o_proj
DeepseekV2Attention              the same; its complex rotary tables rebuilt as cos/sin
================================ ===========================================================

Transformers' experts run dropless; the handlers do too unless a capacity factor is given.
"""

from __future__ import annotations

from typing import Any

from ..ir import DType, TensorType
from .deepseek import MOE_CLASSES, MLASpec, emit_mla, emit_moe, moe_spec_of
from .torch_import.convert import Ref
from .torch_import.leaves import LeafCall, LeafHandler, register_leaf
from .torch_import.report import TorchImportError

__all__ = ["moe_leaves", "mla_leaves", "MOE_CLASSES", "MLA_CLASSES"]

MLA_CLASSES = ("DeepseekV3Attention", "DeepseekV2Attention")


def _shared(p: dict[str, Ref], prefix: str):
    names = [f"{prefix}.{w}_proj.weight" for w in ("gate", "up", "down")]
    return tuple(p[n] for n in names) if all(n in p for n in names) else None


def _emit_moe(call: LeafCall, capacity_factor: float | None) -> tuple[Ref, ...]:
    m, cx, p = call.module, call.cx, dict(call.params)
    spec = moe_spec_of(m, capacity_factor)
    bias = None
    if type(m).__name__ == "DeepseekV3MoE":
        name = f"{call.path}.gate.e_score_correction_bias"
        if name in cx.b._types:  # the importer lifted the buffer as an input
            bias = Ref(name)
        else:
            bias = cx.source("input", name, TensorType((spec.experts,), DType.FP32),
                             call.path, True)  # fmt: skip
    shared = _shared(p, "shared_experts") or _shared(p, "shared_expert")
    router_w = p["router.weight"] if "router.weight" in p else p["gate.weight"]  # PhiMoE
    y = emit_moe(cx, call.inputs[0], spec, router_w=router_w,
                 gate_up=p["experts.gate_up_proj"], down=p["experts.down_proj"], bias=bias,
                 shared=shared, shared_gate=p.get("shared_expert_gate.weight"))  # fmt: skip
    return (y,)


def _emit_mla(call: LeafCall) -> tuple[Ref, ...]:
    m, cx = call.module, call.cx
    x = call.inputs[0]
    b, s, _ = cx.shape(x)
    rope = m.qk_rope_head_dim
    # transformers' rotary tables are [1 or b, s, rope] (position_ids has batch 1 by default)
    tables = [r for r in call.inputs[1:] if cx.shape(r)[1:] == (s, rope)
              and cx.shape(r)[0] in (1, b) and cx.type(r).dtype.is_float]  # fmt: skip
    if len(tables) != 2:
        raise TorchImportError(
            f"{call.path} ({type(m).__name__}): expected the rotary tables cos and sin "
            f"[{b}, {s}, {rope}] among its tensor inputs, found "
            f"{[cx.shape(r) for r in call.inputs[1:]]}"
        )
    tables = [r if cx.shape(r)[0] == b else cx.op("broadcast_to", r, shape=(b, s, rope))
              for r in tables]  # fmt: skip
    spec = MLASpec(heads=m.num_heads, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                   qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=rope,
                   v_head_dim=m.v_head_dim, scaling=float(m.scaling),
                   interleave=bool(getattr(m.config, "rope_interleave", False)),
                   eps=float(m.kv_a_layernorm.variance_epsilon))  # fmt: skip
    return (emit_mla(cx, x, spec, dict(call.params), tables[0], tables[1]),)


def _v2_tables(call: LeafCall, b: int, s: int, rope: int) -> tuple[Ref, Ref]:
    """DeepSeek-V2's rotary tables as (cos, sin) ``[b, s, rope]`` in the halves layout of
    ``mla_attention(interleave=True)``: transformers hands the attention one complex tensor,
    ``polar(1, positions x inv_freq) x attention_scaling``, which the IR cannot hold; the
    tables are rebuilt from the model's ``rotary_emb.inv_freq`` buffer for positions
    ``0 .. s-1`` (no cache)."""
    cx, m = call.cx, call.module
    found = [n for n in cx.b._types if n.endswith("rotary_emb.inv_freq")]
    if len(found) != 1 or cx.shape(Ref(found[0])) != (rope // 2,):
        raise TorchImportError(
            f"{call.path} (DeepseekV2Attention): its rotary tables are rebuilt from the "
            f"model's rotary_emb.inv_freq buffer [{rope // 2}], found {found}; trace the "
            "whole model (DeepseekV2ForCausalLM or DeepseekV2Model)"
        )
    factor = 1.0
    rope_type = (m.config.rope_parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        factor = float(ROPE_INIT_FUNCTIONS[rope_type](m.config, "cpu")[1])
    pos = cx.op("fill", kind="arange", shape=(s, 1), dtype="fp32")
    ang = cx.op("mul", pos, Ref(found[0]), base="rope_angles")
    tables = []
    for fn in ("cos", "sin"):
        t = cx.op(fn, ang)
        if factor != 1.0:
            t = cx.op("scale", t, factor=factor)
        t = cx.op("cat", t, t, axis=-1)
        tables.append(cx.op("broadcast_to", t, shape=(b, s, rope)))
    return tables[0], tables[1]


def _emit_mla_v2(call: LeafCall) -> tuple[Ref, ...]:
    m, cx = call.module, call.cx
    x = call.inputs[0]
    b, s, _ = cx.shape(x)
    cos, sin = _v2_tables(call, b, s, m.qk_rope_head_dim)
    spec = MLASpec(heads=m.num_heads, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                   qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                   v_head_dim=m.v_head_dim, scaling=float(m.scaling), interleave=True,
                   eps=float(m.kv_a_layernorm.variance_epsilon))  # fmt: skip
    return (emit_mla(cx, x, spec, dict(call.params), cos, sin),)


def _emit_llama4_moe(call: LeafCall, capacity_factor: float | None) -> tuple[Ref, ...]:
    """Llama 4's MoE: transformers runs every expert on every token (weights zero but for
    the top-k); the ops route each token to its top-k experts only, scaled before them.
    Returns (output [t, h], router logits [t, e]) as the module does."""
    m, cx, p = call.module, call.cx, dict(call.params)
    x = call.inputs[0]
    b, s, h = cx.shape(x)
    spec = moe_spec_of(m, capacity_factor)
    logits = cx.op("einsum", x, p["router.weight"], base="router_logits", eq="bsh,eh->bse")
    y = emit_moe(cx, x, spec, gate_up=p["experts.gate_up_proj"], down=p["experts.down_proj"],
                 shared=_shared(p, "shared_expert"), logits=logits, transposed=True)  # fmt: skip
    return cx.reshape(y, (b * s, h)), cx.reshape(logits, (b * s, spec.experts))


def _llama4_outputs(module: Any, inputs: tuple[Any, ...]):
    x = inputs[0]
    t = x.numel() // x.shape[-1]
    return [((t, x.shape[-1]), x.dtype), ((t, module.num_experts), x.dtype)]


def moe_leaves(capacity_factor: float | None = None) -> dict[str, LeafHandler]:
    """Handlers for every MoE block class, with ``capacity_factor`` (``None``: dropless)."""
    h = LeafHandler(lambda call: _emit_moe(call, capacity_factor), name="moe")
    out = dict.fromkeys(MOE_CLASSES, h)
    out["Llama4TextMoe"] = LeafHandler(
        lambda call: _emit_llama4_moe(call, capacity_factor),
        outputs=_llama4_outputs,
        pack=lambda outs: (outs[0], outs[1]),
        name="moe",
    )
    return out


def mla_leaves() -> dict[str, LeafHandler]:
    """Handlers for MLA attention (the module returns ``(output, None)``)."""
    pack = lambda outs: (outs[0], None)  # noqa: E731
    return {"DeepseekV3Attention": LeafHandler(_emit_mla, pack=pack, name="mla"),
            "DeepseekV2Attention": LeafHandler(_emit_mla_v2, pack=pack, name="mla")}  # fmt: skip


for _cls, _h in {**moe_leaves(), **mla_leaves()}.items():
    register_leaf(_cls, _h)
