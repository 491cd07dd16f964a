"""`katalyst explain pod`, its NIC part: the bandwidth the pod asks, the NIC the scheduler
chose for it (`nic_selection_result`) and why (`nic_selection_reason`), and what the
node's CNR says about that NIC now, and what the agent's egress shaping gives the pod
there (its latest `NetBandwidth*` Event); the same for the SR-IOV VF it asks
(`sriov_vf_result`, `sriov_vf_reason`, the VF's zone under its PF's)."""

from __future__ import annotations

from collections.abc import Sequence

from pykatalyst.api import names
from pykatalyst.api.digest import digest_pod
from pykatalyst.api.objects import Pod, TopologyZone
from pykatalyst.cli.explain_gpu import node_zones, reports
from pykatalyst.cluster.protocol import JSON, Cluster

ENFORCEMENT_REASONS = (
    names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED,
    names.EVENT_REASON_NET_BANDWIDTH_SHORT,
    names.EVENT_REASON_NET_BANDWIDTH_NOT_SHAPED,
)


def _zone(
    cluster: Cluster, pod: Pod, selection: str, what: str, problems: list[str]
) -> TopologyZone | None:
    """The node's NIC-typed zone named `selection` (a NIC, or a VF when `what` is "VF");
    None, with a problem said, when it is not there."""
    if not selection or not pod.node_name:
        return None
    zones = node_zones(cluster, pod.node_name, names.ZONE_NIC, problems)
    if zones is None:
        return None
    zone = zones.get(selection)
    is_vf = zone is not None and names.RESOURCE_SRIOV_NIC in zone.capacity
    if zone is None or is_vf != (what == "VF"):
        problems.append(f"{what} {selection} is not among node {pod.node_name}'s {what} zones")
        return None
    return zone


def _held(zone: TopologyZone, pod: Pod, selection: str) -> JSON:
    return {
        "id": selection,
        "attributes": dict(zone.attributes),
        "allocatable": {k: str(v) for k, v in sorted(zone.allocatable.items())},
        "consumers": [c for c, _ in zone.allocations],
        "reports_this_pod": reports(zone, pod.uid),
    }


def nic_json(
    cluster: Cluster, pod: Pod, problems: list[str], events: Sequence[JSON] = ()
) -> JSON | None:
    """None for a pod that asks no bandwidth and holds no NIC selection."""
    mbps = digest_pod(pod.raw).request(names.RESOURCE_NET_BANDWIDTH)
    ann = pod.annotations or {}
    selection = str(ann.get(names.NIC_SELECTION_RESULT_ANNOTATION, "") or "")
    if mbps <= 0 and not selection:
        return None
    zone = _zone(cluster, pod, selection, "NIC", problems)
    return {
        "mbps_asked": mbps,
        "selection": selection or None,
        "why": ann.get(names.NIC_SELECTION_REASON_ANNOTATION) or None,
        "nic": None if zone is None else {**_held(zone, pod, selection), "socket": zone.parent},
        "enforced": _enforced(events),
    }


def sriov_json(cluster: Cluster, pod: Pod, problems: list[str]) -> JSON | None:
    """None for a pod that asks no VF and holds no VF selection."""
    asked = digest_pod(pod.raw).request(names.RESOURCE_SRIOV_NIC)
    ann = pod.annotations or {}
    selection = str(ann.get(names.SRIOV_VF_RESULT_ANNOTATION, "") or "")
    if asked <= 0 and not selection:
        return None
    zone = _zone(cluster, pod, selection, "VF", problems)
    return {
        "asked": asked,
        "selection": selection or None,
        "why": ann.get(names.SRIOV_VF_REASON_ANNOTATION) or None,
        "vf": None if zone is None else {**_held(zone, pod, selection), "pf": zone.parent},
    }


def _enforced(events: Sequence[JSON]) -> JSON | None:
    """The agent's latest word on the pod's egress class (None: it said nothing: network
    QoS off, or the pod not on the node yet)."""
    said = [e for e in events if e.get("reason") in ENFORCEMENT_REASONS]
    if not said:
        return None
    last = said[-1]
    return {"reason": last["reason"], "message": last.get("message"), "time": last.get("time")}
