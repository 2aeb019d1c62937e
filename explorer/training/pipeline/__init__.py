"""Pipeline parallelism: stage partition, schedules as data, timeline simulation, and the
bubble explained (a public front door: the pipeline views import from here)."""

from ..errors import PartitionError
from .bubble import BUBBLE_STEPS, BubbleBreakdown, bubble_breakdown, microbatch_size_for
from .interleaving import InterleavingLesson, interleaving_lesson
from .partition import StagePartition, partition_layers, uniform_partition
from .schedule import (
    Schedule,
    Step,
    bubble_fraction,
    build_schedule,
    peak_in_flight,
    pipeline_time,
)
from .timeline import EVENT_KINDS, Timeline, TimelineEvent, simulate_schedule

__all__ = [
    "PartitionError", "StagePartition", "partition_layers", "uniform_partition",
    "Schedule", "Step", "bubble_fraction", "pipeline_time", "build_schedule", "peak_in_flight",
    "Timeline", "TimelineEvent", "EVENT_KINDS", "simulate_schedule",
    "BubbleBreakdown", "bubble_breakdown", "microbatch_size_for", "BUBBLE_STEPS",
    "InterleavingLesson", "interleaving_lesson",
]  # fmt: skip
