"""`to_jax`: a plan as a runnable JAX program on a ``jax.sharding.Mesh`` with our axis names.

Parameters and inputs are placed with ``NamedSharding(mesh, PartitionSpec(...))`` from
their layouts; every op's output is pinned with ``with_sharding_constraint`` to the layout
the plan produces it in, and every input an op reads in another layout is pinned to the
layout the op needs, so XLA's SPMD partitioner has no freedom left: the collectives it
inserts are the redistributions of the plan. A partial-sum output (a row-parallel matmul)
is not pinned (JAX has no partial layout); its consumer's pin makes XLA reduce it.

Ops run as ``jax.numpy`` versions of the graph's numpy kernels (`JAX_OPS`); the MoE ops
(data-dependent slots) are not exported.

Context parallelism: `stage_mesh` gives a ParallelConfig's ``dp x cp x tp`` mesh, and
`megatron_assignment` on a mesh with a ``cp`` axis splits the sequence dim of every
activation over it (``PartitionSpec("dp", "cp", "tp")`` for ``[batch, seq, features]``);
the attention reads K and V whole on the sequence, so XLA all-gathers them over ``cp``
(Llama 3's all-gather exchange; the ring exchange has no SPMD form to pin).

Needs the ``jax`` extra (``pip install .[jax]``); the CPU backend gives 8 devices with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set before jax is imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..hardware import Mesh
from ..ir import Graph
from ..ir.activations import GELU_C, GELU_K
from ..ir.ops import dropout_mask
from ..models import ModelConfig, build, load
from ..sharding import Layout, Strategy, assign, random_inputs
from ..sharding.verify import predicted_bytes
from .compare import Comparison, predicted_collectives, predicted_gradient_collectives
from .compare import compare as compare_collectives
from .errors import ExportError, require
from .hlo import collectives as hlo_collectives

__all__ = ["JaxProgram", "to_jax", "JAX_OPS", "resolve_model", "resolve_assignment", "stage_mesh"]


def stage_mesh(plan, hardware=None) -> Mesh:
    """The mesh of one pipeline stage of a ParallelConfig (or TrainingPlan): axes ``dp``,
    ``cp`` (when > 1, Llama 3's order: tp innermost, then cp) and ``tp``, the names
    `megatron_assignment` reads.

    >>> from explorer.training import ParallelConfig
    >>> print(stage_mesh(ParallelConfig(dp=2, tp=2, pp=4, cp=2)))
    Mesh(dp=2, cp=2, tp=2)
    """
    config = getattr(plan, "config", plan)
    if not hasattr(config, "cp") or not hasattr(config, "tp"):
        raise ExportError(f"expected a ParallelConfig or a TrainingPlan, got {type(plan).__name__}")
    axes = {"dp": config.dp} | ({"cp": config.cp} if config.cp > 1 else {}) | {"tp": config.tp}
    return Mesh(axes, hardware=hardware)


def resolve_model(model, batch: int | None, seq: int | None) -> Graph:
    """A graph from a Graph, a ModelConfig or a zoo name (built for ``batch`` x ``seq``)."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, str | ModelConfig):
        cfg = load(model)
        if batch is None:
            raise ExportError(f"exporting model {cfg.name!r} needs batch=... (and seq=...)")
        return build(cfg, batch=batch, seq=seq)
    raise ExportError(
        f"cannot export {type(model).__name__}; pass a Graph, a ModelConfig or a zoo name"
    )


def resolve_assignment(graph: Graph, plan, mesh: Mesh) -> dict[str, Strategy]:
    """``{node: Strategy}`` from a ShardingPlan, an assignment, or ``{node: name}``."""
    assignment = getattr(plan, "assignment", plan)
    if not isinstance(assignment, Mapping):
        raise ExportError(
            f"plan is a {type(plan).__name__}; pass a ShardingPlan, {{node: Strategy}} or "
            "{node: strategy name}"
        )
    if assignment and all(isinstance(v, str) for v in assignment.values()):
        return assign(graph, mesh, dict(assignment))
    missing = [n.name for n in graph.nodes if n.name not in assignment]
    if missing:
        raise ExportError(
            f"the plan has no strategy for node %{missing[0]} (and {len(missing) - 1} more); "
            "was it made for another graph (batch, seq or model)?"
        )
    return {n.name: assignment[n.name] for n in graph.nodes}


# --- jax.numpy kernels, one per op the model builders emit ----------------------------------


def _causal_mask(jnp, x, offset=0):
    s, t = x.shape[-2], x.shape[-1]
    keep = jnp.arange(t)[None, :] <= (jnp.arange(s)[:, None] + offset)
    return jnp.where(keep, x, -jnp.inf).astype(x.dtype)


def _softmax(jnp, x):
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _layernorm(jnp, x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def _rmsnorm(jnp, x, g, eps=1e-6):
    return x / jnp.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * g


def _cross_entropy(jnp, logits, labels):
    # the picked logit as a masked sum (Megatron's parallel cross-entropy): with the
    # vocabulary split it is an all-reduce, where a gather would all-gather the logits
    m = jnp.max(logits, axis=-1, keepdims=True)
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=-1)) + m[..., 0]
    hit = labels[..., None] == jnp.arange(logits.shape[-1])
    picked = jnp.sum(jnp.where(hit, logits, 0), axis=-1)
    return (lse - picked).astype(jnp.float32)


