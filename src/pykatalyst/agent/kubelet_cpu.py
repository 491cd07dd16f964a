"""Beside the kubelet's static cpu manager: its exclusive cpus are an input of the cpu policy.

With `cpuManagerPolicy: static` the kubelet pins Guaranteed containers with integer cpu
requests to exclusive cpus and puts every other container on its default cpuset; its
reconcile loop rewrites a container's cpuset whenever its own view of it changes. The agent
therefore builds around the kubelet's assignments instead of fighting them:

- `read_kubelet_policy` reads the policy and `reservedSystemCPUs` from the kubelet's
  configuration file (the policy in force is the one the kubelet was started with).
- `pin` matches the kubelet's assignments (`host.kubelet.KubeletView`) to the agent's pods.
- `kubelet_previous` makes a dedicated_cores pod the kubelet pinned keep the kubelet's
  cpus; every other exclusive cpu is *foreign*: the cpu policy keeps it out of the reserve,
  the share and reclaim pools and other dedicated pods (`cpu_policy.layout(foreign=...)`).
- `strip_pinned` drops the agent's cpuset writes to the containers the kubelet pinned, so
  the kubelet alone writes them. The agent still writes every other container's cpuset
  (its pools lie inside the kubelet's default cpuset, so the kubelet has nothing to undo).

`KubeletCpuWatch` is the edge: it reads the file and the view, says once when it cannot
see the kubelet's assignments (the agent then runs as without the kubelet), and logs each
new set of assignments.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pykatalyst.agent.cpu_policy import DedicatedAssignment, DedicatedRequest
from pykatalyst.agent.host.base import Knob, KnobValue
from pykatalyst.agent.host.kubelet import KubeletCpuAssignments, KubeletUnavailable, KubeletView
from pykatalyst.api import names
from pykatalyst.api.quantity import QuantityError, parse_quantity
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

log = logging.getLogger("pykatalyst.agent.kubelet")

POLICIES = ("none", "static")


class KubeletConfigError(ValueError):
    """A kubelet configuration the agent cannot read a cpu policy from."""


@dataclass(frozen=True, slots=True)
class KubeletCpuPolicy:
    policy: str  # "none" | "static" | "unknown" (no config file to read)
    reserved: CPUSet = field(default_factory=CPUSet)  # reservedSystemCPUs
    topology_manager_policy: str | None = None  # None: unknown (no file read)
    topology_manager_scope: str | None = None
    reserved_memory: int = 0  # kubeReserved + systemReserved memory, bytes
    memory_manager_policy: str | None = None  # memoryManagerPolicy (None: no file read)
    # the CPUManager and MemoryManager feature gates (on unless the config turns them off)
    cpu_manager_gate: bool = True
    memory_manager_gate: bool = True

    @property
    def static(self) -> bool:
        return self.policy == "static"

    @property
    def topology_policy(self) -> str:
        """The CNR's `status.topologyPolicy` for this kubelet (None when unknown)."""
        if self.topology_manager_policy is None:
            return names.TOPOLOGY_POLICY_NONE
        return topology_policy_of(self.topology_manager_policy, self.topology_manager_scope)


def topology_policy_of(policy: str, scope: str | None) -> str:
    """Katalyst's TopologyPolicy for a topology manager policy and scope (the kubelet's
    default scope is container); `none`, or anything unknown, is None."""
    return names.TOPOLOGY_POLICIES.get((policy, scope or "container"), names.TOPOLOGY_POLICY_NONE)


def _choice(doc: Mapping[str, object], key: str, default: str, accepted: Sequence[str]) -> str:
    value = doc.get(key) or default
    if value not in accepted:
        raise KubeletConfigError(f"{key} {value!r}: accepted: {', '.join(accepted)}")
    return str(value)


def _reserved_memory(doc: Mapping[str, object], source: str) -> int:
    total = 0
    for key in ("kubeReserved", "systemReserved"):
        section = doc.get(key) or {}
        if not isinstance(section, dict):
            raise KubeletConfigError(f"{source}: {key} is a mapping of resource to quantity")
        raw = section.get("memory")
        if raw is None:
            continue
        try:
            total += parse_quantity(str(raw)).value()
        except (QuantityError, ValueError) as exc:
            raise KubeletConfigError(f"{source}: {key}.memory {raw!r}: {exc}") from None
    return total


