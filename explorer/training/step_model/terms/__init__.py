"""The cost terms of each parallelism, one module each; `StepModel` composes them.

Each module holds what its parallelism adds to a training step: communication (seconds and
bytes sent per device), memory and compute. They read the `StepView` they are given
(`StepModel` is one: ``s.cfg``, ``s.par``, ``s.costs``, ``s.mesh``, ``s.tparams``, ``s.collective_s``) and never
each other's private state, so a change to ZeRO is a change to ``zero.py`` alone.

Every collective's seconds come from ``s.collective_s`` -> `Mesh.collective_time` on the
cluster's link levels (`explorer.hardware.levels`): the slowest level the ring crosses
(NVLink, leaf/rail, spine with its oversubscription), its links shared by the rings of every
group running the same collective (eight dp rings leaving a TP-8 node share its NICs). The
mesh orders devices ``pp, dp, ep, cp, tp`` (tp innermost, filling an NVLink domain first).

- ``tp``: tensor-parallel parameter split, the searched per-layer collectives, their bytes.
- ``pp``: stage-to-stage transfers, the tied head copy on the last stage.
- ``dp``: the data-parallel gradient reduction.
- ``zero``: what ZeRO stages 1-3 shard (model states) and the collectives that costs.
- ``recompute``: per-layer recompute policies, their activations, time and FLOPs.
- ``ep``: expert parallelism: the expert-parameter split and the all-to-all.
- ``dense``: a MoE model's dense first layers and multi-token-prediction modules, the
  experts' GEMMs as an ep group runs them.
- ``cp``: context parallelism: the sequence split, the key/value exchange, its bytes.
"""

from . import cp, dense, dp, ep, pp, recompute, tp, zero

__all__ = ["cp", "dp", "ep", "dense", "pp", "recompute", "tp", "zero"]
