"""Re-planning when the job changes (`replan`), the migration between two plans
(`migration`), the screen of device counts (`screen`) and a straggler's layer rebalance
(`layers`). Private: import from ``explorer.training``.
"""
