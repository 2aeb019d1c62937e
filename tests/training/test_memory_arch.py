"""Activation bytes per layer from the architecture (`memory.layer_counts`, `layer_terms`):
Korthikanti et al.'s 34 for a GPT layer with dropout, and what PyTorch's autograd keeps
for small GPT- and LLaMA-style layers."""

import pytest

import explorer as ex
from explorer.models import ModelConfig
from explorer.training import ActivationTerms, TrainingParamsError, activation_bytes_per_layer
from explorer.training.memory import layer_counts, layer_terms

GPT = ex.models.load("gpt3-175b").replace(dropout=0.1)  # Megatron trains GPT with dropout 0.1
LLAMA = ex.models.load("llama3-405b")  # RMSNorm, no dropout, GQA, SwiGLU


def test_gpt_layer_with_dropout_keeps_korthikanti_34():
    assert layer_counts(GPT) == (10.0, 24.0, 5.0)
    s, b, h, a = 2048, 1, GPT.hidden_size, GPT.num_heads
    t = layer_terms(GPT)
    assert activation_bytes_per_layer(s, b, h, a, terms=t) == s * b * h * (34 + 5 * a * s / h)
    tp8 = activation_bytes_per_layer(s, b, h, a, tp=8, terms=t)
    assert tp8 == pytest.approx(s * b * h * (10 + 24 / 8 + 5 * a * s / (8 * h)), rel=1e-12)
    sp8 = activation_bytes_per_layer(s, b, h, a, tp=8, sp=True, terms=t)
    assert sp8 == pytest.approx(s * b * h * (34 / 8 + 5 * a * s / (8 * h)), rel=1e-12)


def test_without_dropout_no_masks_are_kept():
    rep, split, att = layer_counts(GPT.replace(dropout=0.0))
    assert (rep, split, att) == (10.0 - 2, 24.0, 5.0 - 3)  # two 1-byte masks; mask + output
    assert layer_terms(GPT.replace(dropout=0.0)).embedding_dropout_bytes == 0.0
    assert layer_terms(GPT).embedding_dropout_bytes == ActivationTerms().embedding_dropout_bytes


def test_llama_405b_counts_from_its_config():
    h, n, kv, f = LLAMA.hidden_size, LLAMA.num_heads, LLAMA.kv_heads, LLAMA.ffn
    assert (h, n, kv, f) == (16384, 128, 8, 53248)
    rep, split, att = layer_counts(LLAMA)
    assert rep == 2 * 2 + 2 + 2  # two norm inputs, QKV and MLP inputs; no dropout masks
    assert split == pytest.approx(2 + 4 * kv / n + 2 + 6 * f / h)  # Q, K+V, out, gate/up/prod
    assert att == 2
    # per token and layer, tensor + sequence parallel: 31.75 / t instead of 34 / t
    assert rep + split == pytest.approx(31.75)


def test_an_mlp_block_keeps_its_gemm_and_activation_inputs():
    cfg = ex.models.load("mlp-small")
    assert layer_counts(cfg) == (2.0, 4 * cfg.ffn / cfg.hidden_size, 0.0)


def test_per_architecture_off_keeps_the_gpt_constants():
    t = ActivationTerms(per_architecture=False)
    assert layer_terms(LLAMA, t) == t
    with pytest.raises(TrainingParamsError, match="per_architecture='yes'"):
        ActivationTerms(per_architecture="yes")


def test_user_constants_are_scaled_not_replaced():
    t = ActivationTerms(replicated_bytes=12.0, split_bytes=30.0, attention_bytes=6.0)
    got = layer_terms(LLAMA, t)
    rep, split, att = layer_counts(LLAMA)
    assert got.replicated_bytes == pytest.approx(12 * rep / 10)
    assert got.split_bytes == pytest.approx(30 * split / 24)
    assert got.attention_bytes == pytest.approx(6 * att / 5)
    assert layer_terms(LLAMA, t, split=False).split_bytes == 30.0


def _step(cfg, par, seq=256, **kw):
    from explorer.training import TrainingParams
    from explorer.training.step_model.model import StepModel

    hw = ex.hardware.load("h100-sxm")
    return StepModel(cfg, par, hw, 8 * par.dp * par.microbatch_size, seq, TrainingParams(**kw))


def test_step_model_keeps_the_architecture_s_activations():
    from explorer.training.step_model.terms import dense, recompute

    par = ex.ParallelConfig(dp=2, tp=4, sp=True)
    small = LLAMA.replace(num_layers=4, hidden_size=1024, num_heads=16, num_kv_heads=4,
                          head_dim=None, ffn_hidden_size=2816)  # fmt: skip
    s, seq, h, a = _step(small, par), 256, small.hidden_size, small.num_heads
    rep, split, att = layer_counts(small)
    sbh = seq * 1 * h
    assert recompute.layer_act(s, "none") == pytest.approx(
        sbh * ((rep + split) / 4 + att * a * seq / (4 * h)), rel=1e-12
    )
    assert recompute.layer_act(s, "selective") == pytest.approx(sbh * (rep + split) / 4)
    assert s.embed_act() == 0.0  # no dropout: no embedding mask
    gpt = _step(GPT.replace(num_layers=4, hidden_size=1024, num_heads=16, ffn_hidden_size=None),
                par)  # fmt: skip
    assert recompute.layer_act(gpt, "none") == pytest.approx(
        sbh * (34 / 4 + 5 * a * seq / (4 * h)), rel=1e-12
    )
    off = _step(small, par, activations=ActivationTerms(per_architecture=False))
    assert recompute.layer_act(off, "selective") == pytest.approx(sbh * 34 / 4)
    # a MoE layer: the split term is dense.activation_terms', the others scaled here
    m = ex.models.load("mixtral-8x7b")
    sm = _step(m.replace(num_layers=2), ex.ParallelConfig(dp=2, tp=2, sp=True))
    t = recompute.activation_terms(sm)
    assert t.split_bytes == dense.activation_terms(sm).split_bytes
    assert t.replicated_bytes == pytest.approx(layer_counts(m)[0])


