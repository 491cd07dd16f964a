"""The kubelet's own cpu assignments, as its pod-resources API reports them.

With `cpuManagerPolicy: static` the kubelet gives Guaranteed containers with integer cpu
requests exclusive cpus. `KubeletView` is the agent's door to those assignments;
`PodResourcesClient` implements it over the kubelet's PodResourcesLister v1 gRPC service
on its unix socket (`List` and `GetAllocatableResources`), and tests use fakes.

The same client reads the devices the kubelet's device manager handed out (`List`) and may
hand out (`GetAllocatableResources`): the GPU zones of the CNR list whole-card pods from it,
and the device plugin rebuilds its ledger from it after a restart.

The message types are built at runtime from a descriptor written here, field numbers as in
`k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`. Only the fields the agent reads are
declared (names, cpu ids, devices, DRA devices); protobuf skips the others (memory)
when it parses a reply. gRPC and protobuf come with the `pykatalyst[node]` extra: without
them, or without the socket, the view is unavailable and says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pykatalyst.extras import MissingExtra, require
from pykatalyst.topology.cpuset import CPUSet

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
SERVICE = "v1.PodResourcesLister"
PROTO_FILE = "pykatalyst/podresources/v1/api.proto"


class KubeletUnavailable(Exception):
    """The kubelet's assignments cannot be read (no socket, no gRPC, a failed call)."""


@dataclass(frozen=True, slots=True)
class ContainerCpus:
    """The cpus the kubelet gave one container exclusively."""

    namespace: str
    pod: str
    container: str
    cpus: CPUSet


@dataclass(frozen=True, slots=True)
class KubeletCpuAssignments:
    """Every exclusive assignment of the kubelet, and the cpus it may hand out."""

    containers: tuple[ContainerCpus, ...] = ()
    allocatable: CPUSet = field(default_factory=CPUSet)

    @property
    def exclusive(self) -> CPUSet:
        return CPUSet().union(*(c.cpus for c in self.containers))


class KubeletView(Protocol):
    """The kubelet, as the agent sees its cpu manager."""

    def cpu_assignments(self) -> KubeletCpuAssignments:
        """The kubelet's exclusive cpus now; KubeletUnavailable (with the reason) when it
        cannot be asked."""
        ...


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """Devices of one resource the kubelet gave one container (or, without a container,
    holds allocatable), with the NUMA nodes it reported for them."""

    resource: str
    device_ids: tuple[str, ...]
    numa: tuple[int, ...] = ()
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class KubeletDevices:
    """The devices the kubelet handed out and those it may hand out, of the resources
    asked for."""

    containers: tuple[DeviceGrant, ...] = ()
    allocatable: tuple[DeviceGrant, ...] = ()


class KubeletDevicesView(Protocol):
    """The kubelet, as the agent sees its device manager."""

    def device_assignments(self, resources: frozenset[str]) -> KubeletDevices:
        """The kubelet's device grants of `resources` now; KubeletUnavailable (with the
        reason) when it cannot be asked."""
        ...


# --- messages -----------------------------------------------------------------------------

# FieldDescriptorProto's types and labels, for the kubelet APIs' message tables here, in the
# device plugin's and in the DRA plugin's (protobuf itself is imported only when built)
PB_INT64 = 3
PB_INT32 = 5
PB_BOOL = 8
PB_STRING = 9
PB_MESSAGE = 11
PB_OPTIONAL = 1
PB_REPEATED = 3
Fields = tuple[tuple[str, int, int, int, str], ...]
"""A message's fields: (name, number, type, label, message type or "")."""
_INT64, _STRING, _MESSAGE = PB_INT64, PB_STRING, PB_MESSAGE
_OPTIONAL, _REPEATED = PB_OPTIONAL, PB_REPEATED

# message -> (field name, number, type, label, message type); numbers from api.proto
MESSAGES: dict[str, Fields] = {
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, _MESSAGE, _REPEATED, "PodResources"),),
    "PodResources": (
        ("name", 1, _STRING, _OPTIONAL, ""),
        ("namespace", 2, _STRING, _OPTIONAL, ""),
        ("containers", 3, _MESSAGE, _REPEATED, "ContainerResources"),
    ),
    "ContainerResources": (
        ("name", 1, _STRING, _OPTIONAL, ""),
        ("devices", 2, _MESSAGE, _REPEATED, "ContainerDevices"),
        ("cpu_ids", 3, _INT64, _REPEATED, ""),
        ("dynamic_resources", 5, _MESSAGE, _REPEATED, "DynamicResource"),
    ),
    "DynamicResource": (
        ("claim_name", 2, _STRING, _OPTIONAL, ""),
        ("claim_namespace", 3, _STRING, _OPTIONAL, ""),
        ("claim_resources", 4, _MESSAGE, _REPEATED, "ClaimResource"),
    ),
    "ClaimResource": (
        ("driver_name", 2, _STRING, _OPTIONAL, ""),
        ("pool_name", 3, _STRING, _OPTIONAL, ""),
        ("device_name", 4, _STRING, _OPTIONAL, ""),
    ),
    "ContainerDevices": (
        ("resource_name", 1, _STRING, _OPTIONAL, ""),
        ("device_ids", 2, _STRING, _REPEATED, ""),
        ("topology", 3, _MESSAGE, _OPTIONAL, "TopologyInfo"),
    ),
    "TopologyInfo": (("nodes", 1, _MESSAGE, _REPEATED, "NUMANode"),),
    "NUMANode": (("ID", 1, _INT64, _OPTIONAL, ""),),
    "AllocatableResourcesRequest": (),
    "AllocatableResourcesResponse": (
        ("devices", 1, _MESSAGE, _REPEATED, "ContainerDevices"),
        ("cpu_ids", 2, _INT64, _REPEATED, ""),
    ),
}

