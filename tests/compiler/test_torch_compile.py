"""``ex.compile`` of PyTorch modules: one traced graph, run statically (the default call)
and eagerly (``run_eager``, op by op into a Trace), both equal to torch within the stated
tolerance (`TOLERANCE`: fp32 rtol 1e-5, atol 1e-5). Tiny models only; every traced
transformers architecture, a bf16 model and a kept cache are checked in
test_torch_compile_archs.py (slow tier)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.kernels import ALIASES, BUILDERS  # noqa: E402
from explorer.compiler.torch_program import TOLERANCE  # noqa: E402
from tests.models.spmd_cases import example_inputs, real_model  # noqa: E402

RTOL, ATOL = TOLERANCE["fp32"]


def _mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(16, 16), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(16, 4)).eval()


@pytest.fixture(scope="module")
def gpt2():
    m = real_model("gpt2")
    (ids,), _ = example_inputs("gpt2", m.config)
    return m, ids, ex.compile(m, (ids,))


def test_mlp_static_and_eager_equal_torch():
    m, x = _mlp(), torch.randn(3, 16)
    prog = ex.compile(m, (x,))
    with torch.no_grad():
        want = m(x)
    got = prog(x)
    assert isinstance(got, torch.Tensor) and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    eager = prog.run_eager(x.numpy())
    assert isinstance(eager, np.ndarray)
    np.testing.assert_allclose(eager, want.numpy(), rtol=RTOL, atol=ATOL)


def test_eager_trace_has_one_timed_op_per_graph_op_with_its_module_path():
    m, x = _mlp(), torch.randn(3, 16)
    prog = ex.compile(m, (x,))
    prog.run_eager(x)
    events = prog.last_trace.events
    assert [e.name for e in events] == [n.op for n in prog.graph.ops]
    assert all(e.kind == "op" and e.dur_us >= 0 for e in events)
    assert any(" in 0" in e.detail for e in events)  # the first Linear's module path
    assert sum(e.flops for e in events) == prog.graph.flops()


def test_static_trace_runs_fewer_steps_than_eager_ops():
    m, x = _mlp(), torch.randn(3, 16)
    prog = ex.compile(m, (x,))
    out, tr = prog.run_static_traced(x)
    assert all(e.kind == "kernel" for e in tr.events)
    assert 0 < len(tr.events) < len(prog.graph.ops)  # bias + GELU fused
    torch.testing.assert_close(out, prog(x))


def test_gpt2_returns_logits_and_equals_torch(gpt2):
    m, ids, prog = gpt2
    out = prog(ids)
    assert hasattr(out, "logits") and out.logits.shape == (*ids.shape, m.config.vocab_size)
    v = prog.verify(ids)
    assert v.ok, v
    assert v.static_max_abs <= 1e-5 and v.eager_max_abs <= 1e-5


def test_gpt2_cache_is_turned_off_and_noted(gpt2):
    _, ids, prog = gpt2
    assert prog.notes and "use_cache=False" in prog.notes[0]
    assert prog(ids).past_key_values is None


def test_a_function_compiles_with_its_tuple_output():
    def f(x, y):
        return torch.tanh(x) * y + 1.0, x.sum(-1)

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    prog = ex.compile(f, (x, y))
    got, want = prog(x, y), f(x, y)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


def test_in_place_writes_compile_like_torch():
    class ScaleSlice(torch.nn.Module):
        def forward(self, x):
            y = x.clone()
            y[:, 1:3] *= -1
            return y.exp()

    x = torch.randn(4, 5)
    torch.testing.assert_close(ex.compile(ScaleSlice(), (x,))(x), ScaleSlice()(x))


def test_other_shape_is_refused_with_the_fix():
    prog = ex.compile(_mlp(), (torch.randn(3, 16),))
    with pytest.raises(TorchCompileError, match=r"shape \(5, 16\).*compile again"):
        prog(torch.randn(5, 16))


def test_changed_python_constant_is_refused():
    def f(x, scale=2.0):
        return x * scale

    x = torch.randn(2, 3)
    prog = ex.compile(f, (x,), {"scale": 3.0})
    torch.testing.assert_close(prog(x, scale=3.0), x * 3.0)
    with pytest.raises(TorchCompileError, match="frozen at trace time"):
        prog(x, scale=4.0)


def test_untraceable_forward_is_a_project_error():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent Python control flow
                return x * 2
            return x

    with pytest.raises(TorchCompileError, match="Branchy"):
        ex.compile(Branchy(), (torch.randn(2, 2),))


@pytest.mark.parametrize("bad", [3, "model"])
def test_not_a_callable_is_refused(bad):
    with pytest.raises(TorchCompileError, match="expects a torch.nn.Module"):
        ex.compile(bad, (torch.randn(2),))


def test_imported_ops_have_kernels_and_views_are_aliases():
    ops = ("rope", "rsqrt", "sigmoid", "erf", "scalar_op", "cast", "cat", "slice", "expand",
           "window_mask", "gather", "cumsum", "repeat", "fill", "moe_experts", "mla_attention")  # fmt: skip
    assert all(op in BUILDERS for op in ops)
    assert {"slice", "expand"} <= ALIASES


@pytest.mark.parametrize(
    ("eq", "sa", "sb"),
    [("ca,ba->cb", (3, 4), (5, 4)), ("ab,ab->", (3, 4), (3, 4)), ("a,b->ab", (3,), (4,)),
     ("abc,dc->abd", (2, 3, 4), (5, 4)), ("ba,bc->ac", (3, 2), (3, 4)),
     ("abc,bcd->ad", (2, 3, 4), (3, 4, 5)), ("ab,b->a", (2, 3), (3,))],
)  # fmt: skip
def test_linear_layer_matmul_kernel_equals_einsum(eq, sa, sb):
    from explorer.compiler.kernels import _matmul_2d

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    want = np.einsum(eq, a, b)
    k = _matmul_2d(eq, sa, sb, want.shape)
    np.testing.assert_allclose(k(a, b), want, rtol=1e-5, atol=1e-5)
    out = np.empty(want.shape, np.float32)
    assert k(a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_batched_einsum_keeps_the_general_plan():
    from explorer.compiler.kernels import _matmul_2d

    assert _matmul_2d("bik,bkj->bij", (2, 3, 4), (2, 4, 5), (2, 3, 5)) is None
    assert _matmul_2d("ab,cb->ca", (2, 3), (4, 3), (4, 2)) is None  # output order swapped


def test_weight_only_values_are_computed_once(gpt2):
    """GPT-2's position embeddings are looked up at constant positions: the static graph
    reads them as a fed value, the eager run (as torch) looks them up at every call."""
    _, ids, prog = gpt2
    lookups = [sum(n.op == "embedding" for n in g.ops) for g in (prog.graph, prog.folded)]
    assert lookups == [2, 1]  # token and position embeddings; the token lookup stays
    assert prog.verify(ids).static_ok


def test_compare_links_each_fused_kernel_to_the_eager_ops_it_absorbed():
    m, x = _mlp(), torch.randn(3, 16)
    cmp = ex.compile(m, (x,)).compare(x)
    fused = [(tuple(e.name for e in ops), k.replaced) for ops, k in cmp.rows
             if k is not None and k.name == "fused"]  # fmt: skip
    assert len(fused) == 3  # the tail of each hidden layer's exact GELU
    assert all(names == replaced and "scalar_op" in names for names, replaced in fused)
    assert not cmp.unmatched_eager


def test_a_function_reading_a_global_tensor_feeds_it_as_a_lifted_constant():
    w = torch.randn(4, 3)

    def f(x):
        return torch.relu(x @ w) + 1.0

    x = torch.randn(2, 4)
    prog = ex.compile(f, (x,))
    assert [name for name, _ in prog.graph.lifted] == ["lifted_tensor_0"]
    torch.testing.assert_close(prog(x), f(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "kw", [{"level": "O3"}, {"backend": "cuda"}, {"name": 3}, {"use_cache": 1}]
)
def test_bad_options_are_refused_before_tracing(kw):
    with pytest.raises(TorchCompileError, match=next(iter(kw))):
        ex.compile(_mlp(), (torch.randn(1, 16),), **kw)
