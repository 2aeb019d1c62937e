"""Hand rules for the odd ops, keyed by op name, beside the generic signature rule.

The generic rule (see `strategy`) splits any letter of an op's dim signature; a split
contracted letter leaves the output a partial sum. The ops below differ:

========================= ==============================================================
softmax, layernorm,       the normalised (last) dim may be split: statistics are combined
rmsnorm                   by all-reduces inside the op (max and sum; sum and sum of
                          squares; sum of squares)
cross_entropy             the vocabulary may be split (Megatron's parallel cross-entropy):
                          all-reduce of the max, then of the exp-sum and picked logit; the
                          output is complete, not partial
embedding                 a split vocabulary is a masked lookup: rows outside the device's
                          range give 0, so the output is partial (vocab-parallel embedding)
reshape                   a split on the outermost dim of a merged/split group of dims
                          maps to the outermost dim on the other side (head split/merge)
topk_gate                 the expert dim is never split (the top-k needs every logit)
moe_dispatch/moe_combine  the expert dim may be split (expert parallel; tokens must then be
                          whole, the all-to-all appears as a redistribution); the token and
                          capacity dims are never split (slots come from a cumulative sum
                          over all tokens)
moe_router                the expert dim is never split (top-k over every expert's score)
moe_dispatch_grouped,     GShard's grouped MoE (`explorer.ir.ops_moe`): groups, experts and
moe_combine_grouped       hidden may be split, tokens and capacity never (slots count over
                          the group); a split expert dim in the combine is a partial sum, so
                          expert parallelism is [E, G_dp, C, H] -> [E_dp, G, C, H]: all-to-all
moe_experts               experts (expert parallel) and f (tensor parallel inside each
                          expert, output partial) may be split; d and [gate, up] never
mla_attention             batch and heads may be split; queries and the latent stay whole
causal_mask, window_mask, any dim may be split; the executor uses global offsets (the mask
dropout                   of a shard is the slice of the global mask)
repeat_interleave         the repeated axis may be split: in and out share its letter
                          (output block j is the op on input block j)
mean                      a split reduced dim gives a partial sum of local means scaled by
                          local/global count
========================= ==============================================================
"""

from __future__ import annotations

import math

from ..hardware import CollectiveKind, Mesh
from ..ir import DType, reshape_groups
from ..ir.signature import parse
from .collective import Collective, make_collective

__all__ = ["rewrite_signature", "fixed_letters", "internal_collectives", "NO_PARTIAL"]

# Ops whose split contracted letter is resolved inside the op (the output is complete).
NO_PARTIAL = frozenset({"cross_entropy"})

# Ops that are linear in the contracted letters: splitting one leaves a partial sum. For any
# other op a contracted letter stays whole (a split max or norm is not a sum of pieces).
LINEAR_CONTRACTION = frozenset({
    "matmul", "bmm", "einsum", "sum", "mean", "embedding", "embedding_grad", "moe_combine",
    "moe_combine_grouped", "moe_experts",
})  # fmt: skip

# Ops whose attributes name global shapes or hold subgraphs, and the compiler's fused
# kernels (O2 only, never planned): only the replicated strategy.
REPLICATED_ONLY = frozenset({"broadcast_to", "getitem", "getitem_grad", "cond", "loop", "fused",
                             "masked_softmax", "fill", "opaque", "generated", "while_vjp",
                             "write_slice", "causal_attention", "decode_attention"})  # fmt: skip

# Backward ops whose last (normalised) letter needs statistics we do not split.
_LAST_FIXED = frozenset({"softmax_grad", "layernorm_grad", "rmsnorm_grad", "cross_entropy_grad"})

# Normalised ops: number of all-reduced statistics (each the size of the output without its
# last dim), one entry per collective the op issues.
STAT_COLLECTIVES: dict[str, tuple[int, ...]] = {
    "softmax": (1, 1),  # max, then exp-sum
    "layernorm": (2,),  # sum and sum of squares, stacked
    "rmsnorm": (1,),  # sum of squares
    "cross_entropy": (1, 2),  # max, then exp-sum and picked logit stacked
}


