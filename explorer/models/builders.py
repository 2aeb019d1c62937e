"""Model builders: a ``ModelConfig`` and a batch shape in, the forward ``Graph`` out."""

from __future__ import annotations

from ..checks import is_int
from ..ir import DType, Graph, GraphBuilder
from . import config_layers
from .config import ModelConfig, ModelConfigError
from .layers import linear, norm

__all__ = ["build"]


def build(cfg: ModelConfig, batch: int = 1, seq: int | None = None) -> Graph:
    """The forward graph (through the loss) of ``cfg`` for ``batch`` sequences of ``seq``.

    One scope per layer (``layers.3``, with ``attn``/``mlp``/``moe`` inside), plus
    ``embed`` and ``head``.

    >>> from explorer.models import load
    >>> g = build(load("gpt2"), batch=1, seq=128)
    >>> g.num_params()
    124439808
    """
    if not isinstance(cfg, ModelConfig):
        raise ModelConfigError(
            f"build expects a ModelConfig (from explorer.models.load), got {type(cfg).__name__}"
        )
    if not is_int(batch, minimum=1):
        raise ModelConfigError(f"batch={batch!r}; expected an int > 0")
    if seq is not None and not is_int(seq, minimum=1):
        raise ModelConfigError(f"seq={seq!r}; expected an int > 0 (or None for the default)")
    if cfg.arch == "mlp":
        return _build_mlp(cfg, batch, seq)
    seq = cfg.max_seq_len if seq is None else seq
    if cfg.position == "learned" and seq > cfg.max_seq_len:
        raise ModelConfigError(
            f"seq={seq} exceeds max_seq_len={cfg.max_seq_len} of {cfg.name!r}, whose learned "
            "position table has that many rows; use a shorter sequence"
        )
    return _build_transformer(cfg, batch, seq)


def _build_transformer(cfg: ModelConfig, bs: int, s: int) -> Graph:
    b = GraphBuilder(cfg.name, dtype=DType.parse(cfg.dtype))
    h, V = cfg.hidden_size, cfg.vocab_size
    decoder = cfg.arch == "decoder"
    tokens = b.input("tokens", (bs, s), DType.INT32)
    labels = b.input("labels", (bs, s), DType.INT32)
    needs_pos = cfg.position == "learned" or cfg.query_layer
    positions = b.input("positions", (s,), DType.INT32) if needs_pos else None
    rope = cfg.position == "rope"
    with b.scope("embed"):
        wte = b.param("wte", (V, h))
        x = b.op("embedding", tokens, wte, name="tokens")
        if cfg.position == "learned":
            pos = b.op("embedding", positions, b.param("wpe", (cfg.max_seq_len, h)), name="pos")
            x = b.op("add", x, pos, name="add_pos")
        if cfg.type_vocab_size:
            types = b.input("token_types", (bs, s), DType.INT32)
            tt = b.op("embedding", types, b.param("wtt", (cfg.type_vocab_size, h)), name="types")
            x = b.op("add", x, tt, name="add_types")
        if cfg.embed_norm:
            x = norm(b, cfg, x)
    for i in range(cfg.num_layers):
        with b.scope(f"layers.{i}"):
            query = None
            if cfg.query_layer and i == cfg.num_layers - 1:
                wqe = b.param("top_query", (cfg.max_seq_len, h))
                query = b.op("embedding", positions, wqe, name="top_query_lookup")
            x = config_layers.block(b, cfg, x, causal=decoder, query=query, seed=2 * i,
                                    layer=i, rope=rope)  # fmt: skip
    hidden = x  # what multi-token prediction starts from
    with b.scope("head"):
        if cfg.norm_position == "pre":
            x = norm(b, cfg, x, "final_norm")
        if cfg.arch == "encoder":  # BERT's masked-LM transform before the tied decoder
            x = b.op("gelu", linear(b, x, h, h, "transform", cfg.bias), name="gelu")
            x = norm(b, cfg, x, "transform_norm")
        if cfg.tied_embeddings:
            logits = b.op("einsum", x, wte, name="logits", eq="bsh,vh->bsv")
        else:
            logits = b.op("matmul", x, b.param("lm_head_w", (h, V)), name="logits")
        if cfg.arch == "encoder" and cfg.bias:
            logits = b.op("add", logits, b.param("logits_b", (V,)), name="logits_bias")
        losses = b.op("cross_entropy", logits, labels, name="token_loss")
        loss = b.op("mean", losses, name="loss")
        loss = config_layers.mtp(b, cfg, hidden, loss)  # DeepSeek-V3's MTP modules, if any
    return b.build([loss])


def _build_mlp(cfg: ModelConfig, bs: int, seq: int | None) -> Graph:
    """``num_layers`` blocks of ``act(x @ w1 + b1) @ w2 + b2`` on ``[batch, (seq,) hidden]``."""
    b = GraphBuilder(cfg.name, dtype=DType.parse(cfg.dtype))
    h, f = cfg.hidden_size, cfg.ffn
    shape = (bs, h) if seq is None else (bs, seq, h)
    x = b.input("x", shape)
    act = "relu" if cfg.activation == "swiglu" else cfg.activation
    for i in range(cfg.num_layers):
        with b.scope(f"layers.{i}"):
            y = b.op(act, linear(b, x, h, f, "fc1", cfg.bias), name=act)
            x = linear(b, y, f, h, "fc2", cfg.bias)
    return b.build([x])
