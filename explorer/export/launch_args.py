"""Megatron-LM and DeepSpeed launch arguments for a `ParallelConfig`.

>>> from explorer.training import ParallelConfig
>>> " ".join(megatron_args(ParallelConfig(dp=2, tp=4, pp=2, sp=True, zero=1)))
'--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \
--micro-batch-size 1 --use-distributed-optimizer'
"""

from __future__ import annotations

import shlex

from ..errors import ExplorerError
from ..models import ModelConfig, load
from ..training import ParallelConfig
from ..training.layout import check_layout
from ..training.pipeline import PartitionError, uniform_partition
from ..training.planning.result import TrainingPlan
from .errors import ExportError
from .megatron_split import split_args

__all__ = ["megatron_args", "deepspeed_config", "deepspeed_args", "launch_command"]


def _config(plan) -> ParallelConfig:
    config = getattr(plan, "config", plan)
    if not isinstance(config, ParallelConfig):
        raise ExportError(f"expected a ParallelConfig or a TrainingPlan, got {type(plan).__name__}")
    return config


def _model_args(cfg: ModelConfig, seq: int | None) -> list[str]:
    args = ["--num-layers", str(cfg.num_layers), "--hidden-size", str(cfg.hidden_size),
            "--num-attention-heads", str(cfg.num_heads),
            "--ffn-hidden-size", str(cfg.ffn)]  # fmt: skip
    if cfg.kv_heads != cfg.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(cfg.kv_heads)]
    seq = cfg.max_seq_len if seq is None else seq
    args += ["--seq-length", str(seq), "--max-position-embeddings", str(max(seq, cfg.max_seq_len))]
    if cfg.norm == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if cfg.activation == "swiglu":
        args.append("--swiglu")
    if cfg.position == "rope":
        args += ["--position-embedding-type", "rope"]
    if not cfg.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not cfg.bias:
        args.append("--disable-bias-linear")
    if cfg.is_moe:
        args += ["--num-experts", str(cfg.num_experts), "--moe-router-topk",
                 str(cfg.experts_top_k)]  # fmt: skip
    args += _moe_mla_args(cfg)
    if cfg.dtype == "bf16":
        args.append("--bf16")
    elif cfg.dtype == "fp16":
        args.append("--fp16")
    return args


def _moe_mla_args(cfg: ModelConfig) -> list[str]:
    """Megatron-Core's flags for MLA, q/k norms, q/k/v biases, expert sizes, shared experts,
    dense first layers and multi-token prediction (the ModelConfig fields read from Hugging Face configs)."""
    args: list[str] = []
    if cfg.is_mla:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(cfg.kv_lora_rank),
                 "--qk-head-dim", str(cfg.qk_nope_head_dim), "--qk-pos-emb-head-dim",
                 str(cfg.qk_rope_head_dim), "--v-head-dim", str(cfg.v_head_dim)]  # fmt: skip
        if cfg.q_lora_rank is not None:
            args += ["--q-lora-rank", str(cfg.q_lora_rank)]
    if cfg.qk_norm:
        args.append("--qk-layernorm")
    if cfg.qkv_bias and not cfg.bias:
        args.append("--add-qkv-bias")
    if cfg.moe_intermediate_size is not None:
        args += ["--moe-ffn-hidden-size", str(cfg.moe_ffn)]
    if cfg.num_shared_experts:
        if cfg.shared_expert_gate:
            raise ExportError(
                f"model {cfg.name!r} gates its shared expert (Qwen2-MoE); the Megatron "
                "arguments written here have no such flag, so they would train another model"
            )
        args += ["--moe-shared-expert-intermediate-size", str(cfg.shared_ffn)]
    if cfg.is_moe and cfg.dense_layers:
        args += ["--moe-layer-freq", f"([0]*{cfg.dense_layers}+[1]*{cfg.moe_layers})"]
    if cfg.mtp_layers:
        args += ["--mtp-num-layers", str(cfg.mtp_layers)]
    return args


def _split_args(plan, c: ParallelConfig, cfg: ModelConfig | None, layout: bool) -> list[str]:
    """The layer-split flags (`megatron_split.split_args`) for the plan's stage split: a
    TrainingPlan's own ``sim.partition``; for a bare ParallelConfig with ``model``, the even
    split (`uniform_partition`: earlier stages take the extra layers)."""
    if c.pp == 1:
        return []
    part = getattr(getattr(plan, "sim", None), "partition", None)
    if part is None and cfg is None:
        if c.schedule == "interleaved_1f1b":
            raise ExportError("the interleaved schedule needs model=... (or a TrainingPlan) to "
                              "count layers per virtual stage")  # fmt: skip
        return []  # 1F1B without a layer count: Megatron's default even split
    if part is None:
        try:
            part = uniform_partition(cfg.num_layers, c.stages)
        except PartitionError as e:
            raise ExportError(str(e)) from None
    if cfg is not None and cfg.num_layers != part.num_layers:
        raise ExportError(f"model {cfg.name!r} has {cfg.num_layers} layers but the plan splits "
                          f"{part.num_layers}; pass the model the plan was made for")  # fmt: skip
    if part.stages != c.stages:
        raise ExportError(f"the plan's split has {part.stages} stages, its config pp {c.pp} x "
                          f"v {c.virtual_stages}; export the plan whose config made it")  # fmt: skip
    ref = cfg if cfg is not None else getattr(plan, "model_config", None)
    mtp = getattr(ref, "mtp_layers", 0) or 0  # the layout places MTP layers before the loss
    counts = part.layer_counts()
    return list(split_args(counts, c.pp, c.virtual_stages, part.num_layers, mtp_layers=mtp,
                           layout=layout, interleaved=c.schedule == "interleaved_1f1b"))  # fmt: skip


