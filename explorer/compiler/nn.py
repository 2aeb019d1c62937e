"""``ex.nn``: cells (layers) with parameters initialised deterministically from a seed.

The cells use the same ops, in the same layout, as ``explorer.models`` builders, so a GPT
captured from these cells matches ``models.build`` in parameters and FLOPs.

>>> import explorer as ex, numpy as np
>>> lin = ex.nn.Linear(4, 3, seed=0)
>>> lin(ex.tensor(np.ones((2, 4)))).shape
(2, 3)
>>> sorted(lin.parameters())
['b', 'w']
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ..checks import is_int
from . import functional as F
from .errors import CompilerArgumentError, ShapeError, UndefinedForward, user_location
from .tensor import Parameter, Tensor
from .trace_stack import capturing

__all__ = [
    "Cell", "CellList", "Linear", "Embedding", "LayerNorm", "RMSNorm", "Attention", "MLP",
    "SwiGLU", "TransformerBlock", "GPT",
]  # fmt: skip

INIT_STD = 0.02  # GPT-2's weight init standard deviation
MAX_PARAMETER_SIZE = 2**31
"""Elements in one cell parameter (8 GiB of fp32); raise it here for a bigger eager model."""


def _dims(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """``shape`` if every size is a positive int and the parameter fits in memory."""
    for d in shape:
        if not is_int(d, minimum=1, numpy=True):
            raise ShapeError(
                f"a cell parameter of shape {shape}: size {d!r} must be a positive int",
                user_location(),
            )
    if math.prod(shape) > MAX_PARAMETER_SIZE:
        raise ShapeError(
            f"a cell parameter of shape {shape} has {math.prod(shape):,} elements, over "
            f"nn.MAX_PARAMETER_SIZE={MAX_PARAMETER_SIZE:,}; use smaller sizes or raise it",
            user_location(),
        )
    return tuple(int(d) for d in shape)


def _normal(seed: int, shape: tuple[int, ...], std: float = INIT_STD) -> Parameter:
    shape = _dims(shape)
    rng = np.random.default_rng(seed)
    return Parameter((rng.standard_normal(shape) * std).astype(np.float32))


class Cell:
    """Base of all layers: ``cell(x)`` calls ``forward``; ``parameters()`` lists weights by
    dotted name in definition order; inside ``@jit`` each cell is a scope of the graph."""

    scope_name = ""  # the dotted scope of this cell in its model, set by parameters()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise UndefinedForward(
            f"{type(self).__name__} has no forward(); define forward(self, ...) in the Cell"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run_in_scope(self.forward, *args, **kwargs)

    def run_in_scope(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with the nodes it captures named in this cell's scope (no
        scope when eager; ``@jit`` passes the cell's converted ``forward`` here)."""
        tracer = capturing()
        if tracer is None or not self.scope_name:
            return fn(*args, **kwargs)
        with tracer.scope(self.scope_name):
            return fn(*args, **kwargs)

    def children(self) -> list[tuple[str, Cell]]:
        return [(k, v) for k, v in vars(self).items() if isinstance(v, Cell)]

    def parameters(self, prefix: str = "", _scope: str = "") -> dict[str, Parameter]:
        """``{dotted name: Parameter}``; also names the parameters and child scopes."""
        out: dict[str, Parameter] = {}
        for k, v in vars(self).items():
            name = f"{prefix}{k}"
            if isinstance(v, Parameter):
                v.name = name
                out[name] = v
            elif isinstance(v, CellList):  # a list is iterated, not called: no scope of its own
                v.scope_name = ""
                out.update(v.parameters(name + ".", _scope=f"{_scope}{k}."))
            elif isinstance(v, Cell):
                v.scope_name = f"{_scope}{k}"
                out.update(v.parameters(name + "."))
        return out

    def num_params(self) -> int:
        return sum(p.size for p in self.parameters().values())

    def load(self, values: dict[str, np.ndarray]) -> None:
        """Assign parameter values by name (e.g. after an optimiser step)."""
        params = self.parameters()
        for k, v in values.items():
            params[k].assign(v)


class CellList(Cell):
    """An indexable list of cells (scopes ``0``, ``1``...)."""

    def __init__(self, cells: list[Cell]) -> None:
        for i, c in enumerate(cells):
            setattr(self, str(i), c)
        self._n = len(cells)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Cell:
        return getattr(self, str(i % self._n))

    def __iter__(self):
        return (self[i] for i in range(self._n))