def rewrite_signature(op: str, sig: str, in_shapes: tuple[tuple[int, ...], ...],
                      out_shape: tuple[int, ...]) -> tuple[str, frozenset[str]]:  # fmt: skip
    """(signature used for strategies, letters that must stay whole) for a reshape; other
    ops keep their signature.

    >>> rewrite_signature("reshape", "abc->abde", ((2, 8, 64),), (2, 8, 4, 16))
    ('abc->abce', frozenset({'e'}))
    """
    if op == "repeat_interleave":
        return _interleaved(sig), frozenset()
    if op != "reshape":
        return sig, frozenset()
    (lhs,), rhs = parse(sig)
    rhs_l, fixed = list(rhs), set()
    for gi, gj in reshape_groups(in_shapes[0], out_shape):
        if len(gi) == 1 and len(gj) == 1:
            continue
        if not gi or not gj:  # size-1 dims added or dropped (keepdim): they stay whole
            fixed.update(lhs[k] for k in gi)
            fixed.update(rhs[k] for k in gj)
            continue
        rhs_l[gj[0]] = lhs[gi[0]]
        fixed.update(lhs[k] for k in gi[1:])
        fixed.update(rhs[k] for k in gj[1:])
    return f"{lhs}->{''.join(rhs_l)}", frozenset(fixed)


def _interleaved(sig: str) -> str:
    """``repeat_interleave``'s signature with its repeated axis under one letter: output
    block j of k even blocks is the op applied to input block j, so the axis may be split
    (`_combos` checks that k divides both sizes).

    >>> _interleaved("abc->abd")
    'abc->abc'
    """
    (lhs,), _ = parse(sig)
    return f"{lhs}->{lhs}"


def fixed_letters(op: str, sig: str, attrs: dict | None = None) -> frozenset[str]:
    """Letters of ``sig`` that ``op`` never splits (beyond output-only letters)."""
    ins, out = parse(sig)
    every = frozenset("".join(ins) + out)
    if op in REPLICATED_ONLY or (op in _LAST_FIXED and (attrs or {}).get("wrt", 0)):
        return every
    contracted = frozenset("".join(ins)) - frozenset(out)
    if op not in LINEAR_CONTRACTION and op not in NO_PARTIAL:
        every = contracted
    else:
        every = frozenset()
    if op in _LAST_FIXED:
        return every | frozenset(ins[0][-1])
    if op == "topk_gate":
        return every | frozenset(ins[0][-1])
    if op == "moe_dispatch":  # "th,te->ech"
        return every | frozenset(ins[0][0] + out[1])
    if op == "moe_combine":  # "ech,te->th"
        return every | frozenset(ins[1][0] + ins[0][1])
    if op == "moe_router":  # "...d,ed(,e)->...e" or "...e->...e"
        return every | frozenset(out[-1])
    if op == "moe_combine_grouped":  # "egch,gse->gsh"
        return every | frozenset(ins[0][2] + ins[1][1])
    if op == "moe_experts":  # "egcd,eafd,ehf->egch"
        return every | frozenset(ins[0][3] + ins[1][1])
    if op == "mla_attention":  # "bsnq,btc,r,nkr,btp,btp->bsnv"
        return every | frozenset(ins[0][1])
    return every


def internal_collectives(
    op: str, sig: str, letter_axes: dict[str, tuple[str, ...]], local_out: tuple[int, ...],
    dtype: DType, mesh: Mesh, tensor: str = "",
) -> tuple[Collective, ...]:  # fmt: skip
    """Collectives a normalised op issues when its normalised letter is split."""
    if op not in STAT_COLLECTIVES:
        return ()
    ins, out = parse(sig)
    letter = ins[0][-1]
    axes = letter_axes.get(letter, ())
    if not axes:
        return ()
    rows = math.prod(local_out[:-1]) if op != "cross_entropy" else math.prod(local_out)
    return tuple(
        make_collective(CollectiveKind.ALL_REDUCE, k * rows * dtype.itemsize, axes, mesh, tensor)
        for k in STAT_COLLECTIVES[op]
    )