def parse_kubelet_config(text: str, source: str) -> KubeletCpuPolicy:
    """`cpuManagerPolicy` (default none), `reservedSystemCPUs`, the topology manager's
    policy and scope (defaults none, container) and the memory of `kubeReserved` and
    `systemReserved` of a KubeletConfiguration."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeletConfigError(f"{source}: not YAML: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise KubeletConfigError(f"{source}: a KubeletConfiguration is a mapping")
    policy = doc.get("cpuManagerPolicy") or "none"
    if policy not in POLICIES:
        raise KubeletConfigError(
            f"{source}: cpuManagerPolicy {policy!r}: accepted: {', '.join(POLICIES)}"
        )
    raw = doc.get("reservedSystemCPUs") or ""
    try:
        reserved = CPUSet.parse(str(raw))
    except ValueError as exc:
        raise KubeletConfigError(f"{source}: reservedSystemCPUs {raw!r}: {exc}") from None
    try:
        topo_policy = _choice(doc, "topologyManagerPolicy", "none", names.TOPOLOGY_MANAGER_POLICIES)
        scope = _choice(doc, "topologyManagerScope", "container", names.TOPOLOGY_MANAGER_SCOPES)
    except KubeletConfigError as exc:
        raise KubeletConfigError(f"{source}: {exc}") from None
    gates = doc.get("featureGates") or {}
    if not isinstance(gates, dict):
        raise KubeletConfigError(f"{source}: featureGates is a mapping of gate to true/false")
    return KubeletCpuPolicy(
        str(policy),
        reserved,
        topo_policy,
        scope,
        _reserved_memory(doc, source),
        str(doc.get("memoryManagerPolicy") or "None"),
        gates.get("CPUManager") is not False,
        gates.get("MemoryManager") is not False,
    )


def read_kubelet_policy(path: str) -> KubeletCpuPolicy:
    """The policy in the kubelet's config file; KubeletConfigError when it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise KubeletConfigError(f"kubelet config {path}: {exc.strerror or exc}") from None
    return parse_kubelet_config(text, f"kubelet config {path}")


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class KubeletPins:
    """The kubelet's exclusive cpus, matched to the agent's pods."""

    exclusive: CPUSet = field(default_factory=CPUSet)
    by_pod: Mapping[str, Mapping[str, CPUSet]] = field(default_factory=dict)  # uid -> name

    def cpus_of(self, uid: str) -> CPUSet:
        return CPUSet().union(*self.by_pod.get(uid, {}).values())


def pin(assignments: KubeletCpuAssignments, pods: Sequence[PodRef]) -> KubeletPins:
    """Which of `pods` the kubelet pinned; cpus of pods the agent does not know stay in
    `exclusive` (the kubelet owns them all the same)."""
    by_key = {(p.namespace, p.name): p.uid for p in pods}
    by_pod: dict[str, dict[str, CPUSet]] = {}
    for c in assignments.containers:
        uid = by_key.get((c.namespace, c.pod))
        if uid is not None:
            by_pod.setdefault(uid, {})[c.container] = c.cpus
    return KubeletPins(assignments.exclusive, by_pod)


def kubelet_previous(
    topo: CPUTopology,
    pins: KubeletPins,
    requests: Sequence[DedicatedRequest],
    previous: Mapping[str, DedicatedAssignment],
) -> tuple[dict[str, DedicatedAssignment], CPUSet]:
    """(previous assignments for the cpu policy, foreign cpus).

    A dedicated pod the kubelet pinned to at least the cpus it asks for keeps the kubelet's
    cpus; an assignment of the agent's own that overlaps a kubelet cpu is dropped (the pod
    is placed again, around the kubelet). Every other exclusive cpu is foreign."""
    out = {uid: a for uid, a in previous.items() if a.cpuset.isdisjoint(pins.exclusive)}
    kept = CPUSet()
    for req in requests:
        cpus = pins.cpus_of(req.uid)
        if cpus and len(cpus) >= req.cpus:
            numas = tuple(sorted({topo.numa_of(c) for c in cpus}))
            terms = {"kubelet_static": True, "request_cpus": req.cpus}
            out[req.uid] = DedicatedAssignment(req.uid, cpus, numas, req.exclusive, terms)
            kept = kept | cpus
    return out, pins.exclusive - kept


@dataclass(frozen=True, slots=True)
class PodContainers:
    """What the agent knows of one pod's containers on the node: the containers it could
    match to a cgroup (name -> cgroup), every container cgroup found under the pod's cgroup
    (the sandbox's and those whose status the API server has not reported yet included),
    and the names of the containers the static policy may pin (`may_pin`)."""

    matched: Mapping[str, str]
    found: frozenset[str]
    pinnable: frozenset[str]


