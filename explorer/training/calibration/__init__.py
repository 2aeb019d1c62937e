"""Measured runs (`measured`), the published tables (`published`), the fit of the
step model's knobs to them (`fit`, `knobs`) and its JSON form (`io`). Private: import from
``explorer.training``.
"""
