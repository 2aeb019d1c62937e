"""``ParallelConfig``: how one training step is split over devices (DP x TP x PP, ZeRO, ...)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

from ..checks import is_int
from .errors import ParallelConfigError

__all__ = [
    "ParallelConfig",
    "ParallelConfigError",
    "ScheduleKind",
    "SCHEDULES",
    "RecomputePolicy",
    "RECOMPUTE_POLICIES",
    "ZeroStage",
    "ZERO_STAGES",
    "KvExchange",
    "KV_EXCHANGES",
]

ScheduleKind = Literal["gpipe", "1f1b", "interleaved_1f1b"]
SCHEDULES: tuple[str, ...] = get_args(ScheduleKind)
RecomputePolicy = Literal["none", "selective", "full", "per_layer"]
RECOMPUTE_POLICIES: tuple[str, ...] = get_args(RecomputePolicy)
ZeroStage = Literal[0, 1, 2, 3]
ZERO_STAGES: tuple[int, ...] = get_args(ZeroStage)
# How context-parallel ranks exchange keys and values (``step_model/terms/cp.py``): Llama 3's all-gather
# of K and V before attention (reduce-scatter of dK, dV after), or a ring of send/recv steps
# overlapped with the attention of the chunk already held (ring attention).
KvExchange = Literal["all_gather", "ring"]
KV_EXCHANGES: tuple[str, ...] = get_args(KvExchange)


@dataclass(frozen=True)
class ParallelConfig:
    """One point of the training-parallelism space.

    Args:
        dp, tp, pp: data-, tensor- and pipeline-parallel degrees; devices = dp * tp * pp * cp.
        sp: sequence parallelism (Korthikanti et al. 2022): the activations that tensor
            parallelism leaves replicated (norms, dropout) are split over ``tp`` too.
        ep: expert parallelism for mixture-of-experts models: the experts split over ``ep``
            devices (``ep`` divides the expert count). The expert layers lay the
            ``tp * cp * dp`` devices of a pipeline stage out on their own mesh, ``etp x ep x
            edp`` (Megatron-Core's MoE parallel folding, Liu et al. 2025), so ``ep`` need
            not divide ``dp``: ``etp * ep`` divides ``tp * cp * dp`` (`edp`).
        microbatch_size: sequences per microbatch on one pipeline.
        num_microbatches: microbatches per step per pipeline; None derives it from the
            global batch (``global_batch / (dp * microbatch_size)``).
        schedule: ``gpipe`` (all forwards, then all backwards), ``1f1b`` (PipeDream-flush)
            or ``interleaved_1f1b`` (Megatron-LM: ``virtual_stages`` chunks per device).
        virtual_stages: model chunks per device, v (only ``interleaved_1f1b`` takes v > 1;
            None: 2 for ``interleaved_1f1b``, else 1).
        zero: ZeRO stage: 0 none; 1 optimizer states sharded over dp (MindSpore's
            "optimizer parallel"); 2 also gradients; 3 also parameters (gathered per use).
        recompute: ``none``; ``selective`` (recompute the attention core only); ``full``
            (keep each layer's input only); ``per_layer`` (full recompute of
            ``recompute_num_layers`` layers per stage, selective for the others; None picks
            the fewest that fit in memory).
        recompute_num_layers: layers per stage with full recomputation (``per_layer``).
        cp: context parallelism (Llama 3, section 3.3.2): every sequence is split over
            ``cp`` devices (in ``2 cp`` chunks, so causal attention is balanced); each holds
            ``seq / cp`` positions of every activation and the same weights, so gradients
            are reduced over ``dp * cp`` devices (`weight_replicas`).
        cp_kv_exchange: how the ``cp`` ranks get the keys and values of the other chunks:
            ``all_gather`` (Llama 3: all-gather K, V per layer forward, reduce-scatter
            dK, dV backward; exposed) or ``ring`` (cp - 1 send/recv steps, each overlapped
            with the attention of the chunk in hand).
        etp: expert tensor parallelism: each expert's weights split over ``etp`` devices
            (Megatron-Core's ``--expert-tensor-parallel-size``). None, the default, follows
            ``tp`` as Megatron-Core's does; an ``etp`` equal to ``tp`` is stored as None.
        stage_layers: layers per pipeline stage, given (``plan_training``'s `StageLayers`
            constraint; one count per stage, one chunk per device); None: the step model
            chooses the split (`simulate`).
        dp_shard: hybrid sharded data parallelism (HSDP): the data-parallel ranks ZeRO
            shards over, a divisor of ``dp`` (torchtitan's ``data_parallel_shard_degree``,
            MaxText's ``ici_fsdp_parallelism``); the ``dp_replicate = dp / dp_shard`` groups
            hold the same shards and all-reduce their sharded gradients once a step
            (torchtitan's ``data_parallel_replicate_degree``, MaxText's
            ``dcn_data_parallelism``). None, the default, shards over all of ``dp`` (plain
            ZeRO / FSDP); a ``dp_shard`` equal to ``dp`` is stored as None. Needs zero >= 1.

    An ``ep`` that divides ``dp`` with ``etp = tp`` is the unfolded layout (the experts
    split over ``ep`` of the data-parallel replicas, `experts_folded` False); any other
    ``ep``, ``etp`` is folded (`explorer.training.step_model.placement` places both).

    >>> ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1).edp  # Qwen3-235B on 256 GPUs
    1
    >>> ParallelConfig(dp=8, tp=8, pp=16, schedule="interleaved_1f1b", virtual_stages=2).devices
    1024
    >>> print(ParallelConfig(dp=2, tp=4, recompute="full"))
    dp2 x tp4 x pp1, mb1, 1f1b, zero0, recompute full
    >>> hsdp = ParallelConfig(dp=512, zero=3, dp_shard=128)  # MaxText FSDP 128 x DP 4
    >>> hsdp.dp_replicate, hsdp.shard_replicas, str(hsdp)
    (4, 128, 'dp512 hsdp128 x tp1 x pp1, mb1, 1f1b, zero3, recompute none')
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    ep: int = 1
    microbatch_size: int = 1
    num_microbatches: int | None = None
    schedule: ScheduleKind = "1f1b"
    virtual_stages: int | None = None
    zero: ZeroStage = 0
    recompute: RecomputePolicy = "none"
    recompute_num_layers: int | None = None
    cp: int = 1
    cp_kv_exchange: KvExchange = "all_gather"
    etp: int | None = None
    stage_layers: tuple[int, ...] | None = None
    dp_shard: int | None = None

    def __post_init__(self) -> None:
        if self.virtual_stages is None:  # Megatron-LM's usual two chunks when interleaving
            v = 2 if self.schedule == "interleaved_1f1b" else 1
            object.__setattr__(self, "virtual_stages", v)
        for k in ("dp", "tp", "pp", "ep", "microbatch_size", "virtual_stages", "cp"):
            _check_int(k, getattr(self, k))
        if self.num_microbatches is not None:
            _check_int("num_microbatches", self.num_microbatches)
        if self.etp is not None:
            _check_int("etp", self.etp)
            if self.etp == self.tp:  # Megatron-Core's default: one spelling per layout
                object.__setattr__(self, "etp", None)
        if self.schedule not in SCHEDULES:
            raise ParallelConfigError(
                f"ParallelConfig.schedule={self.schedule!r} is unknown; expected one of "
                f"{', '.join(repr(s) for s in SCHEDULES)}"
            )
        if self.recompute not in RECOMPUTE_POLICIES:
            raise ParallelConfigError(
                f"ParallelConfig.recompute={self.recompute!r} is unknown; expected one of "
                f"{', '.join(repr(s) for s in RECOMPUTE_POLICIES)}"
            )
        if self.cp_kv_exchange not in KV_EXCHANGES:
            raise ParallelConfigError(
                f"ParallelConfig.cp_kv_exchange={self.cp_kv_exchange!r} is unknown; expected "
                f"one of {', '.join(repr(s) for s in KV_EXCHANGES)}"
            )
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise ParallelConfigError(
                f"ParallelConfig.zero={self.zero!r}; expected a ZeRO stage 0, 1, 2 or 3"
            )
        if self.virtual_stages > 1 and self.schedule != "interleaved_1f1b":
            raise ParallelConfigError(
                f"virtual_stages={self.virtual_stages} needs schedule='interleaved_1f1b' "
                f"(got {self.schedule!r}); set virtual_stages=1 or change the schedule"
            )
        if self.schedule == "interleaved_1f1b" and self.pp == 1:
            raise ParallelConfigError(
                "schedule='interleaved_1f1b' with pp=1 has nothing to interleave; "
                "use pp > 1 or schedule='1f1b'"
            )
        if self.sp and self.tp == 1:
            raise ParallelConfigError(
                "sp=True splits the sequence over the tensor-parallel group, but tp=1; "
                "set tp > 1 or sp=False"
            )
        if self.cp_kv_exchange == "ring" and self.cp == 1:
            raise ParallelConfigError(
                "cp_kv_exchange='ring' passes key/value chunks between context-parallel "
                "ranks, but cp=1; set cp > 1 or cp_kv_exchange='all_gather'"
            )
        _check_fold(self)
        if self.dp_shard is not None:
            _check_dp_shard(self)
        if self.stage_layers is not None:
            _check_stage_layers(self)
        if self.recompute_num_layers is not None:
            if self.recompute != "per_layer":
                raise ParallelConfigError(
                    f"recompute_num_layers={self.recompute_num_layers} needs "
                    f"recompute='per_layer' (got {self.recompute!r})"
                )
            if not is_int(self.recompute_num_layers, minimum=0, numpy=True):
                raise ParallelConfigError(
                    f"recompute_num_layers={self.recompute_num_layers!r}; expected an int >= 0"
                )

    @property
    def devices(self) -> int:
        """Devices of the job: ``dp * tp * pp * cp``."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def weight_replicas(self) -> int:
        """Devices holding the same weights, over which gradients are reduced and ZeRO
        shards: ``dp * cp`` (context-parallel ranks hold the same weights).

        >>> ParallelConfig(dp=8, cp=16).weight_replicas
        128
        """
        return self.dp * self.cp

    @property
    def shard_degree(self) -> int:
        """Data-parallel ranks ZeRO shards over: ``dp_shard``, or ``dp`` when None."""
        return self.dp if self.dp_shard is None else self.dp_shard

    @property
    def dp_replicate(self) -> int:
        """Replicas of each ZeRO shard group (HSDP): ``dp / dp_shard``; 1 without HSDP."""
        return self.dp // self.shard_degree

    @property
    def shard_replicas(self) -> int:
        """Devices ZeRO shards the model states over: ``dp_shard * cp`` (`weight_replicas`
        without HSDP); gradients are still reduced over all ``weight_replicas``.

        >>> ParallelConfig(dp=8, cp=2, zero=3, dp_shard=4).shard_replicas
        8
        """
        return self.shard_degree * self.cp

    @property
    def expert_tp(self) -> int:
        """Devices each expert's weights are split over: ``etp``, or ``tp`` when None."""
        return self.tp if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert data parallelism: copies of each expert shard in a pipeline stage,
        ``tp * cp * dp / (etp * ep)``; the experts' gradients are reduced over them.

        >>> ParallelConfig(dp=8, tp=2, ep=4).edp, ParallelConfig(dp=8, tp=2, ep=4, etp=1).edp
        (2, 4)
        """
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def experts_folded(self) -> bool:
        """Whether the expert layers need their own mesh: ``ep`` does not divide ``dp`` or
        ``etp`` differs from ``tp``. Unfolded, the experts split over ``ep`` of the
        data-parallel replicas and ``tp`` (the layout before folding).

        >>> ParallelConfig(dp=4, ep=4).experts_folded
        False
        >>> ParallelConfig(dp=2, tp=2, ep=4, etp=1).experts_folded  # ep over tp x dp
        True
        """
        return self.dp % self.ep != 0 or self.expert_tp != self.tp

    @property
    def stages(self) -> int:
        """Model chunks in the whole pipeline: ``pp * virtual_stages``."""
        return self.pp * self.virtual_stages

    def microbatches(self, global_batch: int) -> int:
        """Microbatches per pipeline for ``global_batch``; raises when it does not divide.

        >>> ParallelConfig(dp=4, microbatch_size=2).microbatches(64)
        8
        """
        _check_int("global_batch", global_batch)
        per_replica, rest = divmod(global_batch, self.dp)
        if rest:
            raise ParallelConfigError(
                f"global batch {global_batch} is not divisible by dp={self.dp}; use a batch "
                f"that is a multiple of {self.dp} or another dp"
            )
        m, rest = divmod(per_replica, self.microbatch_size)
        if rest:
            raise ParallelConfigError(
                f"the {per_replica} sequences per data-parallel replica (global batch "
                f"{global_batch} / dp {self.dp}) are not divisible by microbatch_size="
                f"{self.microbatch_size}; choose a microbatch size that divides {per_replica}"
            )
        if self.num_microbatches is not None and self.num_microbatches != m:
            raise ParallelConfigError(
                f"num_microbatches={self.num_microbatches} but global batch {global_batch} = "
                f"dp {self.dp} x microbatch_size {self.microbatch_size} x {m}; "
                f"set num_microbatches={m} or None"
            )
        if self.schedule == "interleaved_1f1b" and m % self.pp:
            raise ParallelConfigError(
                f"interleaved 1F1B needs the microbatch count ({m}) to be a multiple of "
                f"pp={self.pp} (Megatron-LM's rule); change the batch, the microbatch size "
                "or use schedule='1f1b'"
            )
        return m

    def replace(self, **changes) -> ParallelConfig:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        extra = ""
        if self.sp:
            extra += " +sp"
        if self.ep > 1:
            extra += f" ep{self.ep}"
        if self.etp is not None:
            extra += f" etp{self.etp}"
        if self.cp > 1:
            ring = " ring" if self.cp_kv_exchange == "ring" else ""
            extra = f" x cp{self.cp}{ring}{extra}"
        hsdp = "" if self.dp_shard is None else f" hsdp{self.dp_shard}"
        sched = self.schedule + (f"(v{self.virtual_stages})" if self.virtual_stages > 1 else "")
        rec = self.recompute
        if self.recompute_num_layers is not None:
            rec += f"({self.recompute_num_layers})"
        split = (
            "" if self.stage_layers is None else f", layers {'/'.join(map(str, self.stage_layers))}"
        )
        return (
            f"dp{self.dp}{hsdp} x tp{self.tp} x pp{self.pp}{extra}, mb{self.microbatch_size}, "
            f"{sched}, zero{self.zero}, recompute {rec}{split}"
        )


def _check_dp_shard(par: ParallelConfig) -> None:
    """``dp_shard``: an int that divides ``dp``, with a ZeRO stage to shard, and (with
    experts carved out of dp) a multiple of ``ep``; equal to ``dp`` it is stored as None."""
    n = par.dp_shard
    if not is_int(n, minimum=1):
        raise ParallelConfigError(f"dp_shard={n!r}; expected an int >= 1 that divides dp")
    if par.dp % n:
        raise ParallelConfigError(
            f"dp_shard={n} does not divide dp={par.dp}; HSDP splits the data-parallel ranks "
            f"into dp / dp_shard replicas of one shard group, so choose dp_shard among the "
            f"divisors of {par.dp}"
        )
    if n == par.dp:  # plain ZeRO / FSDP: one spelling per layout
        object.__setattr__(par, "dp_shard", None)
        return
    if par.zero == 0:
        raise ParallelConfigError(
            f"dp_shard={n} with zero=0: without ZeRO nothing is sharded over the dp_shard "
            "group; set zero to 1, 2 or 3 (zero=3 is FSDP/HSDP) or leave dp_shard=None"
        )
    if par.ep > 1 and not par.experts_folded and n % par.ep:
        raise ParallelConfigError(
            f"dp_shard={n} is not a multiple of ep={par.ep}: the experts are split over ep of "
            "the data-parallel ranks, inside the shard group; choose dp_shard among the "
            f"multiples of {par.ep} that divide dp={par.dp}"
        )


def _check_stage_layers(par: ParallelConfig) -> None:
    """``stage_layers``: one count >= 0 per pipeline stage, one chunk per device."""
    layers = par.stage_layers
    if isinstance(layers, list):
        layers = tuple(layers)
        object.__setattr__(par, "stage_layers", layers)
    if (not isinstance(layers, tuple) or not all(is_int(n, minimum=0, numpy=True) for n in layers)
            or sum(layers) < 1):  # fmt: skip
        raise ParallelConfigError(
            f"stage_layers={par.stage_layers!r}; expected a tuple of layer counts, one per "
            "pipeline stage, e.g. (24, 24, 24, 24)"
        )
    if len(layers) != par.pp or par.virtual_stages != 1:
        raise ParallelConfigError(
            f"stage_layers={layers} gives {len(layers)} stages, but pp={par.pp} x "
            f"virtual_stages={par.virtual_stages}; give one count per pipeline stage with one "
            "chunk per device (virtual_stages=1)"
        )


def _check_fold(par: ParallelConfig) -> None:
    """Raise unless the expert mesh ``etp x ep x edp`` covers the ``tp * cp * dp`` devices
    of a pipeline stage (Megatron-Core: ``world % (etp * ep * pp) == 0``)."""
    stage, etp, ep = par.tp * par.cp * par.dp, par.expert_tp, par.ep
    if stage % (etp * ep) == 0:
        return
    where = (f"the {stage} devices of a pipeline stage (tp={par.tp} x cp={par.cp} x "
             f"dp={par.dp})")  # fmt: skip
    if stage % etp:
        raise ParallelConfigError(
            f"etp={etp} does not divide {where}; the expert layers split each expert over etp "
            f"of them, so choose etp among the divisors of {stage}"
        )
    fix = f"choose ep among the divisors of {stage // etp} (with etp={etp})"
    if stage % ep == 0:  # this ep folds with a smaller etp
        rest = stage // ep
        fix += f", or set etp={rest}" if rest == 1 else f", or etp among the divisors of {rest}"
    raise ParallelConfigError(
        f"etp x ep = {etp} x ep={ep} = {etp * ep} does not divide {where}; the expert layers "
        f"fold etp x ep x edp over those devices (Megatron-Core's MoE parallel folding), so "
        f"{fix}"
    )


def _check_int(name: str, v: object) -> None:
    if not is_int(v, minimum=1):
        raise ParallelConfigError(f"{name}={v!r}; expected an int >= 1")
