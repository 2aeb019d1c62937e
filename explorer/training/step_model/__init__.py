"""One training configuration, costed: per-part costs (`costs`), kernel time by shape
(`kernels`), the operator search per layer (`stage_costs`), the device order of the mesh
(`placement`), the cost terms of each parallelism (`terms/`, reading a `view.StepView`) and
`model.StepModel`, which composes them. Private: import from ``explorer.training``.
"""
