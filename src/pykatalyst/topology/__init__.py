"""Machine topology: cpu sets, the socket/NUMA/core/thread model, and cpu allocation."""

from pykatalyst.topology.allocate import (
    AllocationError,
    take_by_topology,
    take_numa_balanced,
    take_within_numas,
)
from pykatalyst.topology.cpuset import CPUSet, CPUSetError
from pykatalyst.topology.machine import CPUInfo, CPUTopology, TopologyError

__all__ = [
    "AllocationError",
    "CPUInfo",
    "CPUSet",
    "CPUSetError",
    "CPUTopology",
    "TopologyError",
    "take_by_topology",
    "take_numa_balanced",
    "take_within_numas",
]
