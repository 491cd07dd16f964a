from __future__ import annotations

import copy
import gc
from typing import Any

import pytest

from pykatalyst.api import names
from pykatalyst.api.objects import CustomNodeResource, Node, Pod, Taint
from pykatalyst.api.qos import QoSError
from pykatalyst.api.quantity import Quantity


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def c(name: str, requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": requests}, **extra}


def make_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "prod",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {names.QOS_LEVEL_ANNOTATION: "shared_cores"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}],
            "futureMetaField": {"kept": True},
        },
        "spec": {"nodeName": "n1", "priority": 100, "schedulerName": "katalyst-scheduler", **spec},
        "status": {"phase": "Running"},
        "unknownTopLevel": [1, 2, 3],
    }


def test_pod_accessors_and_unknown_fields_survive() -> None:
    raw = make_pod(containers=[c("a", {"cpu": "1"})], tolerations=[{"key": "k"}])
    before = copy.deepcopy(raw)
    pod = Pod(raw)
    assert (pod.name, pod.namespace, pod.uid, pod.key) == ("web", "prod", "u-1", "prod/web")
    assert pod.labels == {"app": "web"}
    assert pod.node_name == "n1" and pod.phase == "Running" and pod.priority == 100
    assert pod.scheduler_name == "katalyst-scheduler"
    assert pod.tolerations == [{"key": "k"}]
    assert pod.owner_references[0]["name"] == "web-1"
    assert pod.deletion_timestamp is None
    assert pod.qos().level == "shared_cores"
    assert pod.to_json() is raw
    assert raw == before


def test_default_scheduler_name() -> None:
    raw = make_pod(containers=[])
    del raw["spec"]["schedulerName"]
    assert Pod(raw).scheduler_name == "default-scheduler"


def test_requests_sum_containers_and_overhead() -> None:
    pod = Pod(
        make_pod(
            containers=[c("a", {"cpu": "1", "memory": "1Gi"}), c("b", {"cpu": "500m"})],
            overhead={"cpu": "100m"},
        )
    )
    assert pod.requests() == {"cpu": q("1600m"), "memory": q("1Gi")}
    assert pod.request_milli_cpu() == 1600
    assert pod.request_memory() == 1 << 30


def test_init_container_peak_wins_when_larger() -> None:
    pod = Pod(
        make_pod(
            containers=[c("a", {"cpu": "1", "memory": "1Gi"})],
            initContainers=[c("i", {"cpu": "3"})],
        )
    )
    assert pod.requests() == {"cpu": q("3"), "memory": q("1Gi")}


def test_sidecars_count_alongside_app_containers() -> None:
    # sidecar (1 cpu) runs with the app (2 cpu): 3; the later init container runs next to
    # the sidecar: 2.5 + 1 = 3.5, which is the peak.
    pod = Pod(
        make_pod(
            containers=[c("app", {"cpu": "2"})],
            initContainers=[
                c("proxy", {"cpu": "1"}, restartPolicy="Always"),
                c("migrate", {"cpu": "2500m"}),
            ],
        )
    )
    assert pod.requests() == {"cpu": q("3500m")}
    assert [x.is_sidecar for x in pod.init_containers()] == [True, False]


def test_limits_default_requests() -> None:
    raw = make_pod(containers=[{"name": "a", "resources": {"limits": {"cpu": "2"}}}])
    assert Pod(raw).requests() == {"cpu": q("2")}
    assert Pod(raw).limits() == {"cpu": q("2")}


def test_reclaimed_helpers_read_milli_cpu_values() -> None:
    raw = make_pod(
        containers=[c("a", {names.RECLAIMED_MILLICPU: "4k", names.RECLAIMED_MEMORY: "2Gi"})]
    )
    raw["metadata"]["annotations"][names.QOS_LEVEL_ANNOTATION] = "reclaimed_cores"
    pod = Pod(raw)
    assert pod.reclaimed_milli_cpu() == 4000
    assert pod.reclaimed_memory() == 2 << 30
    assert pod.request_milli_cpu() == 0
    assert pod.qos().is_reclaimed


