"""The numpy SPMD executor: run a graph on virtual devices, each holding only its blocks.

Between a producer and a consumer the executor performs the redistribution plan's moves
literally on the per-device arrays (`comm`), once per (producer, required layout); ops run
their kernels (`kernels`) on local blocks. Every collective is logged with the bytes each
device actually sent, next to the `Collective` the cost side predicted.

>>> import explorer as ex
>>> b = ex.GraphBuilder("mm"); x = b.input("x", (8, 16)); w = b.param("w", (16, 4))
>>> g = b.build([b.op("matmul", x, w, name="y")])
>>> mesh = ex.Mesh({"tp": 4})
>>> res = execute(g, mesh, assign(g, mesh, {"y": "k=tp"}))
>>> [str(c) for c, _ in res.collective_log]
['all-reduce(tp) 128 B']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..checks import is_int
from ..hardware import Mesh
from ..ir import Graph, Interpreter, IRError, Node
from .collective import Collective
from .comm import apply_move
from .errors import ShardingError
from .kernels import REFERENCE_KERNELS, KernelContext, run_kernel
from .layout import Layout
from .redistribute import redistribute
from .slices import replica_groups, shard_slices
from .strategy import Strategy, node_strategies

__all__ = [
    "ExecutionResult", "execute", "assign", "random_inputs", "reference", "gather",
    "SPMDInterpreter", "ReferenceInterpreter",
]  # fmt: skip


@dataclass
class ExecutionResult:
    """What an SPMD run produced.

    Args:
        arrays: node -> per-device local blocks (in the node's output layout).
        layouts: node -> the layout of those blocks.
        outputs: graph output -> the gathered global array (partial sums reduced).
        collective_log: (predicted `Collective`, measured bytes sent per device), in order.
        inputs: the global source values used.
    """

    arrays: dict[str, list[np.ndarray]]
    layouts: dict[str, Layout]
    outputs: dict[str, np.ndarray]
    collective_log: list[tuple[Collective, float]] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def bytes_measured(self) -> float:
        return float(sum(b for _, b in self.collective_log))

    @property
    def bytes_predicted(self) -> float:
        return float(sum(c.bytes_per_device for c, _ in self.collective_log))


def assign(graph: Graph, mesh: Mesh, names: Mapping[str, str] | None = None,
           default: str = "replicated") -> dict[str, Strategy]:  # fmt: skip
    """An assignment from strategy names: ``{"fc1": "n=tp"}``.

    Ops not named get ``default``; sources not named get the layout their first consumer
    needs (so weights match their users), or replicated when no strategy matches.
    """
    _check_graph(graph)
    _check_mesh(mesh)
    if names is not None and not isinstance(names, Mapping):
        raise ShardingError(
            f"strategy names must be a mapping node -> name such as {{'fc1': 'n=tp'}}, "
            f"got a {type(names).__name__}"
        )
    names = dict(names or {})
    unknown = sorted(set(names) - {n.name for n in graph.nodes})
    if unknown:
        raise ShardingError(f"assignment names %{unknown[0]}, which is not a node of the graph")
    out: dict[str, Strategy] = {}
    for n in reversed(graph.nodes):  # consumers first, so sources can match them
        options = node_strategies(graph, n.name, mesh)
        if n.name in names or not n.is_source:
            out[n.name] = _pick(n.name, options, names.get(n.name, default))
            continue
        want = None
        for c in graph.consumers(n.name):
            if c in out:
                want = out[c].in_layouts[graph.node(c).inputs.index(n.name)]
                break
        match = [s for s in options if s.out_layout == want]
        out[n.name] = match[0] if match else options[0]
    return {n.name: out[n.name] for n in graph.nodes}


def _pick(node: str, options: tuple[Strategy, ...], name: str) -> Strategy:
    for s in options:
        if s.name == name:
            return s
    raise ShardingError(
        f"node %{node} has no strategy {name!r}; its strategies are: "
        + ", ".join(s.name for s in options)
    )


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded values for every source: floats of uneven magnitude and sign (so a wrong
    partial-sum rule cannot pass by chance), integers in the range their users accept."""
    _check_graph(graph)
    if not is_int(seed, minimum=0, numpy=True):
        raise ShardingError(f"seed {seed!r} is not an int >= 0; pass e.g. seed=0")
    rng = np.random.default_rng(seed)
    out = {}
    for n in graph.nodes:
        if not n.is_source:  # input and param; a constant carries its value
            continue
        shape = n.type.shape
        if n.type.dtype.is_float:
            out[n.name] = rng.standard_normal(shape) * rng.uniform(0.5, 2.0, shape) + 0.3
        else:
            out[n.name] = rng.integers(0, _int_bound(graph, n.name), shape).astype(
                n.type.dtype.numpy
            )
    return out


def _int_bound(graph: Graph, name: str) -> int:
    bound = 4
    for c in graph.consumers(name):
        node = graph.node(c)
        if node.op == "embedding" and node.inputs[0] == name:
            bound = graph.node(node.inputs[1]).type.shape[0]
        elif node.op == "cross_entropy" and node.inputs[1] == name:
            bound = graph.node(node.inputs[0]).type.shape[-1]
    return bound


class ReferenceInterpreter(Interpreter):
    """The unsharded run in float64: float sources are widened, casts to a float stay in
    float64 (`kernels.REFERENCE_KERNELS`), every other op runs its registry impl."""

    kernels = REFERENCE_KERNELS

    def placeholder(self, node: Node) -> np.ndarray:
        val = np.asarray(self.inputs[node.name])
        return val.astype(np.float64) if val.dtype.kind == "f" else val


def reference(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The unsharded run in float64: node -> value (every node, not only the outputs)."""
    interp = ReferenceInterpreter(graph)
    try:
        interp.run(inputs)
    except IRError as e:
        raise ShardingError(f"reference run of graph {graph.name!r}: {e}") from e
    return interp.env


def gather(blocks: list[np.ndarray], shape: tuple[int, ...], layout: Layout,
           mesh: Mesh) -> np.ndarray:  # fmt: skip
    """The global array from per-device blocks (a partial layout is summed over its axes).

    Blocks may be uneven (as `shard_slices` cuts dims that do not divide); each must have
    the shape of its device's slice.
    """
    sl = shard_slices(shape, layout, mesh)
    if len(blocks) != mesh.size:
        raise ShardingError(
            f"gather got {len(blocks)} blocks for {mesh} with {mesh.size} devices; pass one "
            "block per device, in device order"
        )
    for d, b in enumerate(blocks):
        want = tuple(x.stop - x.start for x in sl[d])
        if np.shape(b) != want:
            raise ShardingError(
                f"gather: device {d}'s block has shape {np.shape(b)} but layout {layout} of "
                f"shape {tuple(shape)} gives it {want}; pass the blocks of that layout"
            )
    out = np.zeros(shape, dtype=np.asarray(blocks[0]).dtype)
    if layout.partial:
        whole = Layout(layout.dims)
        for g in replica_groups(shape, whole, mesh):
            # within a block's replica group, one device per partial-axis coordinate
            seen: set[tuple] = set()
            for d in g:
                key = tuple(c for a, c in zip(mesh.axis_names, mesh.coords(d), strict=True)
                            if a in layout.partial)  # fmt: skip
                if key not in seen:
                    seen.add(key)
                    out[sl[d]] += blocks[d]
        return out
    for d, b in enumerate(blocks):
        out[sl[d]] = b
    return out


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> None:
    for name, arr in inputs.items():
        if name not in graph or not graph.node(name).is_source:
            raise ShardingError(f"input %{name} is not an input or parameter of the graph")
        want = graph.node(name).type.shape
        got = tuple(np.shape(arr))
        if got != want:
            raise ShardingError(
                f"SPMD input %{name} has shape {got} but the graph declares {want}; "
                "pass an array of the declared shape"
            )


def _check_graph(graph: Graph) -> None:
    if not isinstance(graph, Graph):
        raise ShardingError(
            f"expected an explorer.ir.Graph, got {type(graph).__name__}; build one with "
            "explorer.models.build or explorer.GraphBuilder"
        )


def _check_mesh(mesh: Mesh) -> None:
    if not isinstance(mesh, Mesh):
        raise ShardingError(
            f"expected a Mesh, got {type(mesh).__name__} {mesh!r}; build one with "
            "explorer.Mesh({'dp': 2})"
        )


def check_assignment(graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]) -> None:
    """Raise `ShardingError` unless every node has one of its strategies on ``mesh``, with
    layouts that split every dim evenly."""
    _check_graph(graph)
    _check_mesh(mesh)
    if not isinstance(assignment, Mapping):
        raise ShardingError(
            f"the assignment is a {type(assignment).__name__}, not a mapping node -> Strategy "
            "or a plan with .assignment; build one with explorer.sharding.assign"
        )
    for n in graph.nodes:
        s = assignment.get(n.name)
        if s is None:
            raise ShardingError(
                f"the assignment has no strategy for node %{n.name} ({n.op}); give every "
                "node one (explorer.sharding.assign fills defaults)"
            )
        if not isinstance(s, Strategy):
            raise ShardingError(
                f"the assignment gives node %{n.name} {s!r}, not a Strategy; turn strategy "
                "names into strategies with explorer.sharding.assign(graph, mesh, names)"
            )
        _check_even(graph, mesh, n.name, s)
        options = node_strategies(graph, n.name, mesh)
        if s not in options:
            raise ShardingError(
                f"node %{n.name} ({n.op}) has no strategy {s.name!r} with these layouts on "
                f"{mesh}; its strategies are: " + ", ".join(o.name for o in options)
            )


class SPMDInterpreter(Interpreter):
    """The IR interpreter on ``mesh.size`` virtual devices.

    A value is the list of per-device blocks in the node's output layout (``layouts``).
    ``run_node`` slices sources and constants to their layout, or fetches each input in
    the layout the node's strategy requires (performing and logging the redistribution,
    once per (producer, layout)); ``call_op`` runs the op's SPMD kernel (`kernels.KERNELS`,
    default: the numpy impl on every device) with its internal collectives.
    """

    def __init__(self, graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy]) -> None:
        super().__init__(graph)
        self.mesh = mesh
        self.assignment = assignment
        self.layouts: dict[str, Layout] = {}
        self.log: list[tuple[Collective, float]] = []
        self._converted: dict[tuple[str, Layout], list[np.ndarray]] = {}

    def run_node(self, node: Node, env: Mapping[str, list[np.ndarray]]) -> list[np.ndarray]:
        s = self.assignment[node.name]
        if node.is_source or node.op == "constant":
            val = self.placeholder(node) if node.is_source else self.default_kernel(node, [])
            if val.dtype.kind == "f":
                val = val.astype(np.float64)
            sl = shard_slices(node.type.shape, s.out_layout, self.mesh)
            out = [val[sl[d]] for d in range(self.mesh.size)]
        else:
            args = [self.fetch(a, lay, node.name)
                    for a, lay in zip(node.inputs, s.in_layouts, strict=True)]  # fmt: skip
            out = self.call_op(node, args)
        self.layouts[node.name] = s.out_layout
        return out

    def call_op(self, node: Node, args: list[list[np.ndarray]]) -> list[np.ndarray]:
        s = self.assignment[node.name]
        ctx = KernelContext(node, s, self.mesh, self.graph.input_types(node.name), self.log)
        try:
            return run_kernel(ctx, args)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            if isinstance(e, ShardingError):
                raise
            raise ShardingError(
                f"node %{node.name} ({node.op}) failed under strategy {s.name!r} on "
                f"{self.mesh}: {type(e).__name__}: {e}"
            ) from e

    def fetch(self, name: str, want: Layout, user: str) -> list[np.ndarray]:
        """The blocks of ``name`` in layout ``want``, redistributing (and logging) once."""
        if self.layouts[name] == want:
            return self.env[name]
        key = (name, want)
        if key not in self._converted:
            t = self.graph.node(name).type
            plan = redistribute(self.layouts[name], want, t, self.mesh)
            blocks = self.env[name]
            for mv in plan.moves:
                blocks, sent = apply_move(mv, blocks, self.mesh, t.dtype.itemsize)
                if mv.collective is not None:
                    self.log.append((_tagged(mv.collective, f"{name}->{user}"), sent))
            self._converted[key] = blocks
        return self._converted[key]


def _check_even(graph: Graph, mesh: Mesh, node: str, s: Strategy) -> None:
    """Refuse layouts that cut a dim unevenly: `shard_slices` can draw them, but the
    executor's byte counts and per-device kernels (mean, reshape) assume equal blocks."""
    n = graph.node(node)
    if len(s.in_layouts) != len(n.inputs):
        raise ShardingError(
            f"strategy {s.name!r} of node %{node} gives {len(s.in_layouts)} input layouts "
            f"for {len(n.inputs)} inputs; take the node's strategies from node_strategies"
        )
    named = [(a, graph.node(a).type, lay) for a, lay in zip(n.inputs, s.in_layouts, strict=True)]
    for tensor, ttype, lay in [*named, (node, n.type, s.out_layout)]:
        try:
            lay.validate(ttype, mesh, tensor=tensor)
        except ShardingError as e:
            raise ShardingError(
                f"node %{node} under strategy {s.name!r}: {e}. The SPMD executor runs even "
                "splits only (uneven blocks are drawn by shard_slices, not executed)"
            ) from None


