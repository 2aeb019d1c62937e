"""One job over pools of different chips: the pools (`pools`), a pipeline across them
(`pipeline`), data parallelism across them (`data`) and the plan (`plan`). Floor: above
``planning/`` (each pool's own best configuration is a one-cluster search), ``simulate``,
``offload``, ``step_model/`` and ``pipeline/``; below ``plan`` (`plan_training(pools=)`)
and ``replanning/`` (a straggler's rebalance reuses the pipeline across pools). Private:
import from ``explorer.training``.
"""
