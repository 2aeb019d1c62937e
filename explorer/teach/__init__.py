"""Teaching with the simulator: exercises whose answers the project computes ("predict, then
check") and the rank map (which global ranks form each parallel group under a launcher's
rank order). Floor: above ``explorer.training``, ``explorer.sharding`` and
``explorer.hardware``; beside ``explorer.export``.

>>> import explorer as ex
>>> q = ex.teach.kinds.bubble("1f1b", pp=4, microbatches=8)
>>> q.check(q.answer_text).right
True
>>> ex.teach.rank_map(ex.teach.RankLayout(dp=2, tp=2, pp=2)).groups["tp"]
((0, 1), (2, 3), (4, 5), (6, 7))
"""

from . import kinds
from .catalog import NOTEBOOKS, all_exercises, notebook_exercises
from .errors import TeachError
from .exercises import EXERCISE_KINDS, Exercise, ExerciseKind, Mistake, Verdict, parse_number
from .ranks import GROUP_AXES, LAUNCHERS, Launcher, RankLayout, RankMap, rank_map

__all__ = [
    "Exercise", "ExerciseKind", "EXERCISE_KINDS", "Mistake", "Verdict", "parse_number",
    "TeachError", "kinds", "NOTEBOOKS", "notebook_exercises", "all_exercises",
    "RankLayout", "RankMap", "rank_map", "Launcher", "LAUNCHERS", "GROUP_AXES",
]  # fmt: skip
