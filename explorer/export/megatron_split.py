"""Megatron-LM arguments that reproduce a pipeline's layer split, even or uneven.

Megatron-Core builds the layers of each pipeline stage by one of four rules; the functions
here mimic them so that every split `split_args` emits is checked: the layer counts Megatron
would derive from the arguments equal the plan's. Stage ``g`` of ``pp * v`` stages is model
chunk ``g // pp`` on pipeline rank ``g % pp`` (Megatron's interleaved placement, the same
as `explorer.training.pipeline.schedule`).

1. Default: ``num_layers / pp`` layers per rank, ``/ v`` per chunk; both must divide
   (``--num-layers-per-virtual-pipeline-stage`` or ``--num-virtual-stages-per-pipeline-rank``
   names v).
2. ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
   the embedding (loss) counts as one more layer in the split, and the first (last) chunk
   of the whole pipeline builds one layer fewer. Llama 3 405B's 126 layers on pp16 x v8 with
   both flags: 128 / 16 / 8 = 1 per chunk, 0 in the first and the last chunk.
3. ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``: the
   first (last) rank holds the given count, the other ranks share the rest evenly; every
   rank's count must divide by v (the v > 1 case needs
   ``--num-virtual-stages-per-pipeline-rank``); both counts > 0. Not combinable with
   rule 2.
4. ``--pipeline-model-parallel-layout``: each chunk lists its parts (``E`` embedding,
   ``t`` layer, ``m`` MTP layer, ``L`` loss; ``|`` ends a chunk; ``x*n`` and ``(..)*n``
   repeat); v = chunks / pp. Expresses any contiguous split; excludes the two v flags.

Sources (NVIDIA/Megatron-LM): ``megatron/core/transformer/transformer_block.py``
(``get_num_layers_to_build``: rules 1-3), ``megatron/core/transformer/transformer_config.py``
(``TransformerConfig.__post_init__``: the divisibility checks, first/last > 0, the layout
taking precedence), ``megatron/core/transformer/pipeline_parallel_layer_layout.py``
(``PipelineParallelLayerLayout``: rule 4's grammar, its 1D-to-(rank, chunk) placement and
checks) and ``megatron/training/arguments.py`` (``validate_args``: at most one of the layout
and the two v flags; uneven first/last stages need ``--num-virtual-stages-per-pipeline-rank``).
The rules are those of the current sources; an older Megatron-Core's TransformerConfig
checked rule 2 without v as ``num_layers % (pp - flags)``, so a 1F1B split from rule 2 may
be refused there (the layout flag is newer still: ``layout=False`` avoids it).

>>> megatron_stage_layers(126, 16, 8, account_for_embedding=True, account_for_loss=True)[:3]
(0, 1, 1)
>>> layout_string((2, 3, 3, 2))
'Et*2|(t*3|)*2t*2L'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..checks import is_int
from .errors import ExportError

__all__ = ["megatron_stage_layers", "layout_stage_layers", "layout_string", "split_args"]


def _ints(lowest: int = 1, optional: bool = False, **values: object) -> None:
    """Each given value an int >= ``lowest`` (numpy ints too; None only where ``optional``)."""
    for name, v in values.items():
        if (v is not None or not optional) and not is_int(v, minimum=lowest, numpy=True):
            raise ExportError(f"{name}={v!r}; expected an int >= {lowest}")


def _flags(**values: object) -> None:
    for name, v in values.items():
        if not isinstance(v, bool):
            raise ExportError(f"{name}={v!r}; expected True or False")


def _counts(counts: object) -> tuple[int, ...]:
    """Layers per stage as plain ints >= 0."""
    if isinstance(counts, str) or not isinstance(counts, Sequence) or not all(
        is_int(n, minimum=0, numpy=True) for n in counts
    ):  # fmt: skip
        raise ExportError(f"counts={counts!r}; expected layers per stage, ints >= 0")
    return tuple(int(n) for n in counts)


def megatron_stage_layers(num_layers: int, pp: int, v: int = 1, *, first: int | None = None,
                          last: int | None = None, account_for_embedding: bool = False,
                          account_for_loss: bool = False) -> tuple[int, ...]:  # fmt: skip
    """Layers per stage (``pp * v`` of them, stage ``g`` = chunk ``g // pp`` on rank
    ``g % pp``) that Megatron-Core's ``get_num_layers_to_build`` builds from these flags.
    Raises `ExportError` where Megatron's assertions would stop the run.

    >>> megatron_stage_layers(30, 4, first=9, last=9)
    (9, 6, 6, 9)
    """
    _ints(num_layers=num_layers, pp=pp, v=v)
    _ints(lowest=0, optional=True, first=first, last=last)
    num_layers, pp, v = int(num_layers), int(pp), int(v)
    first, last = (None if n is None else int(n) for n in (first, last))
    _flags(account_for_embedding=account_for_embedding, account_for_loss=account_for_loss)
    uneven = first is not None or last is not None
    if uneven and (account_for_embedding or account_for_loss):
        raise ExportError("Megatron does not combine --decoder-first/last-pipeline-num-layers "
                          "with --account-for-embedding/loss-in-pipeline-split")  # fmt: skip
    if uneven:
        if any(n is not None and n <= 0 for n in (first, last)):
            raise ExportError(f"first={first}, last={last}: Megatron's TransformerConfig "
                              "needs uneven first/last stage counts larger than 0")  # fmt: skip
        rest, left = num_layers, pp
        for n in (first, last):
            if n is not None:
                rest, left = rest - n, left - 1
        if rest < 0 or (left > 0 and rest % left):
            raise ExportError(
                f"with first={first}, last={last} the other {left} ranks get {rest} of "
                f"{num_layers} layers, which does not divide evenly"
            )
        per_rank = [rest // left if left > 0 else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
    else:
        total = num_layers + account_for_embedding + account_for_loss
        if total % pp:
            raise ExportError(f"{total} layers (embedding and loss counted as asked) do not "
                              f"divide into pp {pp} ranks")  # fmt: skip
        per_rank = [total // pp] * pp
    if v > 1 and pp > 1:
        bad = [n for n in per_rank if n % v]
        if bad:
            raise ExportError(f"{bad[0]} layers on a rank do not divide into v {v} chunks")
        per_chunk = [n // v for n in per_rank]
    else:
        per_chunk = per_rank
    out = [per_chunk[g % pp] for g in range(pp * v)]
    if account_for_embedding:
        out[0] -= 1
    if account_for_loss:
        out[-1] -= 1
    if min(out) < 0:
        raise ExportError("not enough layers in the first or last virtual pipeline stage")
    return tuple(out)


_KINDS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}


def _parse_layout(layout: str) -> list[str]:
    """Megatron's ``parse_str_to_list``: drop commas, unroll ``(..)*n`` then ``x*n``,
    split at ``|``; one string of part letters per chunk."""
    s = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), s)
    chunks = s.split("|")
    for c in chunks:
        bad = set(c) - set(_KINDS)
        if bad:
            raise ExportError(f"layout {layout!r} has unknown part {sorted(bad)[0]!r}; "
                              f"expected letters {''.join(_KINDS)}")  # fmt: skip
    return chunks


def layout_stage_layers(layout: str, pp: int, num_layers: int,
                        mtp_layers: int = 0) -> tuple[int, ...]:  # fmt: skip
    """Layers per stage that ``--pipeline-model-parallel-layout`` gives, checked as
    ``PipelineParallelLayerLayout`` checks it (chunks a multiple of pp, the embedding first
    and once, the loss last and once, ``num_layers`` decoder and ``mtp_layers`` MTP parts,
    MTP after every decoder layer and in a rank's last chunk).

    >>> layout_stage_layers("E|(t|)*4L", 2, 4)
    (0, 1, 1, 1, 1, 0)
    """
    if not isinstance(layout, str):
        raise ExportError(f"layout={layout!r}; expected a layout string such as 'E|(t|)*4L'")
    _ints(pp=pp)
    _ints(lowest=0, num_layers=num_layers, mtp_layers=mtp_layers)
    chunks = _parse_layout(layout)
    if len(chunks) % pp:
        raise ExportError(f"layout {layout!r} has {len(chunks)} chunks, not a multiple of pp {pp}")
    flat = "".join(chunks)
    if not flat.startswith("E") or not flat.endswith("L"):
        raise ExportError(f"layout {layout!r} must start with E and end with L")
    counts = {k: flat.count(k) for k in _KINDS}
    want = {"E": 1, "L": 1, "t": num_layers, "m": mtp_layers}
    if counts != want:
        raise ExportError(f"layout {layout!r} holds parts {counts}; the model needs {want}")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise ExportError(f"layout {layout!r} puts a decoder layer after an MTP layer")
    if any("m" in chunks[g] for g in range(len(chunks) - pp)):
        raise ExportError(f"layout {layout!r} puts MTP layers outside a rank's last chunk")
    if "m" in "".join(chunks[g] for g in range(0, len(chunks) - pp, pp)):
        raise ExportError(f"layout {layout!r} puts MTP layers on the first pipeline rank")
    return tuple(c.count("t") for c in chunks)


def layout_string(counts: Sequence[int], mtp_layers: int = 0) -> str:
    """The shortest-by-runs ``--pipeline-model-parallel-layout`` for layers per stage
    ``counts`` (the embedding with stage 0, MTP layers and the loss with the last stage).

    >>> layout_string((0,) + (1,) * 126 + (0,))
    'E|(t|)*126L'
    """
    counts = _counts(counts)
    _ints(lowest=0, mtp_layers=mtp_layers)
    if not counts:
        raise ExportError("counts=(); expected the layers of at least one stage, e.g. (4, 4)")
    S = len(counts)
    pieces = []
    for g, n in enumerate(counts):
        p = ("E" if g == 0 else "") + ("t" * n if n < 2 else f"t*{n}")
        if g == S - 1:
            p += ("m" * mtp_layers if mtp_layers < 2 else f"m*{mtp_layers}") + "L"
        else:
            p += "|"
        pieces.append(p)
    out, g = [], 0
    while g < S:
        k = 1
        while g + k < S and pieces[g + k] == pieces[g]:
            k += 1
        out.append(f"({pieces[g]})*{k}" if k > 1 else pieces[g])
        g += k
    return "".join(out)


def _flag_candidates(counts: Sequence[int], pp: int, v: int, L: int, interleaved: bool = False):
    """(arguments, mimic keywords) of rules 1-3, fewest flags first; rule 3 with the
    plan's own first / last rank counts."""
    vflag = ["--num-virtual-stages-per-pipeline-rank", str(v)] if v > 1 else []
    if (v > 1 or interleaved) and L % (pp * v) == 0:
        yield ["--num-layers-per-virtual-pipeline-stage", str(L // (pp * v))], {}
    elif v == 1:
        yield [], {}
    emb, loss = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    for e, lo in ((True, False), (False, True), (True, True)):
        yield vflag + [emb] * e + [loss] * lo, {"account_for_embedding": e, "account_for_loss": lo}
    first = sum(counts[0::pp])
    last = sum(counts[pp - 1 :: pp])
    f_arg = ["--decoder-first-pipeline-num-layers", str(first)]
    l_arg = ["--decoder-last-pipeline-num-layers", str(last)]
    yield vflag + f_arg, {"first": first}
    yield vflag + l_arg, {"last": last}
    yield vflag + f_arg + l_arg, {"first": first, "last": last}


def _try(L, pp, v, kw):
    try:
        return megatron_stage_layers(L, pp, v, **kw)
    except ExportError:
        return None


def _closest_flags(counts: Sequence[int], pp: int, v: int, L: int):
    """The rules 1-3 split nearest ``counts`` (fewest layers moved, then the smallest
    largest stage), with its arguments; None when no flag expresses any split."""
    vflag = ["--num-virtual-stages-per-pipeline-rank", str(v)] if v > 1 else []
    options = [(a, kw) for a, kw in _flag_candidates(counts, pp, v, L)]
    step = v if pp > 1 else 1
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    for f in range(step, L + 1, step):
        options.append((vflag + [first, str(f)], {"first": f}))
        options.append((vflag + [last, str(f)], {"last": f}))
        for la in range(step, L + 1 - f, step):
            options.append((vflag + [first, str(f), last, str(la)], {"first": f, "last": la}))
    best = None
    for args, kw in options:
        got = _try(L, pp, v, kw)
        if got is None or sum(got) != L:
            continue
        key = (sum(abs(a - b) for a, b in zip(got, counts, strict=True)) // 2, max(got))
        if best is None or key < best[0]:
            best = (key, args, got)
    return best


def split_args(counts: Sequence[int], pp: int, v: int, num_layers: int, *,
               mtp_layers: int = 0, layout: bool = True,
               interleaved: bool = False) -> tuple[str, ...]:  # fmt: skip
    """Megatron arguments giving stage ``g`` exactly ``counts[g]`` layers (``pp * v``
    stages): the fewest flags of rules 1-3 that do, else (``layout``) a
    ``--pipeline-model-parallel-layout``. With ``layout=False`` (a Megatron-LM older than
    the layout flag) a split the flags cannot express raises `ExportError` naming the
    closest split they can. ``interleaved`` writes an even split with
    ``--num-layers-per-virtual-pipeline-stage`` also when v is 1.

    >>> split_args((0,) + (1,) * 126 + (0,), 16, 8, 126)
    ('--num-virtual-stages-per-pipeline-rank', '8', '--account-for-embedding-in-pipeline-split', \
'--account-for-loss-in-pipeline-split')
    """
    counts = _counts(counts)
    _ints(pp=pp, v=v, num_layers=num_layers)
    _ints(lowest=0, mtp_layers=mtp_layers)
    _flags(layout=layout, interleaved=interleaved)
    if len(counts) != pp * v or sum(counts) != num_layers or min(counts, default=0) < 0:
        raise ExportError(
            f"split {counts} is not {num_layers} layers over pp {pp} x v {v} = {pp * v} "
            "stages; export the plan whose config made it"
        )
    if pp == 1:
        return ()
    for args, kw in _flag_candidates(counts, pp, v, num_layers, interleaved):
        if _try(num_layers, pp, v, kw) == counts:
            return tuple(args)
    if layout:
        text = layout_string(counts, mtp_layers)
        got = layout_stage_layers(text, pp, num_layers, mtp_layers)
        if got != counts:  # layout_string and the parser disagree: a bug here, not the plan's
            raise ExportError(f"layout {text!r} gives {got}, not the split {counts}")
        return ("--pipeline-model-parallel-layout", text)
    best = _closest_flags(counts, pp, v, num_layers)
    alt = (f"the closest they express is {best[2]} ({' '.join(best[1])}, {best[0][0]} layer(s) "
           "moved)" if best else "they express no split of these layers")  # fmt: skip
    raise ExportError(
        f"the split {counts} (layers per stage, pp {pp} x v {v}) needs "
        "--pipeline-model-parallel-layout: Megatron's even, account-for-embedding/loss and "
        f"first/last-stage flags cannot express it; {alt}; use layout=True with a "
        "Megatron-LM that has the layout flag, or plan that split"
    )
