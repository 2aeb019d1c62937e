"""Tensor, ex.F and eager tracing."""

import numpy as np
import pytest

import explorer as ex
from explorer.compiler import F, ShapeError


def test_operators_match_numpy(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    x, y = ex.tensor(a), ex.tensor(b)
    np.testing.assert_allclose((x + y).numpy(), a + b)
    np.testing.assert_allclose((x - 1.0).numpy(), a - 1)
    np.testing.assert_allclose((2.0 * x / y).numpy(), 2 * a / b, rtol=1e-6)
    np.testing.assert_allclose((x @ ex.tensor(a.T)).numpy(), a @ a.T, rtol=1e-5)
    np.testing.assert_allclose((-x).numpy(), -a)
    assert (x > 0).dtype == ex.DType.BOOL
    np.testing.assert_allclose(x[1:, ::2].numpy(), a[1:, ::2])
    np.testing.assert_allclose(x[..., -1].numpy(), a[..., -1])
    np.testing.assert_allclose(x.reshape(4, -1).numpy(), a.reshape(4, 3))
    np.testing.assert_allclose(x.T.numpy(), a.T)
    np.testing.assert_allclose(
        x.sum(axis=1, keepdims=True).numpy(), a.sum(1, keepdims=True), rtol=1e-6
    )
    np.testing.assert_allclose(x.mean().numpy(), a.mean(), rtol=1e-6)
    np.testing.assert_allclose(x.max(axis=0).numpy(), a.max(0))


def test_functions(rng):
    a = rng.standard_normal((2, 5)).astype(np.float32)
    x = ex.tensor(a)
    np.testing.assert_allclose(F.softmax(x).numpy().sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(F.relu(x).numpy(), np.maximum(a, 0))
    np.testing.assert_allclose(F.silu(x).numpy(), a / (1 + np.exp(-a)), rtol=1e-5)
    np.testing.assert_allclose(F.where(x > 0, x, 0.0).numpy(), np.where(a > 0, a, 0))
    ln = F.layer_norm(x, ex.tensor(np.ones(5)), ex.tensor(np.zeros(5))).numpy()
    np.testing.assert_allclose(ln.mean(-1), 0, atol=1e-6)
    assert F.rms_norm(x, ex.tensor(np.ones(5))).shape == (2, 5)
    ids = ex.tensor(np.array([[0, 2]]), "int32")
    table = ex.tensor(rng.standard_normal((3, 4)))
    assert F.embedding(ids, table).shape == (1, 2, 4)
    loss = F.cross_entropy(x, ex.tensor(np.array([1, 3]), "int32"))
    assert loss.shape == ()
    d1 = F.dropout(x, 0.5, seed=3).numpy()
    np.testing.assert_array_equal(d1, F.dropout(x, 0.5, seed=3).numpy())  # seeded
    assert F.dropout(x, 0.5, training=False) is x


def test_eager_records_trace_events(rng):
    x = ex.tensor(rng.standard_normal((8, 16)))
    w = ex.tensor(rng.standard_normal((16, 4)))
    with ex.trace.record("eager") as rec:
        F.gelu(x @ w)
    evs = rec.trace.compute_events
    assert [e.name for e in evs] == ["matmul", "gelu"]
    mm = evs[0]
    assert mm.kind == "op" and mm.flops == 2 * 8 * 16 * 4
    assert mm.shapes == ((8, 16), (16, 4), (8, 4)) and mm.bytes_allocated == 8 * 4 * 4
    assert mm.dur_us >= 0 and mm.live_bytes >= 128
    s = rec.trace.summary()
    assert s["ops"] == 2 and s["peak_bytes"] >= 256 and s["python_overhead_us"] >= 0


def test_no_recording_outside_block(rng):
    x = ex.tensor(rng.standard_normal(3))
    assert ex.trace.active() is None
    F.relu(x)


def test_shape_error_points_at_user_line():
    with pytest.raises(ShapeError) as e:
        ex.tensor(np.ones((2, 3))) @ ex.tensor(np.ones((4, 5)))
    assert "test_tensor_eager.py" in str(e.value)
