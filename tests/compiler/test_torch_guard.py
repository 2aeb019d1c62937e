"""The generated call of ex.compile's programs (explorer.compiler.torch_guard): one guard
per traced input in straight-line code, the plan called with the call's inputs only (the
weights baked in), every call the guard refuses served by the general path with the same
results and the same named errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import CompilerError, TorchCompileError  # noqa: E402


class TwoIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 5)
        self.b = torch.nn.Linear(3, 5)

    def forward(self, x, y):
        return torch.relu(self.a(x)) + self.b(y)


@pytest.fixture(scope="module")
def two():
    torch.manual_seed(0)
    m = TwoIn().eval()
    x, y = torch.randn(2, 6), torch.randn(2, 3)
    return m, x, y, ex.compile(m, (x, y), disk_cache="off")


def test_guard_is_straight_line_one_check_per_input(two):
    *_, prog = two
    src = prog._call.source
    assert "for " not in src and "{" not in src and "dict(" not in src
    assert src.count(".shape != s") == 2 and src.count(".dtype is not d") == 2
    assert "entry(x0, x1)" in src  # the plan takes the two inputs, not the 4 weights


def test_bound_plan_takes_only_the_call_inputs(two):
    *_, prog = two
    bound = {i: a for i, a in enumerate(prog._template) if a is not None}
    src, entry = prog.program.bound_plan(bound, prog._user_slots)
    assert src.splitlines()[0].count(",") == 1  # def plan(v_, v_):
    x = np.ones((2, 6), np.float32)
    y = np.ones((2, 3), np.float32)
    feeds = list(prog._template)
    for s, a in zip(prog._user_slots, (x, y), strict=True):
        feeds[s] = a
    np.testing.assert_array_equal(entry(x, y)[0], prog.program.run(feeds)[0])
    with pytest.raises(CompilerError, match="must split"):
        prog.program.bound_plan(bound, prog._user_slots[:1])


def test_fast_and_general_paths_agree_with_torch(two):
    m, x, y, prog = two
    want = m(x, y).detach()
    fast = prog(x, y)
    assert isinstance(fast, torch.Tensor) and torch.allclose(fast, want, rtol=1e-5, atol=1e-5)
    out = prog(x.numpy(), y.numpy())
    assert isinstance(out, np.ndarray) and np.allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
    # refused by the guard, served by the general path: float64, grad, keyword-free mix
    assert np.allclose(prog(x.double().numpy(), y.numpy()), want.numpy(), atol=1e-5)
    assert torch.allclose(prog(x.requires_grad_(False).clone().requires_grad_(), y), want,
                          atol=1e-5)  # fmt: skip
    assert torch.allclose(prog(x, y.numpy()), want, atol=1e-5)


def test_refused_calls_raise_the_named_errors(two):
    *_, prog = two
    with pytest.raises(TorchCompileError, match=r"shape \(3, 6\), compiled for \(2, 6\)"):
        prog(torch.randn(3, 6), torch.randn(2, 3))
    with pytest.raises(TorchCompileError, match="2 positional tensors"):
        prog(torch.randn(2, 6))


def test_recording_takes_the_stepwise_run_with_kernel_events(two):
    _, x, y, prog = two
    with ex.trace.record("t") as t:
        prog(x, y)
    assert [e for e in t.trace.events if e.kind == "kernel"]


def test_results_are_fresh_per_call(two):
    _, x, y, prog = two
    a = prog(x, y)
    b = prog(x * 2, y)
    assert not torch.equal(a, b) and a.data_ptr() != b.data_ptr()
