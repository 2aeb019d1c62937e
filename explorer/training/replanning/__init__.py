"""Re-planning when the job changes (`replan`), the migration between two plans
(`migration`), the screen of device counts (`screen`) and a straggler's layer rebalance
(`layers`). Floor: the top of training, beside ``calibration/``: it stands on
``planning/``, ``hetero.pipeline``, ``simulate``, ``step_model/`` (placement, terms) and
``pipeline/``, and nothing in training imports it but the package's front door. Private:
import from ``explorer.training``.
"""
