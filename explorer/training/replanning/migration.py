"""Migration between two training plans: the bytes every device sends and the switch time.

When a job changes its `ParallelConfig` (a node lost, a memory cap, a new batch), every
parameter and optimizer state moves from its old layout to its new one. The layout of a
model state on a job is the same for every part of the model (the embedding, each layer,
the head):

- the part sits on the pipeline device ``stage % pp`` of the stage holding it
  (`StagePartition.bounds`, interleaved chunks included);
- inside that pipeline device its ``P`` parameters are one buffer split over ``tp`` and,
  when the ZeRO stage shards that state, over the ``R = dp * cp`` replicas too
  (Megatron-LM's distributed optimizer keeps such a flat, contiguous buffer): the
  ``Layout`` ``[P_(tp, replicas)]`` or ``[P_tp]`` replicated over the replicas.
  Parameters are sharded at ZeRO-3, optimizer states from ZeRO-1 (`terms.zero`).

The shard a device holds is `explorer.sharding.slices.shard_bounds` of that layout (the
function the SPMD executor and the mesh view use), so the migration is exact on this
model: for each piece of the buffer where an old shard and a new shard meet, a device of the
new job that did not already hold it receives it from a surviving old holder (replicas
take turns as senders, so the load spreads), or, when every holder was lost, it is read
back from the last checkpoint (``checkpoint_bytes``, not part of the switch time).

The redistribution planner (`explorer.sharding.redistribute`) turns one layout into another
on one mesh; an old and a new job have different meshes (other device counts and
factorisations), so this module intersects the two jobs' shards directly. On one mesh the two
agree: a ZeRO-0 -> ZeRO-3 change is the planner's ``slice(dp)`` (nothing sent) and ZeRO-3 ->
ZeRO-0 its ``all-gather(dp)``, byte for byte per device (``tests/training/test_replan.py``).

Gradients are not moved (the next step recomputes them). Norm weights, which tensor
parallelism keeps whole, are counted as split like the rest of their layer (<0.1% of a
transformer layer's parameters); experts of a mixture-of-experts layer are treated as
dense parameters of their layer. With tied embeddings a job of several stages keeps a copy
of the embedding in the head; the head is moved at the new job's size from the old head's
holders (the copy's bytes are the same wherever they come from).

Time: each device sends and receives over the link its pair shares (the first level's
inside a first-level group, e.g. NVLink; the slowest higher level otherwise, at its
per-chip bandwidth when every chip moves data at once); the switch takes as long as the
busiest device, plus the highest latency used.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...checks import is_int, is_number
from ...hardware import Cluster
from ...sharding.slices import shard_bounds
from ..config import ParallelConfig
from ..errors import MigrationError
from ..memory import StateBytes
from ..pipeline.partition import StagePartition
from ..step_model.placement import stage_ranks

__all__ = ["Migration", "JobLayout", "plan_migration"]


@dataclass(frozen=True)
class JobLayout:
    """Where a job's states sit: its configuration, stage split and physical devices.

    ``devices[rank]`` is the physical device id of job rank ``rank``; ranks run over the
    step model's mesh ``(pp, dp/ep, ep, cp, tp)`` row-major (tp innermost), or
    ``(dp/ep, pp, ep, cp, tp)`` with ``dp_outermost`` (a job across datacenters): the order
    of `explorer.training.step_model.placement`, which `ranks` reads.
    ``part_params`` are the whole parameters of each part (embedding, layers..., head).
    """

    config: ParallelConfig
    partition: StagePartition
    devices: tuple[int, ...]
    part_params: tuple[float, ...]
    dp_outermost: bool = False

    def __post_init__(self) -> None:
        c = self.config
        if not isinstance(c, ParallelConfig):
            raise MigrationError(
                f"JobLayout: config={c!r}; expected a ParallelConfig (plan.config of a plan)"
            )
        if not isinstance(self.partition, StagePartition):
            raise MigrationError(
                f"JobLayout: partition={self.partition!r}; expected a StagePartition "
                "(plan.sim.partition, or pipeline.partition.uniform_partition(...))"
            )
        for field, values, check in (("devices", self.devices, is_int),
                                     ("part_params", self.part_params, is_number)):  # fmt: skip
            if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not all(
                check(v, minimum=0, numpy=True) for v in values
            ):  # fmt: skip
                raise MigrationError(
                    f"JobLayout: {field}={values!r}; expected a tuple of "
                    + (
                        "physical device ids (ints >= 0)"
                        if field == "devices"
                        else "parameter counts per part (numbers >= 0)"
                    )  # fmt: skip
                )
        object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))
        object.__setattr__(self, "part_params", tuple(float(p) for p in self.part_params))
        if len(self.devices) != c.devices:
            raise MigrationError(
                f"JobLayout: {len(self.devices)} physical devices for {c} which uses "
                f"{c.devices}; give one physical id per rank"
            )
        if len(set(self.devices)) != len(self.devices):
            raise MigrationError("JobLayout: a physical device id appears twice; give each once")
        if len(self.part_params) != self.partition.bounds[-1]:
            raise MigrationError(
                f"JobLayout: {len(self.part_params)} part sizes for a partition of "
                f"{self.partition.bounds[-1]} parts (embedding, layers, head)"
            )

    @property
    def replicas(self) -> int:
        return self.config.dp * self.config.cp

    def part_device(self) -> tuple[int, ...]:
        """The pipeline device of every part."""
        out = []
        bounds, pp = self.partition.bounds, self.config.pp
        for g in range(self.partition.stages):
            out += [g % pp] * (bounds[g + 1] - bounds[g])
        return tuple(out)

    def ranks(self) -> np.ndarray:
        """Physical ids as an array ``[pp, replicas, tp]`` (`placement.stage_ranks`)."""
        ids = np.asarray(self.devices, dtype=np.int64)
        return ids[stage_ranks(self.config, self.dp_outermost)]


@dataclass(frozen=True)
class Migration:
    """What switching from one job layout to another moves, per physical device.

    Attributes:
        devices: the physical ids the arrays below index (every device of either job).
        sent_bytes, received_bytes: per device, all states together.
        by_state: ``(state, bytes moved over the network)`` for parameters and optimizer
            states.
        checkpoint_bytes: bytes whose every old holder is gone (read back from the last
            checkpoint; not in ``time_s``).
        local_bytes: bytes a new rank already held (no transfer).
        time_s: the switch over the links: the busiest device's transfers plus latency.
    """

    devices: tuple[int, ...]
    sent_bytes: tuple[float, ...]
    received_bytes: tuple[float, ...]
    by_state: tuple[tuple[str, float], ...]
    checkpoint_bytes: float
    local_bytes: float
    time_s: float

    @property
    def total_bytes(self) -> float:
        return float(sum(self.sent_bytes))

    @property
    def max_sent_bytes(self) -> float:
        return max(self.sent_bytes, default=0.0)

    def as_dict(self) -> dict[str, object]:
        return {
            "total_bytes": self.total_bytes, "max_sent_bytes": self.max_sent_bytes,
            "by_state": dict(self.by_state), "checkpoint_bytes": self.checkpoint_bytes,
            "local_bytes": self.local_bytes, "time_s": self.time_s,
            "devices_sending": sum(1 for b in self.sent_bytes if b > 0),
        }  # fmt: skip

    def __str__(self) -> str:
        gb = 1e9
        return (
            f"migration: {self.total_bytes / gb:.1f} GB over the network "
            f"({', '.join(f'{k} {v / gb:.1f} GB' for k, v in self.by_state)}), busiest device "
            f"sends {self.max_sent_bytes / gb:.2f} GB, {self.time_s:.2f} s; "
            f"{self.checkpoint_bytes / gb:.1f} GB from the checkpoint, "
            f"{self.local_bytes / gb:.1f} GB already in place"
        )


def plan_migration(
    old: JobLayout, new: JobLayout, cluster: Cluster, lost: tuple[int, ...] = (),
    state: StateBytes | None = None,
) -> Migration:  # fmt: skip
    """The migration from ``old`` to ``new`` when the physical devices ``lost`` are gone.

    >>> from explorer.training.pipeline.partition import uniform_partition
    >>> from explorer.hardware import load
    >>> a = JobLayout(ParallelConfig(dp=2, tp=2), uniform_partition(2, 1), tuple(range(4)),
    ...               (10.0, 100.0, 100.0, 10.0))
    >>> b = JobLayout(ParallelConfig(dp=1, tp=4), uniform_partition(2, 1), tuple(range(4)),
    ...               (10.0, 100.0, 100.0, 10.0))
    >>> m = plan_migration(a, b, load("a100-80g"))
    >>> m.checkpoint_bytes, m.by_state[0]
    (0.0, ('parameters', 220.0))
    """
    for name, job in (("old", old), ("new", new)):
        if not isinstance(job, JobLayout):
            raise MigrationError(f"plan_migration: {name}={job!r}; expected a JobLayout")
    if not isinstance(cluster, Cluster):
        raise MigrationError(
            f"plan_migration: cluster={cluster!r}; expected a Cluster "
            "(explorer.hardware.load('a100-80g'))"
        )
    if isinstance(lost, str | bytes) or not isinstance(lost, Sequence) or not all(
        is_int(d, minimum=0, numpy=True) for d in lost
    ):  # fmt: skip
        raise MigrationError(
            f"plan_migration: lost={lost!r}; expected a tuple of physical device ids (ints >= 0)"
        )
    lost = tuple(int(d) for d in lost)
    if state is not None and not isinstance(state, StateBytes):
        raise MigrationError(f"plan_migration: state={state!r}; expected a StateBytes or None")
    state = state or StateBytes()
    if old.part_params[:-1] != new.part_params[:-1]:
        raise MigrationError(
            "plan_migration: the two jobs hold different parameters per part "
            f"({sum(old.part_params):.4g} vs {sum(new.part_params):.4g}); migrate between "
            "plans of the same model"
        )
    lost_set = set(lost)
    dead = [d for d in new.devices if d in lost_set]
    if dead:
        raise MigrationError(
            f"plan_migration: the new job uses lost device(s) {dead[:4]}; place it on survivors"
        )
    ids = sorted(set(old.devices) | set(new.devices))
    index = {p: i for i, p in enumerate(ids)}
    n = len(ids)
    acc = _Accumulator(n, np.asarray(ids) // cluster.chips_per_node)
    alive = np.array([p not in lost_set for p in ids])
    old_ranks = np.vectorize(index.__getitem__, otypes=[np.int64])(old.ranks())
    new_ranks = np.vectorize(index.__getitem__, otypes=[np.int64])(new.ranks())
    groups = Counter(zip(old.part_device(), new.part_device(), new.part_params, strict=True))
    by_state = []
    for name, per_param, old_sharded, new_sharded in (
        ("parameters", state.weight_bytes, old.config.zero >= 3, new.config.zero >= 3),
        ("optimizer_states", state.optimizer_bytes, old.config.zero >= 1,
         new.config.zero >= 1),
    ):  # fmt: skip
        before = acc.network
        for (d_old, d_new, params), count in sorted(groups.items()):
            size = params * per_param * count
            if size == 0:
                continue
            _move(acc, size, old_ranks[d_old], old_sharded, new_ranks[d_new], new_sharded, alive)
        by_state.append((name, acc.network - before))
    bw0, lat0 = cluster.levels[0].bandwidth_bytes_per_s, cluster.levels[0].latency_s
    upper = cluster.levels[1:] or cluster.levels[:1]
    bw1 = min(lv.bandwidth_bytes_per_s for lv in upper)
    lat1 = max(lv.latency_s for lv in upper)
    per_device = np.maximum.reduce([
        acc.sent_near / bw0, acc.recv_near / bw0, acc.sent_far / bw1, acc.recv_far / bw1,
    ])  # fmt: skip
    busy = float(per_device.max()) if n else 0.0
    latency = (lat1 if acc.sent_far.any() else lat0) if busy > 0 else 0.0
    return Migration(
        devices=tuple(ids),
        sent_bytes=tuple(float(x) for x in acc.sent_near + acc.sent_far),
        received_bytes=tuple(float(x) for x in acc.recv_near + acc.recv_far),
        by_state=tuple(by_state), checkpoint_bytes=acc.checkpoint, local_bytes=acc.local,
        time_s=busy + latency,
    )  # fmt: skip


class _Accumulator:
    """Per-device byte counts, split by link (same first-level group or not)."""

    def __init__(self, n: int, node_of: np.ndarray):
        self.node_of = node_of
        self.sent_near, self.sent_far = np.zeros(n), np.zeros(n)
        self.recv_near, self.recv_far = np.zeros(n), np.zeros(n)
        self.checkpoint = 0.0
        self.local = 0.0
        self.network = 0.0

    def add(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> None:
        near = self.node_of[src] == self.node_of[dst]
        for mask, sent, recv in ((near, self.sent_near, self.recv_near),
                                 (~near, self.sent_far, self.recv_far)):  # fmt: skip
            np.add.at(sent, src[mask], nbytes[mask])
            np.add.at(recv, dst[mask], nbytes[mask])
        self.network += float(nbytes.sum())


def _shards(ranks: np.ndarray, sharded: bool) -> tuple[int, np.ndarray]:
    """(shard count, holders[shard] -> array of device indices holding it)."""
    replicas, tp = ranks.shape
    if sharded:  # shard j = t * R + r, one holder
        return replicas * tp, ranks.T.reshape(-1, 1)
    return tp, ranks.T  # shard t, held by every replica


def _move(
    acc: _Accumulator, size: float, old: np.ndarray, old_sharded: bool,
    new: np.ndarray, new_sharded: bool, alive: np.ndarray,
) -> None:  # fmt: skip
    """Move one buffer of ``size`` bytes from the old pipeline device's ranks ``old``
    ``[replicas, tp]`` to the new one's ``new``."""
    n_old, holders = _shards(old, old_sharded)
    n_new, needers = _shards(new, new_sharded)
    denom = math.lcm(n_old, n_new)
    cuts = sorted(
        {shard_bounds(denom, n_old, j)[0] for j in range(n_old)}
        | {shard_bounds(denom, n_new, j)[0] for j in range(n_new)}
        | {denom}
    )
    lo = np.asarray(cuts[:-1], dtype=np.int64)
    length = (np.asarray(cuts[1:], dtype=np.int64) - lo) / denom * size
    j_old = lo * n_old // denom
    j_new = lo * n_new // denom
    # every (piece, needer) pair; needers of a replicated shard are every replica
    k = needers.shape[1]
    piece = np.repeat(np.arange(lo.size), k)
    dst = needers[j_new].reshape(-1)
    nbytes = np.repeat(length, k)
    src_pool = holders[j_old[piece]]  # [pairs, holders per shard]
    local = (src_pool == dst[:, None]).any(axis=1)
    acc.local += float(nbytes[local].sum())
    piece, dst, nbytes, src_pool = piece[~local], dst[~local], nbytes[~local], src_pool[~local]
    if dst.size == 0:
        return
    ok = alive[src_pool]
    n_ok = ok.sum(axis=1)
    gone = n_ok == 0
    acc.checkpoint += float(nbytes[gone].sum())
    keep = ~gone
    dst, nbytes, src_pool, ok, n_ok = dst[keep], nbytes[keep], src_pool[keep], ok[keep], n_ok[keep]
    if dst.size == 0:
        return
    # the surviving holders take turns: the i-th needer of a piece gets holder i mod alive
    turn = np.arange(dst.size) % n_ok
    rank_among_ok = np.cumsum(ok, axis=1) - 1
    pick = np.argmax((rank_among_ok == turn[:, None]) & ok, axis=1)
    src = src_pool[np.arange(dst.size), pick]
    acc.add(src, dst, nbytes)