def _gelu(jnp, x):
    # explorer.ir.activations.gelu's constants; x*x*x keeps the input's dtype
    return 0.5 * x * (1.0 + jnp.tanh(GELU_C * (x + GELU_K * x * x * x)))


def _dropout(jnp, x, p=0.1, seed=0):
    if p == 0:
        return x
    keep = jnp.asarray(dropout_mask(x.shape, p, seed))
    return jnp.where(keep, x / (1.0 - p), 0.0).astype(x.dtype)


def _rope(jnp, x, cos, sin):
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rotated * sin).astype(x.dtype)


def _expand(jnp, x, shape, axes):
    # only the grown axes take their size from the (global) shape, as ir.ops_aten's expand
    target = list(x.shape)
    for k in axes:
        target[k] = shape[k]
    return jnp.broadcast_to(x, tuple(target))


def _axes(a):
    return None if a is None else tuple(a) if isinstance(a, tuple | list) else (a,)


JAX_OPS: dict[str, Callable[..., Any]] = {
    "matmul": lambda jnp, x, w: jnp.matmul(x, w),
    "bmm": lambda jnp, x, y: jnp.matmul(x, y),
    "einsum": lambda jnp, *xs, eq: jnp.einsum(eq, *xs),
    "add": lambda jnp, x, y: x + y,
    "sub": lambda jnp, x, y: x - y,
    "mul": lambda jnp, x, y: x * y,
    "div": lambda jnp, x, y: x / y,
    "gelu": _gelu,
    "silu": lambda jnp, x: x / (1.0 + jnp.exp(-x)),
    "relu": lambda jnp, x: jnp.maximum(x, 0),
    "exp": lambda jnp, x: jnp.exp(x),
    "tanh": lambda jnp, x: jnp.tanh(x),
    "scale": lambda jnp, x, factor: x * factor,
    "causal_mask": _causal_mask,
    "dropout": _dropout,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "cross_entropy": _cross_entropy,
    "sum": lambda jnp, x, axes=None: jnp.sum(x, axis=_axes(axes)),
    "mean": lambda jnp, x, axes=None: jnp.mean(x, axis=_axes(axes)),
    "transpose": lambda jnp, x, perm: jnp.transpose(x, perm),
    "reshape": lambda jnp, x, shape: jnp.reshape(x, shape),
    "embedding": lambda jnp, ids, table: jnp.take(table, ids, axis=0),
    "rope": _rope,
    "expand": _expand,
}


def _jax_dtype(jnp, dtype) -> Any:
    return {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16, "int32": jnp.int32,
            "int64": jnp.int32, "bool": jnp.bool_}[dtype.value]  # fmt: skip


