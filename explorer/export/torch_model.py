"""A PyTorch module that computes what `explorer.models.build` describes, with module paths
equal to the graph's node names (``layers.0.attn.q`` is an ``nn.Linear``), so a plan's
per-node decisions name the modules DTensor parallelizes.

Covers the dense transformers of the zoo (decoder or encoder, pre- or post-norm, LayerNorm
or RMSNorm, GELU/ReLU/SwiGLU, learned or no positions, tied or untied head, no dropout);
MoE, token types and PanGu's query layer are not built. Heads are found from the local
width (``view(b, s, -1, d)``), so the same code runs whole or column-parallel.

Needs the ``torch`` extra; the module is defined inside `build_module` so that importing
this file does not import torch.
"""

from __future__ import annotations

import math

import numpy as np

from ..models import ModelConfig
from .errors import ExportError, require

__all__ = ["build_module", "load_values", "module_inputs"]


def _check(cfg: ModelConfig) -> None:
    unsupported = []
    if cfg.arch == "mlp" or cfg.is_moe:
        unsupported.append(f"arch={cfg.arch!r} / experts={cfg.num_experts}")
    if cfg.is_mla or cfg.qk_norm or cfg.qkv_bias or cfg.mtp_layers:
        unsupported.append("MLA attention, q/k norms, q/k/v-only biases or MTP modules")
    if cfg.type_vocab_size or cfg.query_layer or cfg.dropout:
        unsupported.append("token types, the query layer or dropout")
    if cfg.position not in ("learned", "none", "rope", "alibi"):
        unsupported.append(f"position={cfg.position!r}")
    if cfg.arch == "encoder":
        unsupported.append("the encoder's masked-LM head")
    if unsupported:
        raise ExportError(
            f"the PyTorch export builds dense decoders; model {cfg.name!r} has "
            f"{', '.join(unsupported)}; export a dense decoder config"
        )


def build_module(cfg: ModelConfig):
    """An ``nn.Module`` for ``cfg``: ``forward(tokens, labels, positions=None) ->
    (logits, loss)``; ``rope``/``alibi`` add nothing here, while the graph builders rotate
    q and k with a ``rope`` op (the DTensor check compares this module sharded against
    itself whole, so the rotation's absence does not change its verdict)."""
    _check(cfg)
    torch = require("torch", "torch")
    nn, F = torch.nn, torch.nn.functional
    h, d, f, V = cfg.hidden_size, cfg.dim_head, cfg.ffn, cfg.vocab_size

    def norm():
        if cfg.norm == "rmsnorm":
            return nn.RMSNorm(h, eps=1e-6, elementwise_affine=True)
        return nn.LayerNorm(h, eps=1e-5, bias=cfg.bias)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm()
            self.q = nn.Linear(h, cfg.num_heads * d, bias=cfg.bias)
            self.k = nn.Linear(h, cfg.kv_heads * d, bias=cfg.bias)
            self.v = nn.Linear(h, cfg.kv_heads * d, bias=cfg.bias)
            self.o = nn.Linear(cfg.num_heads * d, h, bias=cfg.bias)

        def forward(self, x):
            y = self.norm(x) if cfg.norm_position == "pre" else x
            q, k, v = self.q(y), self.k(y), self.v(y)
            b, s = q.shape[0], q.shape[1]
            kv = k.shape[-1] // d
            q = q.view(b, s, kv, -1, d)  # [b, s, kv heads, group, d]
            k, v = k.view(b, s, kv, d), v.view(b, s, kv, d)
            scores = torch.einsum("bskgd,btkd->bkgst", q, k) * (1.0 / math.sqrt(d))
            keep = torch.ones(s, s, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
            ctx = torch.einsum("bkgst,btkd->bskgd", scores.softmax(-1), v)
            out = self.o(ctx.reshape(b, s, -1))
            return out

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm()
            if cfg.activation == "swiglu":
                self.gate = nn.Linear(h, f, bias=cfg.bias)
                self.up = nn.Linear(h, f, bias=cfg.bias)
                self.down = nn.Linear(f, h, bias=cfg.bias)
            else:
                self.fc1 = nn.Linear(h, f, bias=cfg.bias)
                self.fc2 = nn.Linear(f, h, bias=cfg.bias)

        def forward(self, x):
            y = self.norm(x) if cfg.norm_position == "pre" else x
            if cfg.activation == "swiglu":
                return self.down(F.silu(self.gate(y)) * self.up(y))
            a = self.fc1(y)
            a = F.gelu(a, approximate="tanh") if cfg.activation == "gelu" else F.relu(a)
            return self.fc2(a)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention()
            self.mlp = Mlp()

        def forward(self, x):
            if cfg.norm_position == "pre":
                x = x + self.attn(x)
                return x + self.mlp(x)
            x = self.attn.norm(x + self.attn(x))
            return self.mlp.norm(x + self.mlp(x))

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.zeros(V, h))
            if cfg.position == "learned":
                self.wpe = nn.Parameter(torch.zeros(cfg.max_seq_len, h))
            if cfg.embed_norm:
                self.norm = norm()

        def forward(self, tokens, positions):
            x = self.wte[tokens]
            if cfg.position == "learned":
                x = x + self.wpe[positions]
            return self.norm(x) if cfg.embed_norm else x

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            if cfg.norm_position == "pre":
                self.final_norm = norm()
            if not cfg.tied_embeddings:
                self.lm_head_w = nn.Parameter(torch.zeros(h, V))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = Embed()
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.num_layers))
            self.head = Head()

        def forward(self, tokens, labels, positions=None):
            x = self.embed(tokens, positions)
            for layer in self.layers:
                x = layer(x)
            if cfg.norm_position == "pre":
                x = self.head.final_norm(x)
            w = self.embed.wte.t() if cfg.tied_embeddings else self.head.lm_head_w
            logits = x @ w
            loss = F.cross_entropy(logits.reshape(-1, V).float(), labels.reshape(-1).long())
            return logits, loss

    return Transformer()


def _target(name: str) -> tuple[str, str]:
    """Graph parameter name -> (module path, tensor name, transposed?) as ``path.attr``."""
    path, leaf = name.rsplit(".", 1)
    for suffix, attr in (("_w", "weight"), ("_b", "bias"), ("_g", "weight")):
        if leaf.endswith(suffix) and leaf not in ("lm_head_w",):
            return f"{path}.{leaf[: -len(suffix)]}", attr
    return path, leaf


def load_values(module, values: dict[str, np.ndarray]) -> None:
    """Copy the graph's parameter values into ``module`` (linear weights transposed)."""
    torch = require("torch", "torch")
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, v in values.items():
            if name in ("tokens", "labels", "positions"):
                continue
            path, attr = _target(name)
            key = f"{path}.{attr}"
            if key not in params:
                raise ExportError(f"graph parameter %{name} has no module tensor {key!r}")
            t = torch.as_tensor(np.asarray(v, dtype=np.float32))
            if attr == "weight" and t.ndim == 2:
                t = t.t()
            params[key].copy_(t)


def module_inputs(values: dict[str, np.ndarray]) -> dict:
    """The module's keyword inputs from the graph's input values."""
    torch = require("torch", "torch")
    out = {k: torch.as_tensor(np.asarray(values[k], dtype=np.int64))
           for k in ("tokens", "labels", "positions") if k in values}  # fmt: skip
    return out
