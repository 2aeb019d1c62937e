"""`to_dtensor`: a plan as a PyTorch ``DeviceMesh`` plus a ``parallelize_module`` plan.

From the plan's per-node layouts: a matmul whose weight is split on its output features is
``ColwiseParallel``, on its input features ``RowwiseParallel``; a norm split on the
sequence is ``SequenceParallel`` (then the column-parallel matmuls gather the sequence,
``input_layouts=Shard(1)``, and the row-parallel ones scatter it, ``output_layouts=
Shard(1)``, and the layers take and return sequence shards). The module comes from
`explorer.export.torch_model`, whose paths are the graph's node names. ``dp`` splits the
batch: each data-parallel rank runs its slice of it.

Splits DTensor's module styles cannot express (the vocabulary-parallel head of a Megatron
plan, say) are listed in `DTensorPlan.unmapped`; those modules run replicated.

Run it with the launcher (gloo on CPU)::

    torchrun --nproc_per_node=4 -m explorer.export.dtensor_launch --spec plan.json

>>> import explorer as ex
>>> cfg = ex.models.ModelConfig(name="t", arch="decoder", hidden_size=64, num_layers=1,
...                             num_heads=4, vocab_size=128, max_seq_len=16, dtype="fp32")
>>> g = ex.models.build(cfg, batch=2, seq=8)
>>> from explorer.export import megatron_assignment
>>> plan = to_dtensor(cfg, megatron_assignment(g, ex.Mesh({"tp": 4})), ex.Mesh({"tp": 4}),
...                   batch=2, seq=8)
>>> [(s.path, s.style) for s in plan.styles][:2]
[('layers.0.attn.q', 'ColwiseParallel'), ('layers.0.attn.k', 'ColwiseParallel')]
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..hardware import Mesh
from ..models import ModelConfig, build, load
from .errors import ExportError, require
from .jax_export import resolve_assignment

__all__ = ["ModuleStyle", "DTensorPlan", "to_dtensor"]

_NORMS = frozenset({"layernorm", "rmsnorm"})


@dataclass(frozen=True)
class ModuleStyle:
    """One entry of the parallelize plan: module path, style class name, and the
    ``input_layouts`` / ``output_layouts`` as placement names (``"Shard(1)"``) or None."""

    path: str
    style: str
    input_layouts: str | None = None
    output_layouts: str | None = None
    use_local_output: bool | None = None

    def __str__(self) -> str:
        args = [f"{k}={v}" for k, v in (("input_layouts", self.input_layouts),
                                         ("output_layouts", self.output_layouts),
                                         ("use_local_output", self.use_local_output))
                if v is not None]  # fmt: skip
        return f"{self.path!r}: {self.style}({', '.join(args)})"


@dataclass(frozen=True)
class DTensorPlan:
    """What `to_dtensor` produced; build the torch objects inside a process group.

    Attributes:
        config, batch, seq: the model and the batch shape the plan was made for.
        mesh_shape, mesh_dim_names: the DeviceMesh (our axis names).
        tp, dp: the axis names used for tensor and data parallelism (dp None: none).
        styles: the parallelize plan, in module order.
        sequence_parallel: norms and residuals hold sequence shards.
        unmapped: nodes the plan splits over ``tp`` that no module style carries.
    """

    config: ModelConfig
    batch: int
    seq: int
    mesh_shape: tuple[int, ...]
    mesh_dim_names: tuple[str, ...]
    tp: str
    dp: str | None
    styles: tuple[ModuleStyle, ...]
    sequence_parallel: bool
    unmapped: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        n = 1
        for s in self.mesh_shape:
            n *= s
        return n

    def device_mesh(self, device_type: str = "cpu"):
        """``init_device_mesh`` with our shape and names (needs an initialised group)."""
        dm = require("torch.distributed.device_mesh", "torch")
        return dm.init_device_mesh(device_type, self.mesh_shape, mesh_dim_names=self.mesh_dim_names)

    def parallelize_plan(self) -> dict:
        """``{module path: ParallelStyle}`` for ``parallelize_module``."""
        tp = require("torch.distributed.tensor.parallel", "torch")
        placements = require("torch.distributed.tensor", "torch")

        def placement(text: str | None):
            if text is None:
                return None
            if text == "Replicate()":
                return placements.Replicate()
            if text.startswith("Shard("):
                return placements.Shard(int(text[6:-1]))
            raise ExportError(f"unknown placement {text!r}")

        out = {}
        for s in self.styles:
            cls = getattr(tp, s.style)
            kwargs = {}
            if s.style in ("PrepareModuleInput", "PrepareModuleOutput"):
                io = "input" if s.style == "PrepareModuleInput" else "output"
                kwargs[f"{io}_layouts"] = (placement(s.input_layouts),)
                kwargs[f"desired_{io}_layouts"] = (placement(s.output_layouts),)
            else:
                if s.input_layouts is not None:
                    kwargs["input_layouts"] = placement(s.input_layouts)
                if s.output_layouts is not None:
                    kwargs["output_layouts"] = placement(s.output_layouts)
            if s.use_local_output is not None:
                kwargs["use_local_output"] = s.use_local_output
            out[s.path] = cls(**kwargs)
        return out

    def parallelize(self, module, device_mesh):
        """``parallelize_module(module, device_mesh[tp], plan)``; returns the module."""
        tp = require("torch.distributed.tensor.parallel", "torch")
        sub = device_mesh[self.tp] if len(self.mesh_shape) > 1 else device_mesh
        return tp.parallelize_module(module, sub, self.parallelize_plan())

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["config"] = dataclasses.asdict(self.config)
        return d

    def write(self, path: str | Path, seed: int = 0) -> Path:
        """Write the spec the launcher reads (JSON)."""
        path = Path(path)
        path.write_text(json.dumps({**self.as_dict(), "seed": seed}, indent=1))
        return path

    @classmethod
    def from_dict(cls, d: dict) -> DTensorPlan:
        d = dict(d)
        d.pop("seed", None)
        d["config"] = ModelConfig(**d["config"])
        d["styles"] = tuple(ModuleStyle(**s) for s in d["styles"])
        for k in ("mesh_shape", "mesh_dim_names", "unmapped"):
            d[k] = tuple(d[k])
        return cls(**d)

    def command(self, spec: str = "plan.json", out: str | None = None) -> str:
        """The torchrun command line that runs this plan on one host."""
        cmd = ["torchrun", f"--nproc_per_node={self.world_size}", "-m",
               "explorer.export.dtensor_launch", "--spec", spec]  # fmt: skip
        if out:
            cmd += ["--out", out]
        return shlex.join(cmd)

    def __str__(self) -> str:
        lines = [f"DeviceMesh {dict(zip(self.mesh_dim_names, self.mesh_shape, strict=True))}, "
                 f"parallelize_module over {self.tp!r}:"]  # fmt: skip
        lines += [f"  {s}" for s in self.styles]
        if self.unmapped:
            lines.append(f"  (left replicated: {', '.join(self.unmapped)})")
        return "\n".join(lines)


def to_dtensor(model, plan, mesh: Mesh, *, batch: int, seq: int, tp: str = "tp",
               dp: str | None = "dp") -> DTensorPlan:  # fmt: skip
    """Export ``plan`` (for ``model`` built with ``batch`` x ``seq``) as a `DTensorPlan`.

    ``model``: a ModelConfig or a zoo name (the torch module is built from the config).
    Torch is not needed to build the plan, only to apply it.
    """
    if not isinstance(model, str | ModelConfig):
        raise ExportError(
            f"to_dtensor builds the torch module from a ModelConfig or zoo name, got "
            f"{type(model).__name__}"
        )
    cfg = load(model)
    graph = build(cfg, batch=batch, seq=seq)
    assignment = resolve_assignment(graph, plan, mesh)
    if tp not in mesh.axis_names:
        raise ExportError(f"mesh {mesh} has no tensor-parallel axis {tp!r}; pass tp=...")
    extra = [a for a in mesh.axis_names if a not in (tp, dp) and mesh.axis_size(a) > 1]
    if extra:
        raise ExportError(
            f"mesh axes {extra} are neither tp={tp!r} nor dp={dp!r}; DTensor export maps one "
            "tensor-parallel and one data-parallel axis"
        )
    dp_axis = dp if dp in mesh.axis_names else None

    def has(layout_dims, i: int) -> bool:
        return len(layout_dims) > i and tp in layout_dims[i]

    sp = any(graph.node(n).op in _NORMS and has(assignment[n].in_layouts[0].dims, 1)
             for n in assignment if n.startswith("layers."))  # fmt: skip
    styles: list[ModuleStyle] = []
    mapped: set[str] = set()
    layer_ids = sorted({int(n.split(".")[1]) for n in assignment if n.startswith("layers.")})
    for n in graph.ops:
        s = assignment[n.name]
        if n.op == "matmul" and graph.node(n.inputs[1]).op == "param":
            w = s.in_layouts[1].dims
            x_have = assignment[n.inputs[0]].out_layout.dims
            if tp in w[1]:
                gather = sp and has(x_have, 1)
                styles.append(ModuleStyle(n.name, "ColwiseParallel",
                                          input_layouts="Shard(1)" if gather else None))  # fmt: skip
                mapped.add(n.name)
            elif tp in w[0]:
                users = graph.consumers(n.name)
                bias = users[0] if users and graph.node(users[0]).op == "add" else n.name
                scatter = sp and has(assignment[bias].out_layout.dims, 1)
                styles.append(ModuleStyle(
                    n.name, "RowwiseParallel", output_layouts="Shard(1)" if scatter else None,
                    use_local_output=False if scatter else None))  # fmt: skip
                mapped.add(n.name)
        elif (
            n.op in _NORMS and sp and has(s.in_layouts[0].dims, 1) and n.name.startswith("layers.")
        ):
            styles.append(ModuleStyle(n.name, "SequenceParallel", use_local_output=False))
            mapped.add(n.name)
    if sp and layer_ids:
        first, last = f"layers.{layer_ids[0]}", f"layers.{layer_ids[-1]}"
        styles.insert(0, ModuleStyle(first, "PrepareModuleInput", "Replicate()", "Shard(1)",
                                     use_local_output=False))  # fmt: skip
        styles.append(ModuleStyle(last, "PrepareModuleOutput", "Shard(1)", "Replicate()",
                                  use_local_output=True))  # fmt: skip
    unmapped = tuple(
        n.name for n in graph.ops
        if n.name not in mapped and not n.name.startswith("layers.")
        and tp in assignment[n.name].out_layout.axes + tuple(
            a for lay in assignment[n.name].in_layouts for a in lay.axes)
    )  # fmt: skip
    return DTensorPlan(
        config=cfg, batch=batch, seq=seq, mesh_shape=mesh.shape, mesh_dim_names=mesh.axis_names,
        tp=tp, dp=dp_axis, styles=tuple(styles), sequence_parallel=sp, unmapped=unmapped,
    )  # fmt: skip