class Linear(Cell):
    """``x @ w (+ b)`` with ``w: [d_in, d_out]``."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True, *, seed: int = 0) -> None:
        self.w = _normal(seed, (d_in, d_out))
        self.b = Parameter(np.zeros(d_out, np.float32)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = F.matmul(x, self.w)
        return y + self.b if self.b is not None else y


class Embedding(Cell):
    def __init__(self, num: int, dim: int, *, seed: int = 0) -> None:
        self.table = _normal(seed, (num, dim))

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.table)


class LayerNorm(Cell):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        _dims((dim,))
        self.g = Parameter(np.ones(dim, np.float32))
        self.b = Parameter(np.zeros(dim, np.float32))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.g, self.b, self.eps)


class RMSNorm(Cell):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        _dims((dim,))
        self.g = Parameter(np.ones(dim, np.float32))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.g, self.eps)


class Attention(Cell):
    """Self-attention with ``num_kv_heads`` key/value heads (grouped-query when fewer than
    ``num_heads``): separate q/k/v projections, einsum scores, scale, causal mask."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int | None = None,
                 head_dim: int | None = None, bias: bool = True, causal: bool = True, *,
                 seed: int = 0) -> None:  # fmt: skip
        kv = num_kv_heads or num_heads
        _dims((hidden, num_heads, kv))
        if num_heads % kv:
            raise ShapeError(
                f"num_kv_heads={kv} must divide num_heads={num_heads}", user_location()
            )
        d = head_dim or hidden // num_heads
        self.n, self.kv, self.d, self.causal = num_heads, kv, d, causal
        self.q = Linear(hidden, num_heads * d, bias, seed=seed)
        self.k = Linear(hidden, kv * d, bias, seed=seed + 1)
        self.v = Linear(hidden, kv * d, bias, seed=seed + 2)
        self.o = Linear(num_heads * d, hidden, bias, seed=seed + 3)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        n, kv, d = self.n, self.kv, self.d
        g = n // kv
        k = self.k(x).reshape(b, s, kv, d)
        v = self.v(x).reshape(b, s, kv, d)
        if g == 1:
            q = self.q(x).reshape(b, s, n, d)
            scores = F.einsum("bsnd,btnd->bnst", q, k)
            ctx_eq = "bnst,btnd->bsnd"
        else:
            q = self.q(x).reshape(b, s, kv, g, d)
            scores = F.einsum("bskgd,btkd->bkgst", q, k)
            ctx_eq = "bkgst,btkd->bskgd"
        scores = scores * (1.0 / math.sqrt(d))
        if self.causal:
            scores = F.causal_mask(scores)
        probs = F.softmax(scores)
        ctx = F.einsum(ctx_eq, probs, v).reshape(b, s, n * d)
        return self.o(ctx)


class MLP(Cell):
    """``fc2(act(fc1 x))``."""

    def __init__(self, hidden: int, ffn: int, activation: Literal["gelu", "relu"] = "gelu",
                 bias: bool = True, *, seed: int = 0) -> None:  # fmt: skip
        self.fc1 = Linear(hidden, ffn, bias, seed=seed)
        self.fc2 = Linear(ffn, hidden, bias, seed=seed + 1)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwiGLU(Cell):
    """``down(silu(gate x) * up x)``."""

    def __init__(self, hidden: int, ffn: int, bias: bool = False, *, seed: int = 0) -> None:
        self.gate = Linear(hidden, ffn, bias, seed=seed)
        self.up = Linear(hidden, ffn, bias, seed=seed + 1)
        self.down = Linear(ffn, hidden, bias, seed=seed + 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class TransformerBlock(Cell):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, hidden: int, num_heads: int, ffn: int | None = None,
                 num_kv_heads: int | None = None, norm: str = "layernorm",
                 activation: str = "gelu", bias: bool = True, causal: bool = True, *,
                 seed: int = 0) -> None:  # fmt: skip
        ffn = ffn or 4 * hidden
        Norm = LayerNorm if norm == "layernorm" else RMSNorm
        self.norm1 = Norm(hidden)
        self.attn = Attention(hidden, num_heads, num_kv_heads, bias=bias, causal=causal,
                              seed=seed)  # fmt: skip
        self.norm2 = Norm(hidden)
        if activation == "swiglu":
            self.mlp: Cell = SwiGLU(hidden, ffn, bias, seed=seed + 10)
        else:
            self.mlp = MLP(hidden, ffn, activation, bias, seed=seed + 10)  # type: ignore[arg-type]

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(Cell):
    """A decoder-only transformer laid out as ``models.build`` lays out a GPT: token and
    learned position embeddings, pre-norm blocks, final norm, head tied to the token table,
    cross-entropy and mean when ``labels`` are given (else the logits)."""

    def __init__(self, vocab_size: int, hidden: int, num_layers: int, num_heads: int,
                 max_seq_len: int = 1024, ffn: int | None = None,
                 num_kv_heads: int | None = None, norm: str = "layernorm",
                 activation: str = "gelu", bias: bool = True, *, seed: int = 0) -> None:  # fmt: skip
        self.wte = _normal(seed, (vocab_size, hidden))
        self.wpe = _normal(seed + 1, (max_seq_len, hidden))
        self.layers = CellList([
            TransformerBlock(hidden, num_heads, ffn, num_kv_heads, norm, activation, bias,
                             seed=seed + 100 * (i + 1))
            for i in range(num_layers)
        ])  # fmt: skip
        self.final_norm = LayerNorm(hidden) if norm == "layernorm" else RMSNorm(hidden)
        self.parameters()  # names every parameter and scope now

    @classmethod
    def from_config(cls, cfg, *, seed: int = 0) -> GPT:
        """The cells for a ``ModelConfig`` of a decoder with learned positions."""
        if cfg.arch != "decoder" or cfg.position != "learned" or not cfg.tied_embeddings:
            raise CompilerArgumentError(
                f"GPT.from_config needs a decoder with learned positions and a tied head; "
                f"{cfg.name!r} is {cfg.arch}/{cfg.position}/tied={cfg.tied_embeddings}"
            )
        return cls(cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                   cfg.max_seq_len, cfg.ffn, cfg.num_kv_heads, cfg.norm, cfg.activation,
                   cfg.bias, seed=seed)  # fmt: skip

    def forward(self, tokens: Tensor, positions: Tensor | None = None,
                labels: Tensor | None = None) -> Tensor:  # fmt: skip
        if positions is None:
            positions = F.constant(np.arange(tokens.shape[1], dtype=np.int32))
        x = F.embedding(tokens, self.wte) + F.embedding(positions, self.wpe)
        for block in self.layers:
            x = block(x)
        logits = F.einsum("bsh,vh->bsv", self.final_norm(x), self.wte)
        if labels is None:
            return logits
        return F.cross_entropy(logits, labels)
