"""Compiler passes: each a named ``Graph -> Graph`` function recording ``RewriteStep``s."""

from .causal_attention import causal_attention
from .codegen import codegen
from .cse import cse
from .dce import dce
from .decode_attention import decode_attention
from .donate import donate
from .driver import LEVELS, PASSES, Level, optimize
from .fold import fold
from .fuse import fuse
from .fuse_softmax import fuse_softmax
from .grouped_attention import grouped_attention
from .memory_plan import MemoryPlan, memory_plan, plan_memory
from .rewrite import PassDidNotConverge, Rewrite, RewriteStep, Rule, run_rules
from .simplify import simplify

__all__ = [
    "fold", "cse", "dce", "simplify", "fuse", "fuse_softmax", "memory_plan", "plan_memory", "MemoryPlan",
    "optimize", "LEVELS", "PASSES", "Level", "RewriteStep", "Rule", "Rewrite", "run_rules",
    "PassDidNotConverge", "codegen", "grouped_attention", "donate", "causal_attention",
    "decode_attention",
]  # fmt: skip
