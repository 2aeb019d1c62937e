"""Megatron-LM's hand-written plans as assignments: tensor parallel and sequence parallel.

Tensor parallel (Shoeybi et al. 2019): q/k/v and fc1 are column-parallel (their output
features split over ``tp``), the heads follow, o and fc2 are row-parallel (their input
features split, leaving a partial sum that one all-reduce completes). Sequence parallel
(Korthikanti et al. 2022) also splits the norms, the biases after the row-parallel matmuls
and the residual stream on the sequence: each all-reduce becomes a reduce-scatter and an
all-gather of the same total bytes. ``dp`` splits the batch of every op that has one.

The embedding stays replicated over ``tp``; the output head is vocabulary-parallel (the
logits split on the vocabulary, Megatron's parallel cross-entropy).

Context parallel (Llama 3's CP, an axis ``cp`` in the mesh): every activation's (query)
sequence dim is split over ``cp`` as well; the attention scores read the keys, and the
context the values, whole on their sequence, so K and V are all-gathered over ``cp``
(Llama 3's all-gather exchange) and the loss's mean is completed by a reduction over ``cp``.

>>> import explorer as ex
>>> cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=64, num_layers=1,
...                             num_heads=4, vocab_size=128, max_seq_len=16, dtype="fp32")
>>> g = ex.models.build(cfg, batch=2, seq=8)
>>> mesh = ex.Mesh({"dp": 2, "tp": 4})
>>> a = megatron_assignment(g, mesh)
>>> a["layers.0.attn.q"].name, a["layers.0.attn.o"].name, a["layers.0.mlp.norm"].name
('a=dp,n=tp', 'a=dp,k=tp', 'a=dp')
>>> ex.sharding.verify(g, a, mesh).ok
True
"""

from __future__ import annotations

from ..hardware import Mesh
from ..ir import Graph
from ..ir.signature import parse
from ..sharding import Strategy, assign, node_strategies
from ..sharding.rules import rewrite_signature
from .errors import ExportError

__all__ = ["megatron_assignment", "COLUMN_PARALLEL", "ROW_PARALLEL"]

# local node names (the last component of the scoped name) and the role of their tp split
COLUMN_PARALLEL = frozenset({"q", "k", "v", "fc1", "gate", "up"})
ROW_PARALLEL = frozenset({"o", "fc2", "down"})
_LAST_DIM = frozenset({"q_bias", "k_bias", "v_bias", "fc1_bias", "gate_bias", "up_bias", "gelu",
                       "silu", "relu", "glu", "logits_bias"})  # fmt: skip
_HEADS_IN = frozenset({"q_heads", "k_heads", "v_heads", "merge_heads", "q_rope", "k_rope",
                       "k_groups", "v_groups", "k_repeat", "v_repeat", "k_all_heads",
                       "v_all_heads"})  # dim 2 of the input  # fmt: skip
# grouped-query heads repeated for the attention core: with context parallelism their
# sequence is already whole, so the all-gather over cp moves the key/value heads only
_REPEATED_KV = frozenset({"k_groups", "v_groups", "k_repeat", "v_repeat", "k_all_heads",
                          "v_all_heads"})  # fmt: skip
_HEADS_SECOND = frozenset({"scale", "mask", "probs", "probs_dropout", "context"})  # input dim 1
_VOCAB = frozenset({"logits", "token_loss"})
# attention-core outputs [..., query s, key t]: the query sequence is the second-last dim
_SCORES = frozenset({"scores"}) | _HEADS_SECOND - {"context"}


def _letters(graph: Graph, node: str) -> tuple[tuple[str, ...], str]:
    n = graph.node(node)
    in_types = graph.input_types(node)
    sig, _ = rewrite_signature(n.op, graph.signature(node), tuple(t.shape for t in in_types),
                               n.type.shape)  # fmt: skip
    return parse(sig)


def _tp_letter(local: str, ins: tuple[str, ...], out: str, scope: str) -> str | None:
    if local in COLUMN_PARALLEL or local in _LAST_DIM or local == "logits":
        return out[-1]
    if local in ROW_PARALLEL or local == "token_loss":
        return ins[0][-1]
    if local in _HEADS_IN:
        return ins[0][2]
    if local == "scores":
        return out[1]
    if local in _HEADS_SECOND:
        return ins[0][1]
    return None


