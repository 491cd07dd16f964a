"""`katalyst explain pod`, its NIC part: the bandwidth the pod asks, the NIC the scheduler
chose for it (`nic_selection_result`) and why (`nic_selection_reason`), and what the
node's CNR says about that NIC now; the same for the SR-IOV VF it asks (`sriov_vf_result`,
`sriov_vf_reason`, the VF's zone under its PF's)."""

from __future__ import annotations

from pykatalyst.api import names
from pykatalyst.api.digest import digest_pod
from pykatalyst.api.objects import Pod
from pykatalyst.cli.explain_gpu import node_zones, reports
from pykatalyst.cluster.protocol import JSON, Cluster


def nic_json(cluster: Cluster, pod: Pod, problems: list[str]) -> JSON | None:
    """None for a pod that asks no bandwidth and holds no NIC selection."""
    mbps = digest_pod(pod.raw).request(names.RESOURCE_NET_BANDWIDTH)
    ann = pod.annotations or {}
    selection = str(ann.get(names.NIC_SELECTION_RESULT_ANNOTATION, "") or "")
    if mbps <= 0 and not selection:
        return None
    out: JSON = {
        "mbps_asked": mbps,
        "selection": selection or None,
        "why": ann.get(names.NIC_SELECTION_REASON_ANNOTATION) or None,
        "nic": None,
    }
    if not selection or not pod.node_name:
        return out
    zones = node_zones(cluster, pod.node_name, names.ZONE_NIC, problems)
    if zones is None:
        return out
    zone = zones.get(selection)
    if zone is None:
        problems.append(f"NIC {selection} is not among node {pod.node_name}'s NIC zones")
        return out
    out["nic"] = {
        "id": selection,
        "socket": zone.parent,
        "attributes": dict(zone.attributes),
        "allocatable": {k: str(v) for k, v in sorted(zone.allocatable.items())},
        "consumers": [c for c, _ in zone.allocations],
        "reports_this_pod": reports(zone, pod.uid),
    }
    return out


def sriov_json(cluster: Cluster, pod: Pod, problems: list[str]) -> JSON | None:
    """None for a pod that asks no VF and holds no VF selection."""
    asked = digest_pod(pod.raw).request(names.RESOURCE_SRIOV_NIC)
    ann = pod.annotations or {}
    selection = str(ann.get(names.SRIOV_VF_RESULT_ANNOTATION, "") or "")
    if asked <= 0 and not selection:
        return None
    out: JSON = {
        "asked": asked,
        "selection": selection or None,
        "why": ann.get(names.SRIOV_VF_REASON_ANNOTATION) or None,
        "vf": None,
    }
    if not selection or not pod.node_name:
        return out
    zones = node_zones(cluster, pod.node_name, names.ZONE_NIC, problems)
    if zones is None:
        return out
    zone = zones.get(selection)
    if zone is None or names.RESOURCE_SRIOV_NIC not in zone.capacity:
        problems.append(f"VF {selection} is not among node {pod.node_name}'s VF zones")
        return out
    out["vf"] = {
        "id": selection,
        "pf": zone.parent,
        "attributes": dict(zone.attributes),
        "allocatable": {k: str(v) for k, v in sorted(zone.allocatable.items())},
        "consumers": [c for c, _ in zone.allocations],
        "reports_this_pod": reports(zone, pod.uid),
    }
    return out