def kubelet_owned(
    pins: KubeletPins | None, static: bool, pods: Mapping[str, PodContainers]
) -> frozenset[str]:
    """The cgroups whose cpuset the kubelet alone writes.

    A container the kubelet pinned is its own: it writes the cpuset once, when it creates
    the container, and never corrects it. With no answer from the kubelet under the static
    policy (`pins` None), every container it may have pinned counts as pinned. The cgroups
    of such a pod that the agent cannot match to a container yet are the kubelet's too:
    right after the kubelet starts a pinned container, the pod's status may not carry the
    container's id yet, and the share pool written on that cgroup would stick for good."""
    out: set[str] = set()
    for uid, pod in pods.items():
        pinned = frozenset(pins.by_pod.get(uid, {})) if pins is not None else frozenset()
        if pins is None and static:
            pinned = pod.pinnable
        if not pinned and not (static and pod.pinnable):
            continue
        out.update(path for name, path in pod.matched.items() if name in pinned)
        out.update(pod.found - set(pod.matched.values()))
    return frozenset(out)


def may_pin(request_cores: float, limit_cores: float) -> bool:
    """Whether the static policy may give a container exclusive cpus: a whole number of
    cpus requested, and the same limit (a Guaranteed pod's container)."""
    whole = request_cores >= 1 and request_cores == int(request_cores)
    return whole and limit_cores == request_cores


def strip_pinned(
    desired: Mapping[str, Mapping[Knob, KnobValue]], pinned: frozenset[str]
) -> dict[str, dict[Knob, KnobValue]]:
    """The desired knobs without a cpuset.cpus for the cgroups the kubelet pinned."""
    return {
        path: {k: v for k, v in knobs.items() if not (path in pinned and k is Knob.CPUSET_CPUS)}
        for path, knobs in desired.items()
    }


CANNOT_SEE = (
    "the agent cannot see the kubelet's cpu assignments, so under the static cpu manager "
    "its pools may overlap the kubelet's exclusive cpus: "
)


class KubeletCpuWatch:
    """The kubelet's policy and exclusive cpus, each tick; None when the agent need not (or
    cannot) build around them."""

    def __init__(self, config_path: str, view: KubeletView | None) -> None:
        self.config_path = config_path
        self.view = view
        self.policy: KubeletCpuPolicy | None = None
        self._said: set[str] = set()
        self._last: KubeletCpuAssignments | None = None

    def _once(self, text: str, level: int = logging.WARNING) -> None:
        if text not in self._said:
            self._said.add(text)
            log.log(level, "%s", text)

    def _read_policy(self) -> KubeletCpuPolicy:
        if not self.config_path:
            return KubeletCpuPolicy("none")
        if not Path(self.config_path).exists():
            # Not mounted, or a kubelet with another root directory: under the none policy
            # the pod-resources API reports no cpus, so asking it is the same as knowing.
            self._once(
                f"no kubelet config at {self.config_path}: asking the pod-resources API "
                "for exclusive cpus",
                logging.INFO,
            )
            return KubeletCpuPolicy("unknown")
        try:
            policy = read_kubelet_policy(self.config_path)
        except KubeletConfigError as exc:
            self._once(f"{exc}; taking the kubelet's cpu manager policy to be none")
            return KubeletCpuPolicy("none")
        if policy != self.policy:
            log.info(
                "kubelet cpu manager policy %s (reservedSystemCPUs %s), from %s",
                policy.policy,
                policy.reserved or "none",
                self.config_path,
            )
        return policy

    def observe(self, pods: Sequence[PodRef]) -> KubeletPins | None:
        self.policy = self._read_policy()
        if self.policy.policy == "none":
            self._last = None
            return None
        # Unsure the kubelet pins anything, the agent does not warn that it cannot ask.
        level = logging.WARNING if self.policy.static else logging.INFO
        if self.view is None:
            self._once(CANNOT_SEE + "no pod-resources client", level)
            return None
        try:
            got = self.view.cpu_assignments()
        except KubeletUnavailable as exc:
            if self._last is not None:
                # A kubelet restarting: its pinned containers keep their cpus meanwhile.
                log.info("pod-resources: %s; keeping the last assignments read", exc)
                return pin(self._last, pods)
            self._once(CANNOT_SEE + str(exc), level)
            return None
        if got != self._last:
            shown = ", ".join(
                f"{c.namespace}/{c.pod}/{c.container}={c.cpus}" for c in got.containers
            )
            log.info(
                "kubelet static cpu manager: exclusive cpus %s (%s); allocatable %s; "
                "kept out of the agent's pools",
                got.exclusive or "none",
                shown or "no pinned container",
                got.allocatable,
            )
            self._last = got
        return pin(got, pods)
