"""Measured runs (`measured`), the published tables (`published`), the fit of the
step model's knobs to them (`fit`, `knobs`) and its JSON form (`io`). Floor: the top of
training, beside ``replanning/``: it stands on ``simulate``, ``planning/`` (the layouts a
published row leaves open), ``step_model.stage_costs``, ``params`` and ``config``, and
nothing in training imports it but the package's front door. Private: import from
``explorer.training``.
"""
