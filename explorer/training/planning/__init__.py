"""The one-cluster search behind `plan_training` (`homogeneous`), its result
(`result.TrainingPlan`), how plans are ranked (`ranking`), the search space (`space`), the
Pareto front, scaling curves and the host-offload fallback (`offload`). Floor: above
``simulate``, ``offload``, ``step_model/`` (its terms say which layouts are legal),
``params`` and ``config``; below ``hetero/``, ``plan``, ``replanning/`` and
``calibration/``, which search with it. Private: import from ``explorer.training``.
"""
