"""The device plugin API's messages, declared by field number as in
`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto` and built at runtime (the same
builder as the pod-resources client's)."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.host.kubelet import (
    PB_BOOL,
    PB_INT32,
    PB_INT64,
    PB_MESSAGE,
    PB_OPTIONAL,
    PB_REPEATED,
    PB_STRING,
    Fields,
    build_messages,
)

VERSION = "v1beta1"
REGISTRATION = "v1beta1.Registration"
DEVICE_PLUGIN = "v1beta1.DevicePlugin"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PROTO_FILE = "pykatalyst/deviceplugin/v1beta1/api.proto"

_BOOL, _INT32, _INT64, _STRING, _MESSAGE = PB_BOOL, PB_INT32, PB_INT64, PB_STRING, PB_MESSAGE
_OPT, _REP = PB_OPTIONAL, PB_REPEATED

MESSAGES: dict[str, Fields] = {
    "DevicePluginOptions": (
        ("pre_start_required", 1, _BOOL, _OPT, ""),
        ("get_preferred_allocation_available", 2, _BOOL, _OPT, ""),
    ),
    "RegisterRequest": (
        ("version", 1, _STRING, _OPT, ""),
        ("endpoint", 2, _STRING, _OPT, ""),
        ("resource_name", 3, _STRING, _OPT, ""),
        ("options", 4, _MESSAGE, _OPT, "DevicePluginOptions"),
    ),
    "Empty": (),
    "ListAndWatchResponse": (("devices", 1, _MESSAGE, _REP, "Device"),),
    "TopologyInfo": (("nodes", 1, _MESSAGE, _REP, "NUMANode"),),
    "NUMANode": (("ID", 1, _INT64, _OPT, ""),),
    "Device": (
        ("ID", 1, _STRING, _OPT, ""),
        ("health", 2, _STRING, _OPT, ""),
        ("topology", 3, _MESSAGE, _OPT, "TopologyInfo"),
    ),
    "PreStartContainerRequest": (("devices_ids", 1, _STRING, _REP, ""),),
    "PreStartContainerResponse": (),
    "PreferredAllocationRequest": (
        ("container_requests", 1, _MESSAGE, _REP, "ContainerPreferredAllocationRequest"),
    ),
    "ContainerPreferredAllocationRequest": (
        ("available_deviceIDs", 1, _STRING, _REP, ""),
        ("must_include_deviceIDs", 2, _STRING, _REP, ""),
        ("allocation_size", 3, _INT32, _OPT, ""),
    ),
    "PreferredAllocationResponse": (
        ("container_responses", 1, _MESSAGE, _REP, "ContainerPreferredAllocationResponse"),
    ),
    "ContainerPreferredAllocationResponse": (("deviceIDs", 1, _STRING, _REP, ""),),
    "AllocateRequest": (("container_requests", 1, _MESSAGE, _REP, "ContainerAllocateRequest"),),
    "ContainerAllocateRequest": (("devices_ids", 1, _STRING, _REP, ""),),
    "CDIDevice": (("name", 1, _STRING, _OPT, ""),),
    "AllocateResponse": (("container_responses", 1, _MESSAGE, _REP, "ContainerAllocateResponse"),),
    "ContainerAllocateResponse": (
        ("envs", 1, _MESSAGE, _REP, "ContainerAllocateResponse.EnvsEntry"),
        ("mounts", 2, _MESSAGE, _REP, "Mount"),
        ("devices", 3, _MESSAGE, _REP, "DeviceSpec"),
        ("annotations", 4, _MESSAGE, _REP, "ContainerAllocateResponse.AnnotationsEntry"),
        ("cdi_devices", 5, _MESSAGE, _REP, "CDIDevice"),
    ),
    "Mount": (
        ("container_path", 1, _STRING, _OPT, ""),
        ("host_path", 2, _STRING, _OPT, ""),
        ("read_only", 3, _BOOL, _OPT, ""),
    ),
    "DeviceSpec": (
        ("container_path", 1, _STRING, _OPT, ""),
        ("host_path", 2, _STRING, _OPT, ""),
        ("permissions", 3, _STRING, _OPT, ""),
    ),
}
_ENTRY: Fields = (
    ("key", 1, _STRING, _OPT, ""),
    ("value", 2, _STRING, _OPT, ""),
)
MAP_ENTRIES: dict[str, Fields] = {
    "ContainerAllocateResponse.EnvsEntry": _ENTRY,
    "ContainerAllocateResponse.AnnotationsEntry": _ENTRY,
}

_messages: dict[str, Any] | None = None


def messages() -> dict[str, Any]:
    """The device plugin message classes, by name (built once)."""
    global _messages
    if _messages is None:
        _messages = build_messages(PROTO_FILE, VERSION, MESSAGES, MAP_ENTRIES)
    return _messages