def test_qos_error_names_the_pod() -> None:
    raw = make_pod(containers=[])
    raw["metadata"]["annotations"][names.QOS_LEVEL_ANNOTATION] = "gold"
    with pytest.raises(QoSError) as info:
        Pod(raw).qos()
    assert info.value.object == "Pod prod/web"
    assert str(info.value).startswith("Pod prod/web: ")


def test_patches_do_not_mutate() -> None:
    raw = make_pod(containers=[])
    before = copy.deepcopy(raw)
    pod = Pod(raw)
    assert pod.annotation_patch({"a": "1", "b": None}) == {
        "metadata": {"annotations": {"a": "1", "b": None}}
    }
    assert pod.node_name_patch("n2") == {"spec": {"nodeName": "n2"}}
    assert raw == before


def test_node_view() -> None:
    raw = {
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "k", "effect": "NoSchedule", "value": "v"}],
        },
        "status": {
            "allocatable": {"cpu": "94", "memory": "376Gi", "pods": "110"},
            "capacity": {"cpu": "96", "memory": "384Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    node = Node(raw)
    assert node.allocatable()["cpu"] == q("94")
    assert node.capacity()["memory"] == q("384Gi")
    assert node.unschedulable and node.ready and node.labels == {"zone": "a"}
    assert node.taints() == [Taint("k", "NoSchedule", "v")]
    assert node.taints_patch([Taint("x", "NoExecute")]) == {
        "spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}
    }


def test_cnr_view_reads_reclaimed_and_numa_zones() -> None:
    raw = {
        "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
        "kind": "CustomNodeResource",
        "metadata": {"name": "n1"},
        "spec": {
            "taints": [{"key": "k", "effect": "NoSchedule", "qosLevel": names.QOS_RECLAIMED_CORES}]
        },
        "status": {
            "resources": {
                "allocatable": {names.RECLAIMED_MILLICPU: "44k", names.RECLAIMED_MEMORY: "80Gi"},
                "capacity": {names.RECLAIMED_MILLICPU: "48k"},
            },
            "topologyPolicy": names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER,
            "topologyZone": [
                {
                    "type": "Socket",
                    "name": "0",
                    "children": [
                        {
                            "type": "Numa",
                            "name": "1",
                            "resources": {"allocatable": {"cpu": "24"}},
                            "allocations": [{"consumer": "prod/web/u-1", "requests": {"cpu": "4"}}],
                        },
                        {"type": "Numa", "name": "0", "resources": {"allocatable": {"cpu": "22"}}},
                    ],
                }
            ],
        },
    }
    cnr = CustomNodeResource(raw)
    assert cnr.reclaimed_milli_cpu() == 44000
    assert cnr.reclaimed_memory() == 80 << 30
    assert cnr.capacity()[names.RECLAIMED_MILLICPU] == q("48k")
    assert cnr.taints()[0].qos_level == names.QOS_RECLAIMED_CORES
    assert cnr.topology_policy == names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER
    numas = cnr.numa_zones()
    assert [z.name for z in numas] == ["0", "1"]
    assert numas[0].parent == "0" and numas[0].allocatable["cpu"] == q("22")
    assert numas[1].allocations == (("prod/web/u-1", {"cpu": q("4")}),)
    patch = cnr.resources_status_patch({names.RECLAIMED_MILLICPU: q("40k")}, {})
    assert patch["status"]["resources"]["allocatable"] == {names.RECLAIMED_MILLICPU: "40k"}


def test_reading_a_cnrs_zones_leaves_no_reference_cycle() -> None:
    # A simulated cluster collects cycles rarely, and a scheduler reads each CNR's zones on
    # every update: zones read and dropped must be freed at once, not left for the collector.
    numa = [
        {"type": "Numa", "name": str(i), "children": [{"type": "GPU", "name": f"g{i}"}]}
        for i in range(2)
    ]
    socket = {"type": "Socket", "name": "0", "children": numa}
    cnr = CustomNodeResource({"metadata": {"name": "n1"}, "status": {"topologyZone": [socket]}})
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            zones = cnr.zones()
            assert [z.name for z in zones] == ["0", "0", "g0", "1", "g1"]
            del zones
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_view_rejects_non_objects() -> None:
    with pytest.raises(TypeError):
        Pod([])  # type: ignore[arg-type]
