"""The cost terms of each parallelism, one module each; `StepModel` composes them.

Each module holds what its parallelism adds to a training step: communication (seconds and
bytes sent per device), memory and compute. They read the `StepView` they are given
(`StepModel` is one: ``s.cfg``, ``s.par``, ``s.costs``, ``s.mesh``, ``s.tparams``,
``s.collective_s``) and never each other's private state.

Who reads the ZeRO and context-parallel fields (``ParallelConfig.zero``, ``cp``,
``cp_kv_exchange``; the ``zero*`` and ``cp_*`` `TrainingParams`), so that a change to how
ZeRO or cp costs a step is a change to ``zero.py`` or ``cp.py`` alone:

- ``zero.py`` and ``cp.py`` decide with them: what is sharded, which collective, how often,
  its buffers (`zero.state_bytes`, `zero.gradient_collective`, `zero.reduce_buffer`, ...);
  the sequence split, the key/value exchange, each device's share (`cp.device_share`).
  The other terms and `StepModel` call those functions and read neither stage nor degree
  to decide (``dp.py`` asks `zero.gradients_per_microbatch`, ``dense.py`` `cp.device_share`);
  so do ``simulate.py`` (`zero.model_state_bytes` for its memory headroom) and
  ``hetero/pipeline.py`` (`zero.optimizer_params` for the offloaded optimizer), which pass
  the stage along. ``offload.py`` reads ``zero3_prefetch_layers`` for its weight buffer.
- `StepModel.stage_segments` reads the two overlap fractions
  (``zero_gather_overlap_fraction``, ``zero_grad_overlap_fraction``) where it lays the
  gathers and reductions against the compute they hide behind (`model.exposed_s`).
- ``recompute.py`` passes ``cp``, ``cp_kv_exchange`` and ``cp_kv_regather`` to
  `memory.activation_bytes_per_layer`, the one activation formula (what a layer keeps for
  its backward, with context parallelism's gathered K, V); `memory.reduce_buffer_bytes` is
  the ZeRO-2/3 buffer formula `zero.reduce_buffer` applies.
- Above the step model the fields are read to validate and print a configuration
  (``config.py``, ``planning/space.py``), to enumerate the search (``planning``,
  ``replanning``: which stages and degrees to try, through `zero.stages_worth_searching` and
  `cp.needs_cp`), to lay out devices (``placement.py``: cp is a mesh axis) and to move
  sharded states between layouts (``replanning/migration.py``). None of them prices a step.

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
