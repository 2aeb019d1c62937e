"""Pipeline parallelism: stage partition, schedules as data, timeline simulation."""

from .partition import PartitionError, StagePartition, partition_layers, uniform_partition
from .schedule import Schedule, Step, bubble_fraction, build_schedule, peak_in_flight
from .timeline import Timeline, TimelineEvent, simulate_schedule

__all__ = [
    "PartitionError", "StagePartition", "partition_layers", "uniform_partition",
    "Schedule", "Step", "bubble_fraction", "build_schedule", "peak_in_flight",
    "Timeline", "TimelineEvent", "simulate_schedule",
]  # fmt: skip
