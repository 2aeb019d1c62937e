"""``TrainingPlan``: what `plan_training` returns (the chosen configuration, its simulated
step, the alternatives and why each lost), and the links from a plan to the operator-level
views (`stage_of_scope`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ...hardware import Cluster, Mesh, resolve
from ...ir import Graph
from ...models import ModelConfig, build, load
from ...search.planner import search
from ..config import ParallelConfig
from ..errors import TrainingPlanError
from ..params import TrainingParams
from ..simulate import SimResult
from .pareto import ParetoFront
from .robustness import Robustness, robustness, scanned
from .why_not import WhyNot, why_not

__all__ = ["Candidate", "TrainingPlan", "stage_of_scope"]


@dataclass(frozen=True)
class Candidate:
    """A configuration that lost, and why.

    ``reason`` is "slower by X% (+Y s): where" or "over memory by Z GiB".
    """

    config: ParallelConfig
    step_time_s: float
    tflops_per_device: float
    memory_bytes: float
    fits: bool
    simulated: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "config": self.config.as_dict(), "config_text": str(self.config),
            "step_time_s": self.step_time_s, "tflops_per_device": self.tflops_per_device,
            "memory_bytes": self.memory_bytes, "fits": self.fits,
            "simulated": self.simulated, "reason": self.reason,
        }  # fmt: skip

    def __str__(self) -> str:
        return f"{self.config}: {self.reason}"


def _band_lines(s: SimResult) -> list[str]:
    """Where a measured step and peak memory are expected (the SimResult's bands)."""
    out = []
    if s.band is not None:
        lo, hi = s.band.around(s.step_time_s)
        out.append(f"  expected measured step {lo:.3f}-{hi:.3f} s: x{s.band.low:.2f}-"
                   f"x{s.band.high:.2f} ({s.band.basis})")  # fmt: skip
    if s.memory_band is not None:
        lo, hi = s.memory_band.around(s.memory.total)
        out.append(f"  expected measured peak memory {lo / 2**30:.1f}-{hi / 2**30:.1f} GiB: "
                   f"x{s.memory_band.low:.2f}-x{s.memory_band.high:.2f} "
                   f"({s.memory_band.basis})")  # fmt: skip
    return out


@dataclass(frozen=True)
class TrainingPlan:
    """The result of `plan_training`.

    Attributes:
        config: the chosen ParallelConfig; ``sim``: its simulated step (SimResult).
        alternatives: the next best that fit, ranked, each with why it lost.
        over_memory: the fastest configurations that did not fit, with by how much.
        searched: estimates made (a configuration walking the recompute ladder makes one
            per rung); ``search_time_s``: wall time of the search.
        pruned: configurations never estimated: their step-time floor
            (`planning.bound`) was above the step times the plan keeps, so they could not
            change it (`planning.bounded`); 0 when every one was estimated.
        stopped_early: None, or where ``time_limit_s`` stopped the search (the plan is then
            the best of the configurations estimated by then).
        model_config: the ModelConfig planned (not compared, not serialised; lets
            ``sharding_plan`` rebuild the graph of a config that is not in the registry).
        pareto: with ``plan_training(..., objectives=...)``, the `ParetoFront` of the fitting
            configurations (``config`` is its fastest point); None otherwise.
    """

    model: str
    hardware: str
    devices: int
    global_batch: int
    seq: int
    config: ParallelConfig
    sim: SimResult
    alternatives: tuple[Candidate, ...]
    over_memory: tuple[Candidate, ...]
    searched: int
    search_time_s: float = field(compare=False, default=0.0)
    pruned: int = field(compare=False, default=0)
    model_config: ModelConfig | None = field(compare=False, default=None, repr=False)
    stopped_early: str | None = field(compare=False, default=None)
    pareto: ParetoFront | None = field(compare=False, default=None, repr=False)
    # host offload (`explorer.training.offload`): set when nothing fits on the devices alone
    offload: object | None = field(compare=False, default=None, repr=False)
    # the cost model and cluster the plan was made with (diff, why_not and robustness
    # simulate other configurations with them); None: the plan's stack and hardware name
    params: TrainingParams | None = field(compare=False, default=None, repr=False)
    cluster: Cluster | None = field(compare=False, default=None, repr=False)
    # the constraints the plan honours (`planning.constraints`: Bound, Fix, Within, ...)
    constraints: tuple = field(compare=False, default=())

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "hardware": self.hardware, "devices": self.devices,
            "global_batch": self.global_batch, "seq": self.seq,
            "config": self.config.as_dict(), "config_text": str(self.config),
            "sim": self.sim.as_dict(),
            "alternatives": [a.as_dict() for a in self.alternatives],
            "over_memory": [a.as_dict() for a in self.over_memory],
            "searched": self.searched, "pruned": self.pruned,
            "search_time_s": self.search_time_s,
            **({"pareto": self.pareto.as_dict()} if self.pareto is not None else {}),
            **({"constraints": [str(c) for c in self.constraints]} if self.constraints else {}),
        }  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def report(self, robust: bool | None = None) -> str:
        """The chosen plan, the alternatives, the memory breakdown and the robustness of
        the choice, as text.

        ``robust``: True runs `robustness` (it simulates the alternatives again at ~40 knob
        factors: ~5 s for GPT-3 175B on 1024 GPUs, ~1 min for DeepSeek-V3 on 2048); None
        (default) shows the scan if ``plan.robustness()`` ran already, else says how to
        run it; False leaves the section out."""
        s = self.sim
        lines = [
            f"{self.model} on {self.devices} x {self.hardware}, global batch "
            f"{self.global_batch}, sequence {self.seq}",
            f"chosen: {self.config}",
            f"  step {s.step_time_s:.3f} s, {s.tokens_per_s:,.0f} tokens/s, "
            f"{s.tflops_per_device:.1f} TFLOP/s per device (MFU {s.mfu:.1%}), "
            f"bubble {s.bubble_fraction:.1%}",
            *_band_lines(s),
            f"  stages: {s.partition} ({s.partition_choice})",
            f"  layer strategies (searched): {s.strategies}",
            *(
                [f"constraints honoured: {', '.join(map(str, self.constraints))}"]
                if self.constraints
                else []
            ),
            f"alternatives ({self.searched} estimates"
            + (
                f", {self.pruned} configurations skipped by their step-time floor"
                if self.pruned
                else ""
            )
            + f" in {self.search_time_s:.2f} s):",
        ]
        lines += [f"  {a}" for a in self.alternatives] or ["  none"]
        if self.over_memory:
            lines.append("faster but over memory:")
            lines += [f"  {a}" for a in self.over_memory]
        if self.offload is not None:
            lines.append(f"  {self.offload}")
        lines.append(s.memory.table(s.memory_cap_bytes))
        if self.pareto is not None:
            lines.append(str(self.pareto) + " (plan.pareto.table() lists the front)")
        if robust is not False and self.offload is None and self.alternatives:
            done = self.robustness() if robust else scanned(self)
            lines.append(done.text() if done is not None else
                         "robustness: not scanned (plan.robustness() or report(robust=True) "
                         "re-simulates the alternatives with each knob moved)")  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        early = f" [{self.stopped_early}]" if self.stopped_early else ""
        return f"TrainingPlan({self.model}, {self.devices} devices): {self.sim}{early}"

    # --- explaining: why not another configuration ---------------------------------------
    def why_not(self, config: object) -> WhyNot:
        """Why this plan is not ``config`` (a ParallelConfig, a dict of its fields, or text
        such as ``"dp16 tp8"`` changing the chosen configuration in the fields it names):
        the term-by-term difference, the memory row that makes it not fit, or the rule it
        breaks (`explorer.training.planning.why_not`).

        >>> import explorer as ex
        >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
        >>> plan.why_not("dp8 tp1").verdict
        'chosen'
        """
        return why_not(self, config)

    def robustness(self, k: int = 5, knobs: tuple[str, ...] | None = None) -> Robustness:
        """How far each efficiency, bandwidth and overlap knob can move (one at a time, and
        jointly within the prediction band) before one of the top ``k`` alternatives is
        faster; verdict ``robust`` or ``fragile`` (`explorer.training.planning.robustness`).
        """
        return robustness(self, k, knobs)

    # --- links to the operator-level views: a graph node's pipeline stage, its sharding --
    def stage_of(self, name: str) -> int:
        """The pipeline stage (0 .. pp * virtual_stages - 1) holding a scope such as
        ``"embed"``, ``"layers.7"`` or ``"head"``, or a node name inside one
        (``"layers.7.mlp.fc1"``). Stage g runs on pipeline device ``g % pp``.

        >>> import explorer as ex
        >>> plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
        ...                         space=ex.SearchSpace(tp=(1,), pp=(2,)))
        >>> plan.stage_of("embed"), plan.stage_of("layers.11.mlp.fc1")
        (0, 1)
        """
        return stage_of_scope(self.sim.partition, name)

    def stage_map(self, graph: Graph) -> dict[str, int]:
        """``{node: pipeline stage}`` for every node of ``graph`` that belongs to a layer,
        the embedding or the head (graph inputs are left out).

        ``graph`` may be built with fewer layers than the model (drawing a 96-layer model
        as 4 layers): layer k of an n-layer graph then stands for model layers
        ``k*L/n .. (k+1)*L/n - 1`` and takes the stage of the first of them.
        """
        n = len(_graph_layers(graph)) or 1
        total = self.sim.partition.num_layers
        out = {}
        for node in graph.nodes:
            scope = node.scope
            if not scope:
                continue
            head, _, rest = scope.partition(".")
            if head == "layers" and n != total:
                k = int(rest.split(".")[0])
                scope = f"layers.{k * total // n}"
            out[node.name] = stage_of_scope(self.sim.partition, scope)
        return out

    def sharding_plan(
        self, layers: int = 2, method: str = "dynamic_programming", params=None
    ):  # -> ShardingPlan
        """The operator-level plan behind this configuration: ``explorer.search`` on a
        ``layers``-layer graph of the model (a repeated block; layers are identical) with
        one global microbatch (``dp * microbatch_size`` sequences; with context parallelism,
        the ``seq / cp`` positions of one rank) on a ``dp x tp`` mesh.

        Cheap on purpose (two layers and the dynamic programme: ~0.1 s for a 1.3B model
        on 32 x 2), so the widgets can show and link it after each re-plan.
        """
        cfg = self.model_config or load(self.model)
        c = self.config
        graph = build(
            cfg.replace(num_layers=min(layers, cfg.num_layers)),
            batch=c.dp * c.microbatch_size, seq=self.seq // c.cp,
        )  # fmt: skip
        mesh = Mesh({"dp": c.dp, "tp": c.tp}, hardware=resolve(self.hardware))
        return search(graph, mesh, method=method, params=params)


