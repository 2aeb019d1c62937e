"""Sharding: layouts on a named mesh, strategies from op signatures, redistribution, and a
numpy SPMD executor that proves them.

>>> import explorer as ex
>>> b = ex.GraphBuilder("mlp"); x = b.input("x", (8, 16))
>>> h = b.op("matmul", x, b.param("w1", (16, 32)), name="fc1")
>>> y = b.op("matmul", b.op("gelu", h, name="act"), b.param("w2", (32, 16)), name="fc2")
>>> g = b.build([y])
>>> mesh = ex.Mesh({"tp": 4})
>>> plan = assign(g, mesh, {"fc1": "n=tp", "act": "b=tp", "fc2": "k=tp"})
>>> report = verify(g, plan, mesh)
>>> report.ok, report.num_collectives
(True, 1)
"""

from .collective import Collective, make_collective, send_recv
from .errors import ShardingError
from .executor import ExecutionResult, assign, execute, gather, random_inputs, reference
from .layout import Layout
from .lesson import LESSON_KINDS, LessonCollective, LessonKind, LessonStep, lesson, ring_collective
from .redistribute import Move, RedistributePlan, redistribute, redistribute_across_stages
from .slices import replica_groups, shard_slices
from .strategy import Strategy, node_strategies, strategies
from .verify import VerifyReport, predicted_bytes, verify

__all__ = [
    "Layout", "ShardingError", "shard_slices", "replica_groups", "Collective",
    "make_collective", "send_recv", "Strategy", "strategies", "node_strategies", "Move",
    "RedistributePlan", "redistribute", "redistribute_across_stages", "ExecutionResult",
    "execute", "assign", "random_inputs", "reference", "gather", "VerifyReport", "verify",
    "predicted_bytes", "lesson", "ring_collective", "LessonStep", "LessonCollective", "LessonKind",
    "LESSON_KINDS",
]  # fmt: skip
