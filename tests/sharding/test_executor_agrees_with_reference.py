"""The SPMD executor and the unsharded reference run an op the same way.

Two cases found by running traced architectures sharded: a node that
leaves an attribute at its default (GPT-NeoX's ``slice`` without ``step``) runs on every
device with the default filled in, as the reference does; and a float made from nothing
(``fill``: PhiMoE's longrope recomputes its rotary frequencies from an fp32 arange) is
float64 in both runs, so ``1e6 ** x`` is not rounded to float32 on one side only.
"""

from __future__ import annotations

import numpy as np

import explorer as ex
from explorer.sharding import assign, reference, verify

MESH = ex.Mesh({"dp": 2, "tp": 4})


def test_slice_without_step_runs_split():
    b = ex.ir.GraphBuilder("pick")
    x = b.input("x", (8, 4, 16))
    y = b.op("slice", x, axis=2, start=0, stop=8)  # step left at its default, 1
    g = b.build([y])
    assert "step" not in g.node(y).attr_dict
    report = verify(g, assign(g, MESH, {y: "a=dp,b=tp"}), MESH)
    assert report.ok, str(report)
    np.testing.assert_array_equal(report.result.outputs[y], report.result.inputs["x"][..., :8])


def test_made_floats_are_float64_in_both_runs():
    b = ex.ir.GraphBuilder("freqs")
    f = b.op("fill", dtype="fp32", kind="arange", shape=(8,), start=0, step=2)
    e = b.op("scale", f, factor=1 / 16)
    p = b.op("scalar_op", e, fn="rpow", value=1e6)  # 1e6 ** (k/16): up to 1.8e5
    g = b.build([b.op("reciprocal", p)])
    (out,) = g.outputs
    want = 1.0 / 1e6 ** (np.arange(0, 16, 2) / 16)
    got = reference(g, {})[out]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)  # float32 would be ~1e-7
    report = verify(g, assign(g, MESH, {out: "a=tp"}), MESH, rtol=0, atol=0)
    assert report.ok, str(report)
