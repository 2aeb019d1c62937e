"""Sliding-window masks and index picks trace to first-class ops.

Gemma 2 and Gemma 3 build their local layers' mask from positions (``masking_utils``: a
``diff`` and ``cumsum`` of the position ids, four fancy-index picks): every input is a
constant of the traced program, so the importer computes the mask at trace time and the
added sliding-window mask becomes one ``window_mask`` op. Falcon picks its key and value
heads with ``qkv[..., [-2], :]``; on the meta device the list became an index tensor
without values, now the pick is traced as the equal slice (`list_picks_as_slices`).

Tolerances: the traced graph runs in float64 (`reference`), torch in float32 eager
attention; logits of about 5 in magnitude agree within 3.2e-6 measured, asserted at
rtol 1e-4, atol 1e-5 (as the other import tests). SEQ = 8 and the tiny configs'
sliding_window = 4, so the window masks keys of the last four queries
(`test_the_window_bites` shows the logits move by more than the tolerance without it).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.compiler.trace_stack import apply  # noqa: E402
from explorer.models import from_torch  # noqa: E402
from explorer.models.torch_import.constants import (  # noqa: E402
    list_picks_as_slices,
    sliding_window,
)
from explorer.sharding import assign, reference  # noqa: E402

from .hf_cases import BATCH, SEQ, causal_lm, feeds_of, tiny, traced  # noqa: E402
from .spmd_cases import case, example_inputs  # noqa: E402

WINDOWED = ("gemma2", "gemma3_text")
TYPES = (*WINDOWED, "falcon")
RTOL, ATOL = 1e-4, 1e-5


def _ids(vocab: int):
    return (torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) * 7 + 3) % vocab


def _logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(ids, use_cache=False).logits.numpy()


def _windows(graph) -> list[int | None]:
    """Per attention layer: the window of its mask op, None for a causal mask."""
    return [n.attr("window") if n.op == "window_mask" else None
            for n in graph.ops if n.op in ("window_mask", "causal_mask")]  # fmt: skip


@pytest.fixture(scope="module")
def real():
    """model type -> (model with random weights, ids, torch's logits, the graph traced from
    them with ``from_torch``): `spmd_cases.case`, shared with the SPMD tests. Its model is
    ``causal_lm(mt)`` (the same seeded weights; eager experts, which these models lack),
    its ids ``_ids``."""
    out = {}
    for mt in TYPES:
        c = case(mt)
        (ids,), _ = example_inputs(mt, c.model.config)
        out[mt] = (c.model, ids, c.want, c.graph)
    return out


@pytest.fixture(scope="module")
def on_meta():
    return {mt: traced(mt) for mt in TYPES}


@pytest.mark.parametrize("mt", TYPES)
def test_no_opaque_op_on_the_meta_device(mt, on_meta):
    g = on_meta[mt]
    assert g.report.exact and not g.report.opaque, str(g.report)
    assert not any("index" in note or "diff" in note for note in g.report.notes), g.report.notes


@pytest.mark.parametrize("mt", WINDOWED)
def test_local_layers_get_a_window_mask(mt, on_meta):
    cfg = transformers.AutoConfig.for_model(mt, **{k: v for k, v in tiny(mt).items()
                                                   if k != "model_type"})  # fmt: skip
    want = [cfg.sliding_window if t == "sliding_attention" else None for t in cfg.layer_types]
    assert _windows(on_meta[mt]) == want
    assert 4 in want  # gemma2: local then global; gemma3_text's two first layers: local


def test_falcon_head_picks_are_slices_on_the_meta_device(on_meta):
    """qkv is [batch, seq, kv groups, heads per group + 2, head dim]: per layer the
    queries are [0:2], the group's key head [2:3] and its value head [3:4]."""
    g = on_meta["falcon"]
    picks = [n for n in g.ops if n.op == "slice" and len(g.node(n.inputs[0]).type.shape) == 5]
    assert sorted((n.attr("axis"), n.attr("start"), n.attr("stop")) for n in picks) == [
        (3, 0, 2), (3, 0, 2), (3, 2, 3), (3, 2, 3), (3, 3, 4), (3, 3, 4)]  # fmt: skip


