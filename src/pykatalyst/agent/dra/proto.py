"""The kubelet's DRA plugin API (`k8s.io/kubelet/pkg/apis/dra/v1`, the `v1.DRAPlugin`
service of Kubernetes 1.34) and its plugin registration API
(`k8s.io/kubelet/pkg/apis/pluginregistration/v1`), declared by field number and built at
runtime with the same builder as the device plugin's messages."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.host.kubelet import (
    PB_BOOL,
    PB_MESSAGE,
    PB_OPTIONAL,
    PB_REPEATED,
    PB_STRING,
    Fields,
    build_messages,
)

DRA_PACKAGE = "k8s.io.kubelet.pkg.apis.dra.v1"
DRA_SERVICE = f"{DRA_PACKAGE}.DRAPlugin"
DRA_VERSION = "v1.DRAPlugin"  # what GetInfo advertises; the kubelet picks it by this name
REGISTRATION_PACKAGE = "pluginregistration"
REGISTRATION_SERVICE = f"{REGISTRATION_PACKAGE}.Registration"
PLUGIN_TYPE = "DRAPlugin"

_BOOL, _STRING, _MESSAGE = PB_BOOL, PB_STRING, PB_MESSAGE
_OPT, _REP = PB_OPTIONAL, PB_REPEATED

DRA: dict[str, Fields] = {
    "NodePrepareResourcesRequest": (("claims", 1, _MESSAGE, _REP, "Claim"),),
    "NodePrepareResourcesResponse": (
        ("claims", 1, _MESSAGE, _REP, "NodePrepareResourcesResponse.ClaimsEntry"),
    ),
    "NodePrepareResourceResponse": (
        ("devices", 1, _MESSAGE, _REP, "Device"),
        ("error", 2, _STRING, _OPT, ""),
    ),
    "Device": (
        ("request_names", 1, _STRING, _REP, ""),
        ("pool_name", 2, _STRING, _OPT, ""),
        ("device_name", 3, _STRING, _OPT, ""),
        ("cdi_device_ids", 4, _STRING, _REP, ""),
    ),
    "NodeUnprepareResourcesRequest": (("claims", 1, _MESSAGE, _REP, "Claim"),),
    "NodeUnprepareResourcesResponse": (
        ("claims", 1, _MESSAGE, _REP, "NodeUnprepareResourcesResponse.ClaimsEntry"),
    ),
    "NodeUnprepareResourceResponse": (("error", 1, _STRING, _OPT, ""),),
    "Claim": (
        ("namespace", 1, _STRING, _OPT, ""),
        ("uid", 2, _STRING, _OPT, ""),
        ("name", 3, _STRING, _OPT, ""),
    ),
}
DRA_MAPS: dict[str, Fields] = {
    "NodePrepareResourcesResponse.ClaimsEntry": (
        ("key", 1, _STRING, _OPT, ""),
        ("value", 2, _MESSAGE, _OPT, "NodePrepareResourceResponse"),
    ),
    "NodeUnprepareResourcesResponse.ClaimsEntry": (
        ("key", 1, _STRING, _OPT, ""),
        ("value", 2, _MESSAGE, _OPT, "NodeUnprepareResourceResponse"),
    ),
}
REGISTRATION: dict[str, Fields] = {
    "PluginInfo": (
        ("type", 1, _STRING, _OPT, ""),
        ("name", 2, _STRING, _OPT, ""),
        ("endpoint", 3, _STRING, _OPT, ""),
        ("supported_versions", 4, _STRING, _REP, ""),
    ),
    "RegistrationStatus": (
        ("plugin_registered", 1, _BOOL, _OPT, ""),
        ("error", 2, _STRING, _OPT, ""),
    ),
    "RegistrationStatusResponse": (),
    "InfoRequest": (),
}

_built: dict[str, dict[str, Any]] = {}


def dra() -> dict[str, Any]:
    """The DRA plugin message classes, by name (built once)."""
    if "dra" not in _built:
        _built["dra"] = build_messages("pykatalyst/dra/v1/api.proto", DRA_PACKAGE, DRA, DRA_MAPS)
    return _built["dra"]


def registration() -> dict[str, Any]:
    """The plugin registration message classes, by name (built once)."""
    if "reg" not in _built:
        _built["reg"] = build_messages(
            "pykatalyst/pluginregistration/v1/api.proto", REGISTRATION_PACKAGE, REGISTRATION
        )
    return _built["reg"]
