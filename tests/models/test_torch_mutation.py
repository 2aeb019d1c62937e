"""In-place writes in an imported forward are traced exactly (functionalized: a write
through a slice or an index becomes the base's other positions around the new part) and
checked against torch on real values; a write the IR cannot express (``index_put`` at
tensor indices) stays an opaque op that the report names. Before, ``y = x.clone();
y[:, 1:3] *= -1; return y`` imported as the identity and its report said every op mapped."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from explorer.models import from_torch  # noqa: E402


class ScaleSlice(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y[:, 1:3] *= -1
        return y


class WriteRowAndColumn(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[0] = x[1]
        y[:, -1] = y[:, 0]
        y.add_(1)
        return y


class CopyIntoSlice(torch.nn.Module):
    def forward(self, x):
        y = torch.zeros_like(x)
        y[1:, :2].copy_(x[:-1, 3:])
        return y - x


class NegativeIndices(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y[-2:, -3:-1] = torch.tanh(x[:2, :2])
        y[:, 0] += y[:, -1]
        return y


class InPlaceOnAView(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        v = y.view(-1)
        v.mul_(3)
        return y


CASES = [ScaleSlice, WriteRowAndColumn, CopyIntoSlice, NegativeIndices, InPlaceOnAView]


@pytest.mark.parametrize("tracer", ["export", "make_fx"])
@pytest.mark.parametrize("cls", CASES, ids=lambda c: c.__name__)
def test_in_place_writes_run_like_torch(cls, tracer):
    m = cls()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    g = from_torch(m, (x,), tracer=tracer)
    assert not g.report.opaque, g.report
    (out,) = g.run({g.inputs[0].name: x.numpy()}).values()
    np.testing.assert_allclose(out, m(x).numpy(), rtol=1e-6, atol=1e-6)
    assert not np.allclose(out, x.numpy())  # the writes are in the graph


def test_a_write_at_tensor_indices_is_named_opaque():
    class IndexPut(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y.index_put_((torch.tensor([1]),), torch.ones(5))
            return y

    g = from_torch(IndexPut(), (torch.randn(3, 5),))
    text = str(g.report)
    assert "index_put" in text and "every op on the data path mapped" not in text