@dataclass(frozen=True, eq=False)
class JaxProgram:
    """A graph and a plan as a JAX program (see the module docstring).

    Attributes:
        graph, mesh, assignment: what was exported (our objects).
        jax_mesh: ``jax.sharding.Mesh`` with our axis names and shape.
        shardings: source node -> ``NamedSharding`` (parameters and inputs).
        specs: node -> the ``PartitionSpec`` tuple its output is pinned to (None: partial,
            left to the consumer's pin).
    """

    graph: Graph
    mesh: Mesh
    assignment: dict[str, Strategy]
    jax_mesh: Any
    shardings: dict[str, Any]
    specs: dict[str, tuple | None]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # --- values -------------------------------------------------------------------------
    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.graph.nodes if n.is_source)

    def values(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded source values (`explorer.sharding.random_inputs`) in the graph's dtypes."""
        jnp = require("jax.numpy", "jax")
        out = {}
        for name, v in random_inputs(self.graph, seed).items():
            dt = _jax_dtype(jnp, self.graph.node(name).type.dtype)
            out[name] = np.asarray(jnp.asarray(v, dtype=dt))
        return out

    def place(self, values: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """``jax.device_put`` every source with its sharding."""
        jax = require("jax", "jax")
        return {k: jax.device_put(values[k], self.shardings[k]) for k in self.sources}

    # --- the program --------------------------------------------------------------------
    def forward(self, values: Mapping[str, Any], constrain: bool = True) -> dict[str, Any]:
        """The traced forward: source values in, ``{output: array}`` out."""
        jax = require("jax", "jax")
        jnp = jax.numpy
        NamedSharding, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec

        def pin(x, spec):
            if not constrain or spec is None:
                return x
            return jax.lax.with_sharding_constraint(x, NamedSharding(self.jax_mesh, P(*spec)))

        env: dict[str, Any] = {}
        pinned: dict[tuple[str, Layout], Any] = {}
        for n in self.graph.nodes:
            if n.is_source:
                env[n.name] = values[n.name]
                continue
            s = self.assignment[n.name]
            args = []
            for a, want in zip(n.inputs, s.in_layouts, strict=True):
                have = self.assignment[a].out_layout
                if have == want:
                    args.append(env[a])
                    continue
                key = (a, want)
                if key not in pinned:
                    pinned[key] = pin(env[a], want.to_partition_spec())
                args.append(pinned[key])
            impl = JAX_OPS.get(n.op)
            if impl is None:
                raise ExportError(
                    f"node %{n.name}: op {n.op!r} has no JAX kernel in explorer.export.JAX_OPS "
                    f"(known: {', '.join(sorted(JAX_OPS))}); export a model without it"
                )
            env[n.name] = pin(impl(jnp, *args, **n.attr_dict), self.specs[n.name])
        return {o: env[o] for o in self.graph.outputs}

    def jitted(self, constrain: bool = True):
        """``jax.jit`` of `forward` with the sources' shardings as ``in_shardings``."""
        jax = require("jax", "jax")
        key = f"forward{constrain}"
        if key not in self._cache:
            fn = functools.partial(self.forward, constrain=constrain)
            shard = ({k: self.shardings[k] for k in self.sources},) if constrain else None
            self._cache[key] = jax.jit(fn, in_shardings=shard)
        return self._cache[key]

    def run(self, values: Mapping[str, np.ndarray] | None = None, seed: int = 0
            ) -> dict[str, np.ndarray]:  # fmt: skip
        """Run sharded on the mesh's devices; outputs gathered to numpy."""
        values = self.values(seed) if values is None else values
        out = self.jitted(True)(self.place(values))
        return {k: np.asarray(v) for k, v in out.items()}

    def run_unsharded(self, values: Mapping[str, np.ndarray] | None = None, seed: int = 0
                      ) -> dict[str, np.ndarray]:  # fmt: skip
        """The same program on one device, without any sharding."""
        jax = require("jax", "jax")
        values = self.values(seed) if values is None else values
        dev = jax.devices()[0]
        placed = {k: jax.device_put(values[k], dev) for k in self.sources}
        out = self.jitted(False)(placed)
        return {k: np.asarray(v) for k, v in out.items()}

    # --- compiled text ------------------------------------------------------------------
    # the compiled text depends on shapes and shardings only: compiled once, for seeded values
    def hlo(self) -> str:
        """The partitioned, compiled HLO text of the forward."""
        if "hlo" not in self._cache:
            placed = self.place(self.values())
            self._cache["hlo"] = self.jitted(True).lower(placed).compile().as_text()
        return self._cache["hlo"]

    def gradient_hlo(self) -> str:
        """Compiled HLO of the parameter gradients of ``sum(outputs ** 2) / 2``, each gradient
        returned in its parameter's sharding (so XLA reduces it where the plan keeps it)."""
        if "grad_hlo" in self._cache:
            return self._cache["grad_hlo"]
        jax = require("jax", "jax")
        jnp = jax.numpy
        params = [n.name for n in self.graph.parameters]
        others = [k for k in self.sources if k not in params]

        def loss(p, rest):
            out = self.forward({**p, **rest}, True)
            # squares, not a plain sum: d sum(y)/dy is a constant XLA folds (a bias added
            # last then gets a constant gradient and no reduction at all)
            return sum(0.5 * jnp.sum(v.astype(jnp.float32) ** 2) for v in out.values())

        placed = self.place(self.values())
        fn = jax.jit(
            jax.grad(loss),
            in_shardings=({k: self.shardings[k] for k in params},
                          {k: self.shardings[k] for k in others}),
            out_shardings={k: self.shardings[k] for k in params},
        )  # fmt: skip
        lowered = fn.lower({k: placed[k] for k in params}, {k: placed[k] for k in others})
        self._cache["grad_hlo"] = lowered.compile().as_text()
        return self._cache["grad_hlo"]

    def collectives(self):
        """The collectives XLA inserted into the forward (`explorer.export.hlo`)."""
        return hlo_collectives(self.hlo(), self.mesh)

    def compare(self) -> Comparison:
        """`Comparison` of the plan's forward collectives with XLA's."""
        return compare_collectives(predicted_collectives(self.graph, self.mesh, self.assignment),
                                   self.collectives())  # fmt: skip

    def compare_gradients(self) -> Comparison:
        """`Comparison` of the plan's gradient reductions with the all-reduces XLA puts on
        parameter gradients (tuple all-reduces split per tensor)."""
        return compare_collectives(
            predicted_gradient_collectives(self.graph, self.mesh, self.assignment),
            hlo_collectives(self.gradient_hlo(), self.mesh),
        )

    @property
    def predicted_bytes(self) -> float:
        """Bytes per device the plan's forward moves (`explorer.sharding.predicted_bytes`)."""
        return predicted_bytes(self.graph, self.mesh, self.assignment)

    def __str__(self) -> str:
        return (f"JaxProgram {self.graph.name} on {dict(self.jax_mesh.shape)}: "
                f"{len(self.shardings)} sharded sources, {len(self.graph.ops)} ops")  # fmt: skip


def to_jax(model, plan, mesh: Mesh, *, batch: int | None = None, seq: int | None = None,
           devices=None) -> JaxProgram:  # fmt: skip
    """Export ``plan`` for ``model`` on ``mesh`` as a `JaxProgram`.

    Args:
        model: a Graph, a ModelConfig or a zoo name (then ``batch`` and ``seq`` build it).
        plan: a ShardingPlan, ``{node: Strategy}`` or ``{node: strategy name}``.
        mesh: our mesh; the JAX mesh takes its axis names and shape.
        devices: JAX devices (default: the first ``mesh.size`` of ``jax.devices()``).

    Example (with 8 devices)::

        prog = to_jax(graph, megatron_assignment(graph, mesh), mesh)
        prog.run()                 # {output: numpy array}, equal to prog.run_unsharded()
        print(prog.compare())      # XLA's collectives next to the plan's
    """
    graph = resolve_model(model, batch, seq)
    missing = [n for n in graph.ops if n.op not in JAX_OPS]
    if missing:  # before importing jax, so the message does not depend on the extra
        n = missing[0]
        raise ExportError(
            f"node %{n.name}: op {n.op!r} has no JAX kernel in explorer.export.JAX_OPS "
            f"(known: {', '.join(sorted(JAX_OPS))}); export a model without it"
        )
    assignment = resolve_assignment(graph, plan, mesh)
    jax = require("jax", "jax")
    devs = list(jax.devices() if devices is None else devices)
    if len(devs) < mesh.size:
        raise ExportError(
            f"mesh {mesh} needs {mesh.size} devices but JAX has {len(devs)}; on CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={mesh.size} before importing jax"
        )
    jax_mesh = jax.sharding.Mesh(np.array(devs[: mesh.size]).reshape(mesh.shape),
                                 mesh.axis_names)  # fmt: skip
    NamedSharding, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
    shardings, specs = {}, {}
    for n in graph.nodes:
        lay = assignment[n.name].out_layout
        lay.validate(n.type, mesh, n.name)
        specs[n.name] = None if lay.partial else lay.to_partition_spec()
        if n.is_source:
            shardings[n.name] = NamedSharding(jax_mesh, P(*lay.to_partition_spec()))
    return JaxProgram(graph, mesh, assignment, jax_mesh, shardings, specs)