@pytest.mark.parametrize("mt", TYPES)
def test_traced_from_real_weights_equals_torch(mt, real):
    m, ids, want, g = real[mt]
    assert g.report.exact and not g.report.opaque, str(g.report)
    got = reference(g, feeds_of(g, m, ids))[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mt", TYPES)
def test_meta_traced_graph_runs_with_real_weights(mt, real, on_meta):
    """The graph traced without any values (meta device) computes torch's logits once fed
    the weights: the masks and picks recovered at trace time are the right ones."""
    m, ids, want, _ = real[mt]
    g = on_meta[mt]
    got = reference(g, feeds_of(g, m, ids))[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mt", WINDOWED)
def test_the_window_bites(mt, real):
    """With a window as long as the sequence the logits of the queries past the window
    differ (so the equality above checks the window); the first ``window`` queries see
    the same keys either way and agree."""
    m, ids, want, _ = real[mt]
    wide = causal_lm(mt, sliding_window=SEQ)
    other = _logits(wide, ids)
    w = m.config.sliding_window
    np.testing.assert_allclose(other[:, :w], want[:, :w], rtol=RTOL, atol=ATOL)
    assert np.abs(other[:, w:] - want[:, w:]).max() > 100 * ATOL


def test_mistral_sliding_window_is_a_window_mask():
    m = causal_lm("mistral", sliding_window=3)
    ids = _ids(m.config.vocab_size)
    g = from_torch(m, (ids,), kwargs={"use_cache": False})
    assert g.report.exact, str(g.report)
    assert _windows(g) == [3, 3]
    got = reference(g, feeds_of(g, m, ids))[g.outputs[0]]
    np.testing.assert_allclose(got, _logits(m, ids), rtol=RTOL, atol=ATOL)


def test_gemma2_sharded_on_8_devices_equals_unsharded(real, on_meta):
    """The searched plan (all replicated: this model is tiny), and a plan that splits every
    attention mask's queries on dp and keys on tp (each device masks its block of the
    global band), equal the unsharded run and torch."""
    m, ids, want, _ = real["gemma2"]
    g = on_meta["gemma2"]
    feeds = feeds_of(g, m, ids)
    mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("a100-80g"))
    masks = {n.name: "c=dp,d=tp" for n in g.ops if n.op in ("window_mask", "causal_mask")}
    assert len(masks) == 2
    searched = ex.search(g, mesh, method="dynamic_programming")
    for plan in (searched, assign(g, mesh, masks)):
        report = ex.sharding.verify(g, plan, mesh, inputs=feeds, rtol=1e-5, atol=1e-6)
        assert report.ok, report
        got = report.result.outputs[g.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# --- the pieces -----------------------------------------------------------------------------


def _band(s: int, w: int, low: float = torch.finfo(torch.float32).min) -> torch.Tensor:
    delta = torch.arange(s)[:, None] - torch.arange(s)[None, :]
    keep = (delta >= 0) & (delta < w)
    return torch.zeros(s, s).masked_fill(~keep, low)


@pytest.mark.parametrize("w", [1, 2, 5])
def test_sliding_window_reads_the_band(w):
    assert sliding_window(_band(6, w), (2, 3, 6, 6)) == w
    assert sliding_window(_band(6, w)[None, None].expand(2, 1, 6, 6), (2, 3, 6, 6)) == w
    assert sliding_window(_band(6, w, float("-inf")), (6, 6)) == w


def test_sliding_window_refuses_other_masks():
    assert sliding_window(_band(6, 6), (6, 6)) is None  # every key: plain causal
    assert sliding_window(torch.zeros(6, 6), (6, 6)) is None
    assert sliding_window(_band(6, 2, -1.0), (6, 6)) is None  # not a mask value
    assert sliding_window(_band(6, 2).T.contiguous(), (6, 6)) is None  # anti-causal
    assert sliding_window(_band(6, 2)[:, :5], (6, 5)) is None  # queries != keys
    per_batch = torch.stack([_band(6, 2), _band(6, 3)])[:, None]
    assert sliding_window(per_batch, (2, 1, 6, 6)) is None  # the band differs per row
    assert sliding_window(_band(6, 2).to(torch.int64), (6, 6)) is None


class _Pick(torch.nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index = index

    def forward(self, x):
        return x[self.index] * 2


@pytest.mark.parametrize(
    "index, want",
    [((Ellipsis, [-2], slice(None)), ("slice", 1, 2, 3, 1)),
     ((slice(None), [0, 2]), ("slice", 1, 0, 3, 2)),
     (([1, 2, 3],), ("slice", 0, 1, 4, 1)),
     ((0, slice(None), [3]), ("slice", 1, 3, 4, 1)),
     ((None, slice(None), [-1]), ("slice", 2, 3, 4, 1))],
)  # fmt: skip
def test_list_picks_trace_as_slices_on_meta(index, want):
    x = torch.zeros(4, 4, 4, device="meta")
    g = from_torch(_Pick(index), (x,))
    assert g.report.exact, str(g.report)
    slices = {("slice", n.attr("axis"), n.attr("start"), n.attr("stop"), n.attr("step", 1))
              for n in g.ops if n.op == "slice"}  # fmt: skip
    assert want in slices, slices
    real = torch.arange(64.0).reshape(4, 4, 4)
    got = g.run({g.inputs[0].name: real.numpy()})[g.outputs[0]]
    np.testing.assert_array_equal(got, _Pick(index)(real).numpy())


@pytest.mark.parametrize("index", [(slice(None), [2, 0]), ([0, 1], [1, 2]), ([0, 0],),
                                   (slice(None), [True, False, True, False])])  # fmt: skip
def test_other_list_picks_are_traced_as_written(index):
    x = torch.arange(16.0).reshape(4, 4)
    with list_picks_as_slices():
        got = _Pick(index)(x)
    torch.testing.assert_close(got, x[index] * 2)
    if any(isinstance(i, list) and isinstance(i[0], bool) for i in index):
        return  # a bool mask: its output size depends on the values (no meta trace)
    g = from_torch(_Pick(index), (torch.zeros(4, 4, device="meta"),))
    assert not any(n.op == "slice" for n in g.ops)
    assert {o.target for o in g.report.opaque} == {"aten.index.Tensor"}


def test_window_mask_gradient_equals_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 6)).astype(np.float32)
    c = rng.standard_normal((2, 6, 6)).astype(np.float32)

    def loss(t):
        y = apply("window_mask", (t,), {"window": 3, "offset": 1})
        return (ex.F.softmax(y) * ex.tensor(c)).sum()

    got = ex.grad(loss)(ex.tensor(x)).numpy()
    tx = torch.tensor(x, requires_grad=True)
    delta = torch.arange(6)[:, None] + 1 - torch.arange(6)[None, :]
    keep = (delta >= 0) & (delta < 3)
    (torch.softmax(tx.masked_fill(~keep, float("-inf")), -1) * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window, offset", [(1, 0), (3, 0), (3, 2), (5, -1), (9, 0)])
def test_window_mask_is_transformers_sliding_window(window, offset):
    """The op against transformers' own mask function (queries shifted by ``offset``, as
    a cache would); a window covering every key is ``causal_mask``."""
    from transformers.masking_utils import sliding_window_causal_mask_function

    b = ex.ir.GraphBuilder("m")
    x = b.input("x", (2, 6, 7))
    y = b.op("window_mask", x, window=window, offset=offset)
    c = b.op("causal_mask", x, offset=offset)
    g = b.build([y, c])
    vals = np.random.default_rng(1).standard_normal((2, 6, 7)).astype(np.float32)
    out = g.run({"x": vals})
    q, k = torch.arange(6)[:, None] + offset, torch.arange(7)[None, :]
    keep = sliding_window_causal_mask_function(window)(0, 0, q, k).numpy()
    np.testing.assert_array_equal(out[y], np.where(keep, vals, -np.inf))
    if window >= 7 + abs(offset):
        np.testing.assert_array_equal(out[y], out[c])