def _same_job(plan, cfg: ModelConfig | None, seq: int | None,
              global_batch: int | None) -> tuple[int | None, int | None]:  # fmt: skip
    """A TrainingPlan's own sequence length and batch when none is given; one given that is
    not the plan's (or another model) is refused: the arguments would launch another job."""
    if not isinstance(plan, TrainingPlan):
        return seq, global_batch
    if cfg is not None and cfg.name != plan.model:
        raise ExportError(
            f"model={cfg.name!r} is not the plan's model {plan.model!r}; leave model out "
            "(the plan's is used) or plan that model"
        )
    for name, given, own in (("seq", seq, plan.seq), ("global_batch", global_batch,
                                                       plan.global_batch)):  # fmt: skip
        if given is not None and given != own:
            raise ExportError(
                f"{name}={given!r} is not the plan's {own}; the plan's layout was chosen for "
                f"{name}={own}: leave {name} out, or plan the job at {name}={given}"
            )
    return plan.seq, (plan.global_batch if global_batch is None else global_batch)


def _check_layout(plan, c: ParallelConfig, cfg: ModelConfig | None, seq: int | None) -> None:
    """What the step model refuses for this model is refused here too (`check_layout`)."""
    if cfg is None and isinstance(plan, TrainingPlan):
        cfg = plan.model_config or load(plan.model)
    if cfg is None:
        return
    try:
        check_layout(cfg, c, cfg.max_seq_len if seq is None else seq)
    except ExplorerError as e:
        raise ExportError(f"megatron_args: {e}") from None


def megatron_args(plan, *, model: ModelConfig | str | None = None,
                  global_batch: int | None = None, seq: int | None = None,
                  layout: bool = True) -> tuple[str, ...]:  # fmt: skip
    """Megatron-LM ``pretrain_gpt.py`` arguments for a ParallelConfig (or TrainingPlan).

    ``model`` adds the architecture flags; ``global_batch`` adds ``--global-batch-size``.
    ZeRO 1 is Megatron's distributed optimizer; ZeRO 2 and 3 are Megatron-FSDP's
    ``optim_grads`` and ``optim_grads_params`` sharding. Megatron has no GPipe schedule.
    Expert layouts, folded or not, are ``--expert-model-parallel-size`` and (when ``etp``
    differs from ``tp``) ``--expert-tensor-parallel-size``: Megatron-Core's MoE parallel
    folding derives the expert data parallelism from them.

    The layer split: a TrainingPlan's own stage split (``plan.sim.partition``, even or
    uneven, 1F1B or interleaved), or with a bare ParallelConfig and ``model`` the even
    split, written with the fewest Megatron flags that reproduce it
    (`explorer.export.megatron_split`: even, ``--account-for-embedding/loss-in-pipeline-
    split``, ``--decoder-first/last-pipeline-num-layers``, else
    ``--pipeline-model-parallel-layout``; each checked against a mimic of Megatron-Core's
    rule). ``layout=False`` targets a Megatron-LM without the layout flag: a split the other
    flags cannot express then raises `ExportError` naming the closest one they can.
    """
    c = _config(plan)
    cfg = load(model) if model is not None else None
    seq, global_batch = _same_job(plan, cfg, seq, global_batch)
    _check_layout(plan, c, cfg, seq)
    if c.schedule == "gpipe" and c.pp > 1:
        raise ExportError(
            "Megatron-LM has no GPipe schedule (it runs 1F1B); use schedule='1f1b' or "
            "'interleaved_1f1b'"
        )
    args = ["--tensor-model-parallel-size", str(c.tp), "--pipeline-model-parallel-size", str(c.pp)]
    if c.sp:
        args.append("--sequence-parallel")
    if c.ep > 1:
        args += ["--expert-model-parallel-size", str(c.ep)]
    if c.etp is not None:  # None: Megatron-Core's default, etp = tp
        args += ["--expert-tensor-parallel-size", str(c.etp)]
    if c.cp > 1:  # Megatron-LM's names: allgather (Llama 3's exchange) or p2p (ring)
        kind = "allgather" if c.cp_kv_exchange == "all_gather" else "p2p"
        args += ["--context-parallel-size", str(c.cp), "--cp-comm-type", kind]
    args += _split_args(plan, c, cfg, layout)
    args += ["--micro-batch-size", str(c.microbatch_size)]
    if global_batch is not None:
        c.microbatches(global_batch)  # raises when it does not divide
        args += ["--global-batch-size", str(global_batch)]
    if c.zero == 1:
        args.append("--use-distributed-optimizer")
    elif c.zero in (2, 3):
        strategy = "optim_grads" if c.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
                 "--use-distributed-optimizer"]  # fmt: skip
    if c.dp_replicate > 1:  # HSDP: ZeRO within dp / r ranks, the r copies all-reduce
        # Megatron-Core's distributed-optimizer instances; Megatron-FSDP takes the same
        # flag as its HSDP switch (mcore_fsdp_adapter.py _init_dist_index at 599fe927:
        # enable_hsdp = num_distributed_optimizer_instances > 1, outer groups outermost)
        args += ["--num-distributed-optimizer-instances", str(c.dp_replicate)]
    if c.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif c.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                 "--recompute-num-layers", "1"]  # fmt: skip
    elif c.recompute == "per_layer":
        if c.recompute_num_layers is None:
            raise ExportError("recompute='per_layer' needs recompute_num_layers (the plan's "
                              "choice) to export; take it from TrainingPlan.config")  # fmt: skip
        args += ["--recompute-granularity", "full", "--recompute-method", "block",
                 "--recompute-num-layers", str(c.recompute_num_layers)]  # fmt: skip
    if cfg is not None:
        args += _model_args(cfg, seq)
    return tuple(args)


