"""Run plans on real engines: JAX (Mesh + PartitionSpec) with XLA's collectives checked
against ours, PyTorch DTensor, MindSpore ``shard()`` strategies, and Megatron-LM /
DeepSpeed launch arguments.

The engines are optional extras, imported inside the functions that need them:
``pip install .[jax]`` and ``pip install .[torch]``; without them the exporters that only
write text (MindSpore, launch arguments, the DTensor plan itself) still work.

>>> import explorer as ex
>>> from explorer.export import megatron_args
>>> megatron_args(ex.ParallelConfig(tp=8, pp=2))[:4]
('--tensor-model-parallel-size', '8', '--pipeline-model-parallel-size', '2')
"""

from .compare import Comparison, compare, predicted_collectives, predicted_gradient_collectives
from .dtensor_export import DTensorPlan, ModuleStyle, to_dtensor
from .errors import ExportError
from .folding import EXPERT_WEIGHT_SPECS, FoldedMesh, folded_mesh
from .hlo import HloCollective, collectives, groups_to_axes, parse_replica_groups
from .jax_export import JAX_OPS, JaxProgram, stage_mesh, to_jax
from .launch_args import deepspeed_args, deepspeed_config, launch_command, megatron_args
from .megatron import megatron_assignment
from .mindspore_export import MindSporeExport, to_mindspore

__all__ = [
    "ExportError", "megatron_assignment", "to_jax", "JaxProgram", "JAX_OPS", "collectives",
    "HloCollective", "parse_replica_groups", "groups_to_axes", "compare", "Comparison",
    "predicted_collectives", "predicted_gradient_collectives", "to_dtensor", "DTensorPlan",
    "ModuleStyle", "to_mindspore", "MindSporeExport", "megatron_args", "deepspeed_config",
    "deepspeed_args", "launch_command", "stage_mesh", "folded_mesh", "FoldedMesh",
    "EXPERT_WEIGHT_SPECS",
]  # fmt: skip