# ----- what autograd keeps ----------------------------------------------------------------
def _kept_per_token(cfg: ModelConfig, seq: int) -> float:
    """Bytes PyTorch's autograd keeps per token for one pre-norm layer of ``cfg`` in bf16
    (weights not counted: the difference between batch 2 and batch 1). Norms are fused
    kernels (keep their input and per-token fp32 statistics, as Apex/Transformer Engine
    do); attention is SDPA (CPU flash kernel) without dropout, eager softmax with it."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    dt, h, n, kv, d, f = torch.bfloat16, cfg.hidden_size, cfg.num_heads, cfg.kv_heads, \
        cfg.dim_head, cfg.ffn  # fmt: skip
    p = cfg.dropout
    gen = torch.Generator().manual_seed(0)

    def drop(t):  # the kernel CUDA runs (a 1-byte mask); F.dropout on CPU keeps a bf16 one
        return torch.native_dropout(t, p, True)[0] if p > 0 else t

    def w(*shape):
        return (torch.randn(*shape, generator=gen) * 0.05).to(dt).requires_grad_()

    W = dict(n1=w(h), n2=w(h), q=w(n * d, h), k=w(kv * d, h), v=w(kv * d, h), o=w(h, n * d),
             up=w(f, h), gate=w(f, h), down=w(h, f))  # fmt: skip
    params = {t.untyped_storage().data_ptr() for t in W.values()}

    class Norm(torch.autograd.Function):  # a fused norm: keeps its input and the statistics
        @staticmethod
        def forward(ctx, x, g):
            xf = x.float()
            mean = xf.mean(-1, keepdim=True) if cfg.norm == "layernorm" else None
            c = xf - mean if mean is not None else xf
            rstd = torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-6)
            ctx.save_for_backward(x, g, rstd, *([mean] if mean is not None else []))
            return (c * rstd).to(x.dtype) * g

        @staticmethod
        def backward(ctx, grad):  # not run: the test counts what is kept
            raise NotImplementedError

    def layer(x):
        b = x.shape[0]
        y = Norm.apply(x, W["n1"])
        q = F.linear(y, W["q"]).view(b, seq, n, d).transpose(1, 2)
        k = F.linear(y, W["k"]).view(b, seq, kv, d).transpose(1, 2)
        v = F.linear(y, W["v"]).view(b, seq, kv, d).transpose(1, 2)
        if p > 0:  # Korthikanti's attention: softmax, its dropout, the product with V
            scores = (q * d**-0.5) @ k.transpose(-1, -2)
            probs = drop(torch.softmax(scores, -1))
            o = (probs @ v).transpose(1, 2).reshape(b, seq, n * d)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv < n)
            o = o.transpose(1, 2).reshape(b, seq, n * d)
        x = x + drop(F.linear(o, W["o"]))
        m = Norm.apply(x, W["n2"])
        if cfg.activation == "swiglu":
            inner = F.silu(F.linear(m, W["gate"])) * F.linear(m, W["up"])
        else:
            inner = F.gelu(F.linear(m, W["up"]))
        return x + drop(F.linear(inner, W["down"]))

    def kept(b: int) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            st = t.untyped_storage()
            if st.data_ptr() not in params:
                seen[st.data_ptr()] = st.nbytes()
            return t

        x = torch.randn(b, seq, h, generator=gen).to(dt).requires_grad_()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = layer(x)
        assert out.shape == x.shape
        return sum(seen.values())

    return (kept(2) - kept(1)) / seq


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_counts_equal_what_autograd_keeps(kind):
    """The counts times h, plus what they leave out by design: the norms' per-token fp32
    statistics (LayerNorm mean and rstd 8 bytes, RMSNorm 4, per norm), flash attention's
    fp32 log-sum-exp (4 per head), and eager PyTorch's second copy inside SwiGLU
    (``silu(gate)``, 2f; a fused SwiGLU keeps only its input)."""
    seq = 32
    if kind == "gpt":  # LayerNorm, MHA, 4h GELU, dropout 0.1
        cfg = ModelConfig("tiny-gpt", "decoder", 64, 1, 4, ffn_hidden_size=256, vocab_size=100,
                          dropout=0.1)  # fmt: skip
        rep, split, att = layer_counts(cfg)
        assert (rep, split, att) == (10.0, 24.0, 5.0)
        extra = 2 * 8
        attention_core = att * cfg.num_heads * seq  # per token: a heads x s keys
    else:  # RMSNorm, 2 of 4 heads for K/V, SwiGLU of 160, no dropout
        cfg = ModelConfig("tiny-llama", "decoder", 64, 1, 4, num_kv_heads=2,
                          ffn_hidden_size=160, vocab_size=100, norm="rmsnorm", activation="swiglu",
                          bias=False)  # fmt: skip
        rep, split, att = layer_counts(cfg)
        assert rep == 8.0 and split == pytest.approx(4 + 4 * 2 / 4 + 6 * 160 / 64)
        extra = 2 * 4 + 4 * cfg.num_heads + 2 * cfg.ffn
        attention_core = 0.0  # flash: no scores kept
    assert _kept_per_token(cfg, seq) == (rep + split) * cfg.hidden_size + attention_core + extra
