"""`verify`: the sharded run equals the unsharded one, and the bytes moved equal the bytes
the cost side charges."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..checks import is_number
from ..hardware import Mesh
from ..ir import Graph
from .errors import ShardingError
from .executor import ExecutionResult, check_assignment, execute, reference
from .layout import Layout
from .redistribute import redistribute
from .strategy import Strategy

__all__ = ["VerifyReport", "verify", "predicted_bytes"]


@dataclass(frozen=True)
class VerifyReport:
    """Result of `verify`.

    Args:
        ok: every output allclose and measured bytes == predicted bytes.
        max_abs_err: the largest absolute error over all outputs.
        errors: output -> its max absolute error.
        mismatched: outputs that are not allclose.
        bytes_measured: bytes per device the executor's collectives sent.
        bytes_predicted: bytes per device the redistribution plans and strategies charge.
        num_collectives: collectives performed.
    """

    ok: bool
    max_abs_err: float
    errors: tuple[tuple[str, float], ...]
    mismatched: tuple[str, ...]
    bytes_measured: float
    bytes_predicted: float
    num_collectives: int
    result: ExecutionResult | None = None

    def raise_if_failed(self) -> VerifyReport:
        if not self.ok:
            raise ShardingError(str(self))
        return self

    def __str__(self) -> str:
        head = "OK" if self.ok else "FAILED"
        text = (f"verify {head}: max abs err {self.max_abs_err:.3g}; "
                f"{self.num_collectives} collectives, {self.bytes_measured:g} B/device measured "
                f"vs {self.bytes_predicted:g} predicted")  # fmt: skip
        if self.mismatched:
            text += f"; outputs differing: {', '.join('%' + m for m in self.mismatched)}"
        return text


def predicted_bytes(graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]) -> float:
    """Bytes per device the cost side charges: one redistribution per (producer, required
    layout), the strategies' internal collectives, and the reduction of partial outputs."""
    assignment = getattr(assignment, "assignment", assignment)
    check_assignment(graph, mesh, assignment)
    return _predicted_bytes(graph, mesh, assignment)


def _predicted_bytes(graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]) -> float:
    total = 0.0
    seen: set[tuple[str, Layout]] = set()
    for n in graph.nodes:
        s = assignment[n.name]
        total += sum(c.bytes_per_device for c in s.collectives)
        for a, want in zip(n.inputs, s.in_layouts, strict=True):
            have = assignment[a].out_layout
            if have != want and (a, want) not in seen:
                seen.add((a, want))
                total += redistribute(have, want, graph.node(a).type, mesh).bytes_per_device
    for o in graph.outputs:
        have = assignment[o].out_layout
        if have.partial and (o, Layout(have.dims)) not in seen:
            total += redistribute(have, Layout(have.dims), graph.node(o).type,
                                  mesh).bytes_per_device  # fmt: skip
    return total


def verify(
    graph: Graph, plan_or_assignment, mesh: Mesh, rtol: float = 1e-6, atol: float = 1e-9,
    inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0,
) -> VerifyReport:  # fmt: skip
    """Run sharded and unsharded; compare outputs (allclose) and bytes.

    ``plan_or_assignment``: ``{node: Strategy}`` or any object with an ``.assignment``.
    """
    assignment = getattr(plan_or_assignment, "assignment", plan_or_assignment)
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if not is_number(tol, minimum=0, finite=False):
            raise ShardingError(f"{name}={tol!r} is not a number >= 0; pass e.g. {name}=1e-6")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        res = execute(graph, mesh, assignment, inputs, seed)
        ref = reference(graph, res.inputs)
    errors, bad = [], []
    for o in graph.outputs:
        got, want = res.outputs[o].astype(np.float64), ref[o].astype(np.float64)
        finite = np.isfinite(want)
        with np.errstate(invalid="ignore"):
            err = float(np.nanmax(np.abs(np.where(finite, got - want, 0.0)), initial=0.0))
        errors.append((o, err))
        same_inf = np.array_equal(np.isfinite(got), finite)
        if not (same_inf and np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)):
            bad.append(o)
    predicted = _predicted_bytes(graph, mesh, assignment)  # execute checked the assignment
    measured = res.bytes_measured
    ok = not bad and math.isclose(measured, predicted, rel_tol=1e-9, abs_tol=1e-9)
    return VerifyReport(
        ok=ok, max_abs_err=max((e for _, e in errors), default=0.0), errors=tuple(errors),
        mismatched=tuple(bad), bytes_measured=measured, bytes_predicted=predicted,
        num_collectives=len(res.collective_log), result=res,
    )  # fmt: skip
