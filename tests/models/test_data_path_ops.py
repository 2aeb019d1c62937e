"""Ops on the data path of traced models are first-class, so the graph
runs, and runs sharded. RoBERTa's position ids (``cumsum`` of the non-pad mask) and its
token-type lookup (``gather``) map to IR ops; a tiny RoBERTa traced from real weights
equals transformers' logits, unsharded and on 8 virtual devices. What stays opaque, and
why, is in `test_still_opaque_and_why`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.models import from_hf, from_torch  # noqa: E402
from explorer.sharding import reference  # noqa: E402

from .hf_cases import BATCH, SEQ, causal_lm, feeds_of, tiny, traced  # noqa: E402
from .spmd_cases import case  # noqa: E402


@pytest.fixture(scope="module")
def roberta():
    m = causal_lm("roberta")
    pad = m.config.pad_token_id
    ids = (torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) * 7 + 3) % m.config.vocab_size
    ids[0, -3:] = pad  # padded positions: their position id is the pad id, not a count
    g = from_torch(m, (ids,), kwargs={"use_cache": False})
    with torch.no_grad():
        want = m(ids, use_cache=False).logits.numpy()
    return g, feeds_of(g, m, ids), want


def test_roberta_position_ids_are_first_class(roberta):
    g, _, _ = roberta
    assert g.report.exact, str(g.report)
    ops = {n.op for n in g.ops}
    assert {"cumsum", "gather"} <= ops and "opaque" not in ops


def test_roberta_runs_like_transformers(roberta):
    g, feeds, want = roberta
    got = reference(g, feeds)[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_roberta_sharded_on_8_devices_equals_unsharded(roberta):
    g, feeds, want = roberta
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("a100-80g"))
    plan = ex.search(g, mesh, method="dynamic_programming")
    split = [n for n, s in plan.assignment.items() if s.dim_axes]
    assert split, "the plan splits something"
    report = ex.sharding.verify(g, plan, mesh, inputs=feeds, rtol=1e-5, atol=1e-6)
    assert report.ok, report
    np.testing.assert_allclose(report.result.outputs[g.outputs[0]], want, rtol=1e-4, atol=1e-5)


def test_cumsum_never_splits_its_axis():
    b = ex.ir.GraphBuilder("scan")
    x = b.input("x", (4, 8), ex.ir.DType.INT32)
    y = b.op("cumsum", x, axis=1)
    g = b.build([y])
    mesh = ex.Mesh({"a": 4})
    split = {c for s in ex.sharding.strategies(g, mesh)[y] for c, _ in s.dim_axes}
    assert split == {"a"}  # the row dim only: the scanned axis stays whole
    got = g.run({"x": np.arange(32, dtype=np.int32).reshape(4, 8)})[y]
    np.testing.assert_array_equal(got, np.cumsum(np.arange(32).reshape(4, 8), axis=1))


def test_still_opaque_and_why():
    """No longer opaque on the meta device: Falcon's ``qkv[..., [k], :]`` head picks are
    traced as slices (the list's values are gone once torch makes it a meta tensor), the
    Gemma 2 / Gemma 3 sliding-window mask is one ``window_mask`` op (both in
    tests/models/test_mask_index_ops.py), PhiMoE's sparsemixer routing is
    ``moe_router(router="sparsemixer")`` (tests/models/test_phimoe.py)."""
    for mt in ("falcon", "gemma2", "gemma3_text", "phimoe"):
        g = traced(mt, dtype=None)
        assert g.report.exact and not g.report.opaque, f"{mt}: {g.report}"


def test_falcon_head_picks_are_slices_with_real_weights():
    """`spmd_cases.case`: the tiny Falcon with seeded weights (``causal_lm``'s), traced
    with ``from_torch`` from real token ids, shared with the SPMD tests."""
    c = case("falcon")
    g = c.graph
    assert g.report.exact, str(g.report)
    got = reference(g, c.feeds)[g.outputs[0]]
    np.testing.assert_allclose(got, c.want, rtol=1e-4, atol=1e-5)


def test_masks_past_the_size_limit_stay_traced(monkeypatch):
    """A shape-only tensor over MAX_CONSTANT_BYTES (a causal mask of a long batch) is never
    computed at trace time: its ops stay in the graph, costed as traced."""
    from explorer.models.torch_import import constants

    small = traced("llama", dtype=None)
    monkeypatch.setattr(constants, "MAX_CONSTANT_BYTES", 16)
    kept = from_hf(tiny("llama"), batch=BATCH, seq=SEQ)  # patched: not `traced`
    assert sum(n.op == "causal_mask" for n in small.ops) == 2
    assert not any(n.op == "causal_mask" for n in kept.ops)
    assert any(n.op == "where" for n in kept.ops) and len(kept) > len(small)