def _seq_letter(local: str, ins: tuple[str, ...], out: str) -> str | None:
    """The letter of an op's (query) sequence dim: ``[b, s, ...]`` tensors, the second-last
    dim of attention scores, the input's for the scalar loss; None for weights."""
    if local in _SCORES:
        return out[-2]
    if len(out) >= 2:
        return out[1]
    if not out and ins and len(ins[0]) >= 2:
        return ins[0][1]
    return None


def megatron_assignment(
    graph: Graph, mesh: Mesh, *, tp: str = "tp", dp: str | None = "dp",
    sequence_parallel: bool = False, cp: str | None = "cp",
) -> dict[str, Strategy]:  # fmt: skip
    """The Megatron-LM plan of a graph from `explorer.models.build` (or a layer built with
    `explorer.models.layers`) as ``{node: Strategy}``.

    Args:
        graph: the forward graph; nodes are matched by their local names (``q``, ``o``,
            ``fc1``, ``scores``, ...), as the builders name them.
        mesh: a mesh with axis ``tp`` (and ``dp`` unless ``dp`` is None or absent).
        sequence_parallel: also split norms, residuals and the biases after row-parallel
            matmuls on the sequence over ``tp``.
        cp: the context-parallel axis, used when the mesh has it with size > 1: every
            activation's sequence is split over it (outside ``tp``'s sequence split).

    Raises `ExportError` when a node cannot take its Megatron split (a head count not
    divisible by ``tp``, say), naming the node and the strategies it has.
    """
    if tp not in mesh.axis_names:
        raise ExportError(f"mesh {mesh} has no axis {tp!r} for tensor parallelism; pass tp=...")
    use_dp = dp is not None and dp in mesh.axis_names and mesh.axis_size(dp) > 1
    use_cp = cp is not None and cp in mesh.axis_names and mesh.axis_size(cp) > 1
    names: dict[str, str] = {}
    for n in graph.ops:
        local = n.name.rsplit(".", 1)[-1]
        scope = n.name.rsplit(".", 1)[0] if "." in n.name else ""
        ins, out = _letters(graph, n.name)
        want: dict[str, tuple[str, ...]] = {}
        has_batch = bool(ins and ins[0]) and len(ins[0]) >= 2 and local != "pos"
        if use_dp and has_batch:
            want[ins[0][0]] = (dp,)
        letter = _tp_letter(local, ins, out, scope)
        if letter is None and sequence_parallel and not scope.startswith("embed"):
            if len(ins[0]) == 3 and len(out) == 3 and local not in _VOCAB:
                letter = ins[0][1]  # [b, s, h]: the sequence
        if letter is not None:
            want[letter] = want.get(letter, ()) + (tp,)
        seq = (_seq_letter(local, ins, out)
               if use_cp and has_batch and local not in _REPEATED_KV else None)  # fmt: skip
        if seq is not None:
            want[seq] = (cp,) + want.get(seq, ())
        names[n.name] = _strategy_name(graph, mesh, n.name, want)
    if sequence_parallel:
        for n in graph.inputs:  # a layer's own [b, s, h] input arrives split on s
            if n.type.rank == 3 and n.type.dtype.is_float:
                want = {"a": (dp,)} if use_dp else {}
                want["b"] = ((cp,) if use_cp else ()) + (tp,)
                names[n.name] = _strategy_name(graph, mesh, n.name, want)
    return assign(graph, mesh, names)


def _strategy_name(graph: Graph, mesh: Mesh, node: str, want: dict[str, tuple[str, ...]]) -> str:
    options = node_strategies(graph, node, mesh)
    for s in options:
        if dict(s.dim_axes) == want:
            return s.name
    wanted = ",".join(f"{c}={'+'.join(a)}" for c, a in want.items()) or "replicated"
    raise ExportError(
        f"node %{node} ({graph.node(node).op}) cannot take the Megatron split {wanted}; its "
        f"strategies on {mesh} are: {', '.join(s.name for s in options)}. Check that heads, "
        "hidden and vocabulary sizes are divisible by the tp size"
    )
