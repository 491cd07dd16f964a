"""The agent's door to the machine: the `Host` protocol and `LinuxHost`."""

from pykatalyst.agent.host.base import (
    ApplyResult,
    CgroupStats,
    ContainerCgroup,
    CpuQuota,
    Host,
    HostSample,
    Knob,
    KnobValue,
    KnobWrite,
    MemoryInfo,
    NumaMemory,
    PodCgroup,
    WriteFailure,
)
from pykatalyst.agent.host.linux import LinuxHost

__all__ = [
    "ApplyResult",
    "CgroupStats",
    "ContainerCgroup",
    "CpuQuota",
    "Host",
    "HostSample",
    "Knob",
    "KnobValue",
    "KnobWrite",
    "LinuxHost",
    "MemoryInfo",
    "NumaMemory",
    "PodCgroup",
    "WriteFailure",
]
