"""DeepSeek-style MoE and MLA blocks from the first-class ops, and a DeepSeek-V3 builder.

The ``emit_*`` functions write one block into anything with ``op(name, *inputs, base=...,
**attrs)`` and ``shape(value)``: a `GraphBuilder` (through `BuilderEmitter`) or the torch
importer's conversion context (the leaf handlers in `explorer.models.hf_leaves`). Weights
keep transformers' layouts (``nn.Linear`` weights ``[out, in]``; experts' ``gate_up_proj``
``[e, 2f, h]``, viewed as ``[e, 2, f, h]``), so a graph's parameter names and counts are
those of the transformers model.

>>> spec = DeepSeekSpec(vocab_size=128, hidden_size=32, intermediate_size=64,
...     moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
...     q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
...     n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
...     n_group=2, topk_group=1)
>>> g = build_deepseek(spec, batch=2, seq=8)
>>> g.num_params(), [n.op for n in g.in_scope("model.layers.1.mlp") if not n.is_source][:4]
(26448, ['moe_router', 'moe_dispatch_grouped', 'reshape', 'moe_experts'])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

from ..checks import is_int
from ..ir import DType, Graph, GraphBuilder
from ..ir.ops_moe import moe_capacity
from .config import ModelConfigError
from .layers import residual

__all__ = [
    "MoESpec", "MLASpec", "DeepSeekSpec", "BuilderEmitter", "emit_gated_mlp", "emit_moe",
    "emit_mla", "build_deepseek", "yarn_mscale", "moe_spec_of", "MOE_CLASSES",
]  # fmt: skip


@dataclass(frozen=True)
class MoESpec:
    """The routing of one MoE block.

    Args:
        experts: routed experts; k: experts per token.
        score: ``"softmax"`` (Mixtral, Qwen, DeepSeek-V2) or ``"sigmoid"`` (DeepSeek-V3).
        norm_topk: divide the k weights by their sum.
        scale: multiply the weights (DeepSeek's ``routed_scaling_factor``).
        n_group, topk_group, group_score: group-limited routing (DeepSeek).
        capacity_factor: slots per expert and group = ``ceil(s k / e * factor)``; ``None``
            is dropless (every expert can take every token of its group), as transformers
            runs.
        act: the experts' activation.
        weight_inputs: scale each token by its routing weight before the experts (Llama 4)
            instead of scaling the experts' outputs.
        router, jitter_eps: ``"sparsemixer"`` is PhiMoE's routing (eval mode), with its
            ``router_jitter_noise``; ``"topk"`` the others.
    """

    experts: int
    k: int
    score: Literal["softmax", "sigmoid"] = "softmax"
    norm_topk: bool = True
    scale: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    group_score: Literal["top2_sum", "max"] = "top2_sum"
    capacity_factor: float | None = None
    act: str = "silu"
    weight_inputs: bool = False
    router: Literal["topk", "sparsemixer"] = "topk"
    jitter_eps: float = 0.0

    def router_attrs(self) -> dict[str, Any]:
        out = {"k": self.k, "score": self.score, "norm_topk": self.norm_topk,
               "scale": float(self.scale), "n_group": self.n_group,
               "topk_group": self.topk_group, "group_score": self.group_score}  # fmt: skip
        if self.router != "topk":
            out.update(router=self.router, jitter_eps=float(self.jitter_eps))
        return out


@dataclass(frozen=True)
class MLASpec:
    """The sizes of one MLA block (transformers' DeepSeek-V3 names)."""

    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    scaling: float
    interleave: bool = True
    eps: float = 1e-6  # the latent norms' epsilon (transformers keeps the default 1e-6)


def yarn_mscale(rope_parameters: dict | None, head_dim: int) -> float:
    """The softmax scale of MLA: ``head_dim ** -0.5``, times ``mscale ** 2`` under YaRN
    (``0.1 * mscale_all_dim * ln(factor) + 1``), as transformers computes it."""
    scaling = head_dim**-0.5
    rp = rope_parameters or {}
    if rp.get("rope_type", "default") != "default" and rp.get("mscale_all_dim"):
        factor = rp.get("factor", 1.0)
        m = 1.0 if factor <= 1 else 0.1 * rp["mscale_all_dim"] * math.log(factor) + 1.0
        scaling *= m * m
    return scaling


@dataclass(frozen=True)
class DeepSeekSpec:
    """A DeepSeek-V3-style model: MLA attention, ``first_k_dense_replace`` dense layers,
    then MoE layers with shared experts (transformers' ``DeepseekV3Config`` field names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_routed_experts: int
    num_experts_per_tok: int
    n_shared_experts: int = 1
    first_k_dense_replace: int = 3
    n_group: int = 8
    topk_group: int = 4
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    rms_norm_eps: float = 1e-6
    rope_interleave: bool = True
    rope_parameters: dict | None = None
    tie_word_embeddings: bool = False
    capacity_factor: float | None = None

    @classmethod
    def from_hf(cls, config: Any, **overrides: Any) -> DeepSeekSpec:
        """From a transformers ``DeepseekV3Config`` (or a dict of its fields)."""
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        vals = {}
        for f in fields(cls):
            v = get(f.name, None)
            if v is None and f.name == "rope_parameters":
                v = get("rope_scaling", None)
            if v is not None:
                vals[f.name] = v
        has = (lambda k: k in config) if isinstance(config, dict) else (
            lambda k: hasattr(config, k))  # fmt: skip
        if "q_lora_rank" not in vals and has("q_lora_rank"):
            vals["q_lora_rank"] = None  # DeepSeek-V2-Lite: a full-rank q_proj
        vals.update(overrides)
        try:
            return cls(**vals)
        except TypeError as e:
            raise ModelConfigError(
                f"DeepSeek config: {e}; give the DeepseekV3Config fields "
                f"{', '.join(f.name for f in fields(cls)[:13])}"
            ) from None

    def moe(self) -> MoESpec:
        return MoESpec(experts=self.n_routed_experts, k=self.num_experts_per_tok,
                       score="sigmoid", norm_topk=self.norm_topk_prob,
                       scale=self.routed_scaling_factor, n_group=self.n_group,
                       topk_group=self.topk_group, group_score="top2_sum",
                       capacity_factor=self.capacity_factor)  # fmt: skip

    def mla(self) -> MLASpec:
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        return MLASpec(heads=self.num_attention_heads, q_lora_rank=self.q_lora_rank,
                       kv_lora_rank=self.kv_lora_rank, qk_nope_head_dim=self.qk_nope_head_dim,
                       qk_rope_head_dim=self.qk_rope_head_dim, v_head_dim=self.v_head_dim,
                       scaling=yarn_mscale(self.rope_parameters, qk),
                       interleave=self.rope_interleave)  # fmt: skip


MOE_CLASSES = ("MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock", "Qwen3MoeSparseMoeBlock",
               "DeepseekV2Moe", "DeepseekV3MoE", "Llama4TextMoe",
               "PhimoeSparseMoeBlock")  # fmt: skip

_ACTS = {"SiLUActivation": "silu", "SiLU": "silu", "GELUActivation": "gelu_erf",
         "GELUTanh": "gelu", "PytorchGELUTanh": "gelu", "NewGELUActivation": "gelu",
         "ReLU": "relu"}  # fmt: skip


def _act(module: Any) -> str:
    name = type(module).__name__
    if name not in _ACTS:
        raise ModelConfigError(
            f"expert activation {name} has no moe_experts form; supported: {sorted(_ACTS)}"
        )
    return _ACTS[name]


def moe_spec_of(m: Any, capacity_factor: float | None = None) -> MoESpec:
    """The `MoESpec` of a transformers MoE block (one of `MOE_CLASSES`), from its router."""
    cls = type(m).__name__
    if cls == "Llama4TextMoe":  # sigmoid of the top-k logits, applied to the inputs
        return MoESpec(experts=m.num_experts, k=m.top_k, act=_act(m.experts.act_fn),
                       capacity_factor=capacity_factor, score="sigmoid", norm_topk=False,
                       weight_inputs=True)  # fmt: skip
    if cls == "PhimoeSparseMoeBlock":  # sparsemixer: always two experts, whatever top_k
        return MoESpec(experts=m.num_experts, k=2, act=_act(m.experts.act_fn),
                       capacity_factor=capacity_factor, norm_topk=False, router="sparsemixer",
                       jitter_eps=float(m.router.router_jitter_noise))  # fmt: skip
    if cls not in MOE_CLASSES:
        raise ModelConfigError(f"no MoE leaf for {cls}; handled: {', '.join(MOE_CLASSES)}")
    gate = m.gate
    if not is_int(gate.top_k, minimum=1):
        raise ModelConfigError(
            f"{cls} picks top_k={gate.top_k!r} experts per token: the config's "
            "num_experts_per_tok must be a positive integer (transformers' default "
            f"{cls} config leaves it unset); set num_experts_per_tok in the config"
        )
    common = {"experts": gate.num_experts, "k": gate.top_k, "act": _act(m.experts.act_fn),
              "capacity_factor": capacity_factor}  # fmt: skip
    if cls == "MixtralSparseMoeBlock":
        return MoESpec(**common, score="softmax", norm_topk=True)
    if cls in ("Qwen2MoeSparseMoeBlock", "Qwen3MoeSparseMoeBlock"):
        return MoESpec(**common, score="softmax", norm_topk=bool(gate.norm_topk_prob))
    if cls == "DeepseekV2Moe":
        grouped = gate.topk_method == "group_limited_greedy"
        return MoESpec(**common, score="softmax", norm_topk=False,
                       scale=float(gate.routed_scaling_factor),
                       n_group=gate.num_group if grouped else 1,
                       topk_group=gate.topk_group if grouped else 1, group_score="max")  # fmt: skip
    if cls == "DeepseekV3MoE":
        return MoESpec(**common, score="sigmoid", norm_topk=bool(gate.norm_topk_prob),
                       scale=float(gate.routed_scaling_factor), n_group=gate.num_group,
                       topk_group=gate.topk_group, group_score="top2_sum")  # fmt: skip
    raise ModelConfigError(f"no MoE leaf for {cls}; handled: {', '.join(MOE_CLASSES)}")


class BuilderEmitter:
    """`GraphBuilder` seen through the emitters' interface."""

    def __init__(self, b: GraphBuilder) -> None:
        self.b = b

    def op(self, op: str, *inputs: str, base: str | None = None, **attrs: Any) -> str:
        return self.b.op(op, *inputs, name=base, **attrs)

    def shape(self, v: str) -> tuple[int, ...]:
        return self.b.shape(v)


def _linear(e, x, w, base: str):
    """``x @ w.T`` for an ``nn.Linear`` weight ``[out, in]`` on ``x: [..., in]``."""
    lead = "bcdf"[: len(e.shape(x)) - 1]
    return e.op("einsum", x, w, base=base, eq=f"{lead}h,oh->{lead}o")


def _activation(e, x, act: str, base: str):
    """An activation as IR ops; ``gelu_erf`` (torch's exact GELU) as 0.5 x (1 + erf(x/√2))."""
    if act != "gelu_erf":
        return e.op(act, x, base=base)
    t = e.op("erf", e.op("scale", x, base=f"{base}_in", factor=2**-0.5), base=f"{base}_erf")
    t = e.op("scalar_op", t, base=f"{base}_one", fn="add", value=1.0)
    return e.op("scale", e.op("mul", x, t, base=f"{base}_mul"), base=base, factor=0.5)


def emit_gated_mlp(e, x, gate_w, up_w, down_w, act: str = "silu", base: str = ""):
    """``down(act(gate x) * up x)`` with ``nn.Linear`` weights (a shared expert)."""
    g = _activation(e, _linear(e, x, gate_w, f"{base}gate_proj"), act, f"{base}act")
    u = _linear(e, x, up_w, f"{base}up_proj")
    return _linear(e, e.op("mul", g, u, base=f"{base}glu"), down_w, f"{base}down_proj")


def emit_moe(e, x, spec: MoESpec, *, router_w=None, gate_up, down, bias=None, shared=None,
             shared_gate=None, logits=None, transposed: bool = False):  # fmt: skip
    """One MoE block on ``x: [b, s, h]`` (each sequence is a routing group).

    ``gate_up``: ``[e, 2f, h]``; ``down``: ``[e, h, f]``; ``shared``: ``(gate_w, up_w,
    down_w)`` of the shared experts (one gated MLP); ``shared_gate``: Qwen2-MoE's
    ``[1, h]`` sigmoid gate on the shared expert's output; ``logits``: router logits
    computed elsewhere (instead of ``router_w``); ``transposed``: Llama 4's layouts,
    ``gate_up`` ``[e, h, 2f]`` and ``down`` ``[e, f, h]``.
    """
    shape = e.shape(x)
    if len(shape) == 2:
        x = e.op("reshape", x, base="groups", shape=(1, *shape))
    g, s, h = e.shape(x)
    n_exp, two_f, h2 = e.shape(gate_up)
    if transposed:
        h2, two_f = two_f, h2
    if n_exp != spec.experts or h2 != h or two_f % 2:
        raise ModelConfigError(
            f"experts' gate_up {e.shape(gate_up)} does not fit {spec.experts} experts on "
            f"hidden {h}; expected [experts, 2 * moe_intermediate_size, hidden]"
        )
    if logits is not None:
        ins = (logits,)
    else:
        ins = (x, router_w) if bias is None else (x, router_w, bias)
    gate = e.op("moe_router", *ins, base="router", **spec.router_attrs())
    cap = moe_capacity(s, spec.k, spec.experts, spec.capacity_factor)
    w_in = spec.weight_inputs
    xe = e.op("moe_dispatch_grouped", x, gate, base="dispatch", capacity=cap, weighted=w_in)
    f = two_f // 2
    if transposed:
        gu = e.op("reshape", gate_up, base="gate_up_split", shape=(n_exp, h, 2, f))
        gu = e.op("transpose", gu, base="gate_up", perm=(0, 2, 3, 1))
        down = e.op("transpose", down, base="down", perm=(0, 2, 1))
    else:
        gu = e.op("reshape", gate_up, base="gate_up", shape=(n_exp, 2, f, h))
    ye = e.op("moe_experts", xe, gu, down, base="experts", act=spec.act, routed=g * s * spec.k)
    y = e.op("moe_combine_grouped", ye, gate, base="combine", k=spec.k, weighted=not w_in)
    if shared is not None:
        sh = emit_gated_mlp(e, x, *shared, act=spec.act, base="shared.")
        if shared_gate is not None:
            sg = e.op("sigmoid", _linear(e, x, shared_gate, "shared_gate"), base="shared_sig")
            sh = e.op("mul", sg, sh, base="shared_gated")
        y = e.op("add", y, sh, base="add_shared")
    if len(shape) == 2:
        y = e.op("reshape", y, base="tokens", shape=shape)
    return y


def emit_mla(e, x, spec: MLASpec, p: dict[str, Any], cos, sin):
    """MLA on ``x: [b, s, h]`` with the module's parameters ``p`` by their transformers
    names (``q_a_proj.weight``, ..., ``o_proj.weight``) and rotary tables ``[b, s, rope]``."""
    b, s, _ = e.shape(x)
    n, nope, rope, v = spec.heads, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    if spec.q_lora_rank is None:
        q = _linear(e, x, p["q_proj.weight"], "q_proj")
    else:
        qa = _linear(e, x, p["q_a_proj.weight"], "q_a_proj")
        if "q_a_proj.bias" in p:
            qa = e.op("add", qa, p["q_a_proj.bias"], base="q_a_bias")
        qa = e.op("rmsnorm", qa, p["q_a_layernorm.weight"], base="q_a_layernorm", eps=spec.eps)
        q = _linear(e, qa, p["q_b_proj.weight"], "q_b_proj")
    q = e.op("reshape", q, base="q_heads", shape=(b, s, n, nope + rope))
    ckv = _linear(e, x, p["kv_a_proj_with_mqa.weight"], "kv_a_proj_with_mqa")
    if "kv_a_proj_with_mqa.bias" in p:
        ckv = e.op("add", ckv, p["kv_a_proj_with_mqa.bias"], base="kv_a_bias")
    kvb = e.op("reshape", p["kv_b_proj.weight"], base="kv_b_heads",
               shape=(n, nope + v, spec.kv_lora_rank))  # fmt: skip
    ctx = e.op("mla_attention", q, ckv, p["kv_a_layernorm.weight"], kvb, cos, sin,
               base="attention", nope=nope, scaling=float(spec.scaling),
               interleave=bool(spec.interleave), eps=float(spec.eps))  # fmt: skip
    ctx = e.op("reshape", ctx, base="merge_heads", shape=(b, s, n * v))
    out = _linear(e, ctx, p["o_proj.weight"], "o_proj")
    if "o_proj.bias" in p:
        out = e.op("add", out, p["o_proj.bias"], base="o_bias")
    return out


def build_deepseek(spec: DeepSeekSpec, batch: int = 1, seq: int = 128,
                   dtype: str = "bf16") -> Graph:  # fmt: skip
    """The forward graph (through the loss) of a DeepSeek-V3-style model, parameters named
    as transformers' ``DeepseekV3ForCausalLM`` (so ``num_params`` equals its count).

    Inputs: ``tokens``, ``labels`` ``[batch, seq]`` and the rotary tables ``cos``, ``sin``
    ``[batch, seq, qk_rope_head_dim]``.
    """
    for name, val in (("batch", batch), ("seq", seq)):
        if not is_int(val, minimum=1):
            raise ModelConfigError(f"{name}={val!r}; expected an int > 0")
    b = GraphBuilder("deepseek", dtype=DType.parse(dtype))
    e = BuilderEmitter(b)
    h = spec.hidden_size
    tokens = b.input("tokens", (batch, seq), DType.INT32)
    labels = b.input("labels", (batch, seq), DType.INT32)
    cos = b.input("cos", (batch, seq, spec.qk_rope_head_dim))
    sin = b.input("sin", (batch, seq, spec.qk_rope_head_dim))
    with b.scope("model"):
        wte = b.param("embed_tokens.weight", (spec.vocab_size, h))
        x = b.op("embedding", tokens, wte, name="embed")
        for i in range(spec.num_hidden_layers):
            with b.scope(f"layers.{i}"):
                x = _deepseek_layer(b, e, spec, i, x, cos, sin)
        x = b.op("rmsnorm", x, b.param("norm.weight", (h,)), name="norm", eps=spec.rms_norm_eps)
    if spec.tie_word_embeddings:
        head = wte
    else:
        head = b.param("lm_head.weight", (spec.vocab_size, h))
    logits = b.op("einsum", x, head, name="logits", eq="bsh,vh->bsv")
    loss = b.op("mean", b.op("cross_entropy", logits, labels, name="token_loss"), name="loss")
    return b.build([loss])


def _deepseek_layer(b: GraphBuilder, e, spec: DeepSeekSpec, i: int, x, cos, sin):
    """Layer ``i``: the pre-norm skeleton of every block (`layers.residual`) around MLA and
    a dense or MoE MLP, with transformers' names (norms outside the sub-block scopes)."""
    h, n = spec.hidden_size, spec.num_attention_heads
    nope, rope, v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    eps = spec.rms_norm_eps

    def rms(name: str):
        return lambda y: b.op("rmsnorm", y, b.param(f"{name}.weight", (h,)), name=name, eps=eps)

    def attn(xn):
        with b.scope("self_attn"):
            p = {}
            if spec.q_lora_rank is None:
                p["q_proj.weight"] = b.param("q_proj.weight", (n * (nope + rope), h))
            else:
                p["q_a_proj.weight"] = b.param("q_a_proj.weight", (spec.q_lora_rank, h))
                p["q_a_layernorm.weight"] = b.param("q_a_layernorm.weight", (spec.q_lora_rank,))
                p["q_b_proj.weight"] = b.param("q_b_proj.weight",
                                               (n * (nope + rope), spec.q_lora_rank))  # fmt: skip
            p["kv_a_proj_with_mqa.weight"] = b.param("kv_a_proj_with_mqa.weight",
                                                     (spec.kv_lora_rank + rope, h))  # fmt: skip
            p["kv_a_layernorm.weight"] = b.param("kv_a_layernorm.weight", (spec.kv_lora_rank,))
            p["kv_b_proj.weight"] = b.param("kv_b_proj.weight",
                                            (n * (nope + v), spec.kv_lora_rank))  # fmt: skip
            p["o_proj.weight"] = b.param("o_proj.weight", (h, n * v))
            return emit_mla(e, xn, spec.mla(), p, cos, sin)

    def mlp(xn):
        with b.scope("mlp"):
            if i < spec.first_k_dense_replace:
                f = spec.intermediate_size
                return emit_gated_mlp(e, xn, b.param("gate_proj.weight", (f, h)),
                                      b.param("up_proj.weight", (f, h)),
                                      b.param("down_proj.weight", (h, f)))  # fmt: skip
            ne, f = spec.n_routed_experts, spec.moe_intermediate_size
            fs = f * spec.n_shared_experts
            router_w = b.param("gate.weight", (ne, h))
            bias = b.input("gate.e_score_correction_bias", (ne,), DType.FP32)
            gate_up = b.param("experts.gate_up_proj", (ne, 2 * f, h))
            down = b.param("experts.down_proj", (ne, h, f))
            shared = None
            if spec.n_shared_experts:
                with b.scope("shared_experts"):
                    shared = (b.param("gate_proj.weight", (fs, h)),
                              b.param("up_proj.weight", (fs, h)),
                              b.param("down_proj.weight", (h, fs)))  # fmt: skip
            return emit_moe(e, xn, spec.moe(), router_w=router_w, gate_up=gate_up, down=down,
                            bias=bias, shared=shared)  # fmt: skip

    x = residual(b, x, attn, rms("input_layernorm"), pre=True, name="attn_residual")
    return residual(b, x, mlp, rms("post_attention_layernorm"), pre=True, name="mlp_residual")
