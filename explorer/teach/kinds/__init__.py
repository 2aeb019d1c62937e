"""The exercise generators: one function per kind of question, each taking the numbers a
notebook shows and computing the truth (and the typical wrong answers) with the project's
own functions: `explorer.training` memory and schedules, `explorer.hardware` collectives,
`explorer.sharding` redistribution, `explorer.simulate`, `explorer.teach.rank_map`.

One room per concept: ``memory``, ``collectives``, ``pipeline``, ``sharding``, ``steps``
(models and whole steps), ``ranks``; ``common`` holds what they share.

>>> q = bubble("1f1b", pp=4, microbatches=8)
>>> q.answer_text, q.check("37.5").mistake
('27.3%', 'divided the bubble by the compute, not by the whole step')
"""

from .collectives import collective_bytes, collective_time, tp_allreduce
from .common import GIB, MIB
from .memory import activation_memory, zero_memory
from .pipeline import bubble
from .ranks import rank_nodes
from .sharding import COLLECTIVE_CHOICES, redistribution, redistribution_bytes
from .steps import fastest_layout, mfu, model_params, prediction_error

__all__ = [
    "zero_memory", "collective_bytes", "bubble", "redistribution", "redistribution_bytes",
    "fastest_layout", "activation_memory", "tp_allreduce", "model_params", "collective_time",
    "mfu", "prediction_error", "rank_nodes", "COLLECTIVE_CHOICES", "GIB", "MIB",
]  # fmt: skip