_messages: dict[str, Any] | None = None


def _protobuf(module: str) -> Any:
    try:
        return require(module, "node", "reading the kubelet's cpu assignments")
    except MissingExtra as exc:
        raise KubeletUnavailable(str(exc)) from None


def build_messages(
    file: str,
    package: str,
    spec: dict[str, Fields],
    nested: dict[str, Fields] | None = None,
) -> dict[str, Any]:
    """Message classes of a proto3 file declared by field number: `spec` maps a message
    to its fields (name, number, type, label, message type); `nested` declares map
    fields' entry messages (`<Message>.<Field>Entry`, key 1 and value 2), which a map
    field names as its message type."""
    descriptor_pb2 = _protobuf("google.protobuf.descriptor_pb2")
    descriptor_pool = _protobuf("google.protobuf.descriptor_pool")
    message_factory = _protobuf("google.protobuf.message_factory")
    fdp = descriptor_pb2.FileDescriptorProto(name=file, package=package, syntax="proto3")
    for name, fields in spec.items():
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".{package}.{type_name}"
        for entry, entry_fields in (nested or {}).items():
            owner, _, entry_name = entry.partition(".")
            if owner != name:
                continue
            sub = msg.nested_type.add(name=entry_name)
            sub.options.map_entry = True
            for fname, number, ftype, label, entry_type in entry_fields:
                ef = sub.field.add(name=fname, number=number, type=ftype, label=label)
                if entry_type:
                    ef.type_name = f".{package}.{entry_type}"
    pool = descriptor_pool.DescriptorPool()
    fd = pool.Add(fdp)
    return {name: message_factory.GetMessageClass(fd.message_types_by_name[name]) for name in spec}


def messages() -> dict[str, Any]:
    """The pod-resources message classes, by name (built once)."""
    global _messages
    if _messages is None:
        _messages = build_messages(PROTO_FILE, "v1", MESSAGES)
    return _messages


def _cpus(ids: Iterable[int], where: str) -> CPUSet:
    ids = list(ids)
    bad = [i for i in ids if i < 0]
    if bad:
        raise KubeletUnavailable(f"the kubelet reported negative cpu ids {bad} for {where}")
    return CPUSet.of(ids)


def assignments_from(listed: Any, allocatable: Any) -> KubeletCpuAssignments:
    """The assignments of a `List` reply and a `GetAllocatableResources` reply; containers
    without cpu ids (those in the kubelet's shared pool) are left out."""
    out: list[ContainerCpus] = []
    for pod in listed.pod_resources:
        for c in pod.containers:
            if c.cpu_ids:
                where = f"{pod.namespace}/{pod.name} container {c.name}"
                out.append(ContainerCpus(pod.namespace, pod.name, c.name, _cpus(c.cpu_ids, where)))
    out.sort(key=lambda c: (c.namespace, c.pod, c.container))
    return KubeletCpuAssignments(tuple(out), _cpus(allocatable.cpu_ids, "allocatable cpus"))


def _grant(d: Any, resources: frozenset[str], **where: str) -> DeviceGrant | None:
    if d.resource_name not in resources:
        return None
    numa = tuple(sorted(int(n.ID) for n in d.topology.nodes))
    return DeviceGrant(d.resource_name, tuple(d.device_ids), numa, **where)


def _claimed(c: Any, resources: frozenset[str], namespace: str, pod: str) -> list[DeviceGrant]:
    """The DRA devices of a container, one grant per device under its driver's name as the
    resource, for the drivers among `resources` (the kubelet lists them under
    dynamic_resources, by claim)."""
    return [
        DeviceGrant(r.driver_name, (r.device_name,), (), namespace, pod, c.name)
        for dr in c.dynamic_resources
        for r in dr.claim_resources
        if r.driver_name in resources
    ]


def devices_from(listed: Any, allocatable: Any, resources: frozenset[str]) -> KubeletDevices:
    """The grants of `resources` in a `List` reply and a `GetAllocatableResources` reply."""
    held: list[DeviceGrant] = []
    for pod in listed.pod_resources:
        for c in pod.containers:
            for d in c.devices:
                g = _grant(d, resources, namespace=pod.namespace, pod=pod.name, container=c.name)
                if g is not None:
                    held.append(g)
            held.extend(_claimed(c, resources, pod.namespace, pod.name))
    held.sort(key=lambda g: (g.namespace, g.pod, g.container, g.resource))
    free = [g for d in allocatable.devices if (g := _grant(d, resources)) is not None]
    return KubeletDevices(tuple(held), tuple(free))


class PodResourcesClient:
    """`KubeletView` over the kubelet's pod-resources socket."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_s: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: Any = None

    def _call(self, method: str, request: str, response: str) -> Any:
        grpc = _protobuf("grpc")
        msgs = messages()
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        stub = self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=msgs[request].SerializeToString,
            response_deserializer=msgs[response].FromString,
        )
        try:
            return stub(msgs[request](), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise KubeletUnavailable(
                f"pod-resources {method} on {self.socket_path}: {code}: {details}"
            ) from None

    def _both(self) -> tuple[Any, Any]:
        if not Path(self.socket_path).exists():
            raise KubeletUnavailable(f"no pod-resources socket at {self.socket_path}")
        listed = self._call("List", "ListPodResourcesRequest", "ListPodResourcesResponse")
        alloc = self._call(
            "GetAllocatableResources", "AllocatableResourcesRequest", "AllocatableResourcesResponse"
        )
        return listed, alloc

    def cpu_assignments(self) -> KubeletCpuAssignments:
        return assignments_from(*self._both())

    def device_assignments(self, resources: frozenset[str]) -> KubeletDevices:
        listed, alloc = self._both()
        return devices_from(listed, alloc, resources)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
