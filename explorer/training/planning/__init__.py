"""The one-cluster search behind `plan_training` (`homogeneous`), its result
(`result.TrainingPlan`), how plans are ranked (`ranking`), the search space (`space`), the
Pareto front, scaling curves and the host-offload fallback (`offload`). Private: import
from ``explorer.training``.
"""
