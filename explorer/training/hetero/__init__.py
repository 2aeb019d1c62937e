"""One job over pools of different chips: the pools (`pools`), a pipeline across them
(`pipeline`), data parallelism across them (`data`) and the plan (`plan`). Private: import
from ``explorer.training``.
"""
