"""`katalyst explain pod`, its GPU part: what the pod asks of GPUs, the cards the scheduler
chose for it (`gpu_selection_result`) and why (`gpu_selection_reason`), and what the
node's CNR says about those cards now; for a pod that also holds an SR-IOV VF, how close
the VF sits to its cards (the PCIe switch and NUMA node of each)."""

from __future__ import annotations

from pykatalyst.api import names
from pykatalyst.api.gpu import pod_gpu_request
from pykatalyst.api.objects import CustomNodeResource, Pod, TopologyZone
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.topology.joint import joint_ask


def node_zones(
    cluster: Cluster, node: str, zone_type: str, problems: list[str]
) -> dict[str, TopologyZone] | None:
    """The zones of one type in a node's CNR by name; None (and a problem said) when the
    CNR cannot be read."""
    try:
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, node)
    except ApiError as exc:
        problems.append(f"cannot read the {zone_type} zones of node {node}: {exc}")
        return None
    return {z.name: z for z in CustomNodeResource(cnr).zones() if z.type == zone_type}


def reports(zone: TopologyZone, uid: str) -> bool:
    """Whether a zone's allocations list the pod `uid`."""
    return any(c.rsplit("/", 1)[-1] == uid for c, _ in zone.allocations)


def gpu_json(cluster: Cluster, pod: Pod, problems: list[str]) -> JSON | None:
    """None for a pod that asks for no GPU and holds no card selection."""
    req = pod_gpu_request(pod.raw)
    ann = pod.annotations or {}
    selection = str(ann.get(names.GPU_SELECTION_RESULT_ANNOTATION, "") or "")
    if not req.asks and not selection:
        return None
    ids = [c for c in selection.split(",") if c]
    out: JSON = {
        "cards_asked": req.cards,
        "memory_units_asked": req.memory,
        "whole_cards": req.whole,
        "request_problem": req.problem or None,
        "selection": ids,
        "why": ann.get(names.GPU_SELECTION_REASON_ANNOTATION) or None,
        "cards": [],
    }
    if not ids or not pod.node_name:
        return out
    zones = node_zones(cluster, pod.node_name, names.ZONE_GPU, problems)
    if zones is None:
        return out
    for cid in ids:
        zone = zones.get(cid)
        if zone is None:
            problems.append(f"card {cid} is not among node {pod.node_name}'s GPU zones")
            continue
        out["cards"].append(
            {
                "id": cid,
                "numa": zone.parent,
                "attributes": dict(zone.attributes),
                "allocatable": {k: str(v) for k, v in sorted(zone.allocatable.items())},
                "consumers": [c for c, _ in zone.allocations],
                "reports_this_pod": reports(zone, pod.uid),
            }
        )
    return out


def pairing_json(pod: Pod, gpu: JSON | None, sriov: JSON | None) -> JSON | None:
    """The pod's cards and VF side by side: the affinity it asked, the VF's PCIe switch
    and NUMA node, and how many of its cards share each (None: it holds not both)."""
    if not gpu or not sriov or not gpu["cards"] or sriov.get("vf") is None:
        return None
    try:
        ask = joint_ask(pod.annotations or {})
        asked = f"{ask.mode} ({ask.source or 'the default'})"
    except ValueError as exc:
        asked = f"unreadable: {exc}"
    attrs = sriov["vf"]["attributes"]
    switch = attrs.get(names.GPU_ATTR_PCIE_SWITCH, "")
    numa = attrs.get(names.GPU_ATTR_NUMA, "")
    cards = [
        {
            "id": c["id"],
            "pcie_switch": c["attributes"].get(names.GPU_ATTR_PCIE_SWITCH, ""),
            "numa": c["attributes"].get(names.GPU_ATTR_NUMA, c["numa"]),
        }
        for c in gpu["cards"]
    ]
    under = sum(1 for c in cards if switch and c["pcie_switch"] == switch)
    near = sum(1 for c in cards if numa and c["numa"] == numa)
    return {
        "asked": asked,
        "vf": sriov["selection"],
        "vf_pcie_switch": switch or None,
        "vf_numa": numa or None,
        "cards": cards,
        "cards_under_vf_switch": under,
        "cards_on_vf_numa": near,
        "closest": "pcie_switch" if under else "numa" if near else "node",
    }
