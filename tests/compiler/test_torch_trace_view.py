"""TraceCompare on an imported transformers model (``TorchRuns``): the eager track is the IR
interpreter over the traced graph with module paths, the static track the compiled
program, each fused kernel linked to the eager ops it absorbed; a new sequence bucket or
batch size is a recompile with its reason on the compile track."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from explorer.trace import flows  # noqa: E402
from widgets.trace_compare import TorchRuns, TraceCompare  # noqa: E402


@pytest.fixture(scope="module")
def gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_tracks_of_an_imported_model_and_its_recompiles(gpt2):
    runs = TorchRuns(gpt2, vocab=64, buckets=(16, 32))
    view = TraceCompare(runs.eager, runs.make_args, static=runs, batch=1, size=12, runs=1)
    eager = view.runs.eager[0]
    assert len([e for e in eager.events if e.kind == "op"]) == len(
        runs.programs[1].programs[16].graph.ops
    )
    assert any(" in transformer.h.0.attn" in e.detail for e in eager.events)  # module paths
    fused = [f for f in flows(view.comparison) if f.fused]
    assert fused and all(f.kernel.replaced for f in fused)
    assert {f.eager.name for f in fused} <= {n for f in fused for n in f.kernel.replaced}
    assert [e.kind for e in view.compile_events] == ["compile"]
    view.controls["size"].value = 24  # bucket 32: compiled now
    view.flush()
    assert view.recompiles == 1
    assert "length 24: bucket 32 not compiled yet" in view.compile_events[-1].detail
    view.controls["batch"].value = 2  # a new batch size: a new program
    view.flush()
    assert view.recompiles == 2 and "batch 2" in view.compile_events[-1].detail
    assert runs.cache == [(1, 16), (1, 32), (2, 32)]
    view.controls["size"].value = 16  # bucket 16 of batch 2 is new too
    view.flush()
    assert view.recompiles == 3


def test_static_run_equals_torch_on_the_view_inputs(gpt2):
    runs = TorchRuns(gpt2, vocab=64, buckets=(16,))
    (ids,) = runs.make_args(2, 10)
    with torch.no_grad():
        want = gpt2(torch.from_numpy(ids), use_cache=False).logits.numpy()
    np.testing.assert_allclose(runs(ids).logits, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runs.eager(ids).logits, want, rtol=1e-5, atol=1e-5)
