"""One training configuration, costed: per-part costs (`costs`), kernel time by shape
(`kernels`), the operator search per layer (`stage_costs`), the device order of the mesh
(`placement`), the per-layer seconds and memory that the stage splitters read (`split`), the cost terms of each parallelism (`terms/`, reading a `view.StepView`) and
`model.StepModel`, which composes them. Floor: above ``params``, ``config``, ``memory``,
``errors`` and ``pipeline.partition`` (and the core's hardware, models, search and ir);
below ``simulate`` and everything that prices a configuration (``offload``,
``datacenters``, ``planning/``, ``hetero/``, ``replanning/``, ``calibration/``). Private:
import from ``explorer.training``.
"""