def _graph_layers(graph: Graph) -> set[str]:
    return {n.scope.split(".")[1] for n in graph.nodes if n.scope.startswith("layers.")}


def stage_of_scope(partition, name: str) -> int:
    """The stage of ``partition`` (a StagePartition) holding scope or node ``name``.

    >>> from explorer.training.pipeline.partition import uniform_partition
    >>> p = uniform_partition(8, 4)
    >>> stage_of_scope(p, "embed.wte"), stage_of_scope(p, "layers.5"), stage_of_scope(p, "head")
    (0, 2, 3)
    """
    head, _, rest = name.partition(".")
    L = partition.num_layers
    if head == "embed":
        part = 0
    elif head == "head":
        part = L + 1
    elif head == "layers" and rest.split(".")[0].isdigit():
        i = int(rest.split(".")[0])
        if i >= L:
            raise TrainingPlanError(
                f"{name!r}: layer {i} but the model has {L} layers (0..{L - 1})"
            )
        part = i + 1
    else:
        raise TrainingPlanError(
            f"{name!r} is not in a pipeline stage; expected 'embed...', 'layers.<i>...' or "
            "'head...' (graph inputs such as 'tokens' belong to no stage)"
        )
    for g in range(partition.stages):
        if partition.bounds[g] <= part < partition.bounds[g + 1]:
            return g
    raise TrainingPlanError(f"part {part} outside {partition.bounds}")  # bounds cover all parts