def _deepspeed_experts(c: ParallelConfig) -> None:
    """Raise for an expert layout DeepSpeed-MoE cannot build: its expert-parallel groups are
    carved out of the data-parallel ranks (``deepspeed/utils/groups.py``: ep divides the
    data-parallel size) and its experts are split over the model-parallel ranks (etp = tp)."""
    if c.experts_folded:
        raise ExportError(
            f"{c} folds its experts (ep={c.ep}, etp={c.expert_tp} over tp={c.tp} x cp={c.cp} x "
            f"dp={c.dp}), which DeepSpeed-MoE cannot express: it carves ep out of the "
            "data-parallel ranks (ep dividing dp) and splits experts over tp; use an ep that "
            "divides dp with etp=None, or export with megatron_args (Megatron-Core folds)"
        )


def _deepspeed_hsdp(c: ParallelConfig) -> None:
    """Raise for hybrid sharding: DeepSpeed's ZeRO shards every state over all of dp (its
    ZeRO++ hpZ keeps only a secondary weight copy per node, not `dp_shard`'s layout)."""
    if c.dp_replicate > 1:
        raise ExportError(
            f"{c} shards ZeRO over dp_shard={c.dp_shard} of dp={c.dp} (HSDP), which "
            "DeepSpeed's ZeRO cannot express; set dp_shard=None, or export with "
            "megatron_args (--num-distributed-optimizer-instances)"
        )


def deepspeed_config(plan, *, global_batch: int, dtype: str = "bf16") -> dict[str, object]:
    """The DeepSpeed JSON config (batch sizes, ZeRO stage, precision, checkpointing)."""
    c = _config(plan)
    _deepspeed_experts(c)
    _deepspeed_hsdp(c)
    m = c.microbatches(global_batch)
    if c.zero >= 2 and c.pp > 1:
        raise ExportError(
            f"DeepSpeed's pipeline engine supports ZeRO 0 or 1, not {c.zero}; use zero=1 or pp=1"
        )
    out: dict[str, object] = {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": c.microbatch_size,
        "gradient_accumulation_steps": m,
        "zero_optimization": {"stage": c.zero},
    }
    if dtype in ("bf16", "fp16"):
        out[dtype] = {"enabled": True}
    if c.recompute != "none":
        ckpt: dict[str, object] = {"partition_activations": c.tp > 1,
                                   "contiguous_memory_optimization": False}  # fmt: skip
        if c.recompute_num_layers is not None:
            ckpt["number_checkpoints"] = c.recompute_num_layers
        out["activation_checkpointing"] = ckpt
    return out


def deepspeed_args(plan, *, config_path: str = "ds_config.json") -> tuple[str, ...]:
    """Megatron-DeepSpeed arguments: the parallel degrees, ZeRO stage and the config file."""
    c = _config(plan)
    _deepspeed_experts(c)
    _deepspeed_hsdp(c)
    args = ["--tensor-model-parallel-size", str(c.tp), "--pipeline-model-parallel-size", str(c.pp)]
    if c.pp == 1:
        args.append("--no-pipeline-parallel")
    if c.sp:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(c.microbatch_size), "--zero-stage", str(c.zero),
             "--deepspeed", "--deepspeed_config", config_path]  # fmt: skip
    if c.recompute != "none":
        args += ["--deepspeed-activation-checkpointing", "--checkpoint-activations"]
    return tuple(args)


def launch_command(plan, *, nodes: int = 1, script: str = "pretrain_gpt.py", **kwargs) -> str:
    """A ``torchrun`` line for Megatron-LM on ``nodes`` hosts (devices split evenly)."""
    c = _config(plan)
    if c.devices % nodes:
        raise ExportError(f"{c.devices} devices do not split evenly over {nodes} nodes")
    head = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={c.devices // nodes}", script]
    return shlex.join(head + list(megatron_args(plan, **kwargs)))