def execute(
    graph: Graph, mesh: Mesh, assignment: Mapping[str, Strategy],
    inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0,
) -> ExecutionResult:  # fmt: skip
    """Run ``graph`` under ``assignment`` on ``mesh.size`` virtual devices in float64."""
    assignment = getattr(assignment, "assignment", assignment)
    check_assignment(graph, mesh, assignment)
    if inputs is not None and not isinstance(inputs, Mapping):
        raise ShardingError(
            f"inputs is a {type(inputs).__name__}; pass a mapping input name -> array"
        )
    given = dict(inputs or {})
    _check_inputs(graph, given)
    values = random_inputs(graph, seed)
    values.update({k: np.asarray(v) for k, v in given.items()})
    spmd = SPMDInterpreter(graph, mesh, assignment)
    spmd.run(values)
    outputs = {}
    for o in graph.outputs:
        lay = spmd.layouts[o]
        blocks = spmd.fetch(o, Layout(lay.dims), "output") if lay.partial else spmd.env[o]
        outputs[o] = gather(blocks, graph.node(o).type.shape, Layout(lay.dims), mesh)
    return ExecutionResult(spmd.env, spmd.layouts, outputs, spmd.log, values)


def _tagged(c: Collective, tensor: str) -> Collective:
    return dataclasses.replace(c, tensor=tensor)
