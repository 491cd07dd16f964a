"""A `Host` that forwards everything to another one: the base of test hosts that change
one behaviour of a real `LinuxHost` (failing writes, counting reads, kernel rules)."""

from __future__ import annotations

from collections.abc import Sequence

from pykatalyst.agent.host.base import (
    ApplyResult,
    HostSample,
    Knob,
    KnobValue,
    KnobWrite,
    NetApplyResult,
    NetShape,
    PodCgroup,
)
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.topology.machine import CPUTopology


class WrappedHost:
    def __init__(self, inner: LinuxHost) -> None:
        self.inner = inner

    @property
    def cgroup_version(self) -> int:
        return self.inner.cgroup_version

    @property
    def page_size(self) -> int:
        return self.inner.page_size

    def topology(self) -> CPUTopology:
        return self.inner.topology()

    def discover(self) -> list[PodCgroup]:
        return self.inner.discover()

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        return self.inner.sample(now, cgroups)

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        return self.inner.read_knobs(cgroup)

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        return self.inner.apply(writes)

    def qos_cgroup(self, qos_class: str) -> str | None:
        return self.inner.qos_cgroup(qos_class)

    def memory_usage(self, cgroup: str) -> int | None:
        return self.inner.memory_usage(cgroup)

    def cpu_usage_s(self, cgroup: str) -> float | None:
        return self.inner.cpu_usage_s(cgroup)

    def same_value(self, knob: Knob, desired: KnobValue, actual: KnobValue) -> bool:
        return self.inner.same_value(knob, desired, actual)

    def knob_problem(self, knob: Knob, value: KnobValue) -> str | None:
        return self.inner.knob_problem(knob, value)

    def apply_net(self, shape: NetShape | None) -> NetApplyResult:
        return self.inner.apply_net(shape)
