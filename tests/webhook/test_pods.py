"""Pod admission: refusals and warnings shared with `katalyst validate`, and the mutators."""

from __future__ import annotations

import json

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.patch import json_patch
from pykatalyst.cluster.protocol import Forbidden
from pykatalyst.webhook.pods import validate_pod
from pykatalyst.webhook.service import WebhookService, install
from tests.webhook.helpers import pod, pod_request

QOS = names.QOS_LEVEL_ANNOTATION


def test_an_unknown_qos_level_is_refused_naming_the_field_and_what_is_accepted() -> None:
    verdict = validate_pod(pod_request(pod(annotations={QOS: "gold_cores"})))
    assert not verdict.allowed
    assert "gold_cores" in verdict.message
    assert QOS in verdict.message
    assert names.QOS_SHARED_CORES in verdict.message


def test_dedicated_cores_without_whole_cpus_is_refused() -> None:
    verdict = validate_pod(pod_request(pod(annotations={QOS: "dedicated_cores"}, cpu="1500m")))
    assert not verdict.allowed


def test_what_katalyst_ignores_is_admitted_with_a_warning() -> None:
    ann = {
        QOS: names.QOS_SHARED_CORES,
        names.MEMORY_ENHANCEMENT_ANNOTATION: json.dumps(
            {"numa_binding": "true", "numa_exclusive": "true"}
        ),
    }
    verdict = validate_pod(pod_request(pod(annotations=ann)))
    assert verdict.allowed
    assert verdict.warnings and "ignore" in verdict.warnings[0]


def _gpu_pod(requests: dict[str, str]) -> dict:  # type: ignore[type-arg]
    raw = pod()
    raw["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": requests}
    return raw


def test_gpu_requests_no_node_can_honour_are_refused_naming_the_field() -> None:
    mem_only = validate_pod(pod_request(_gpu_pod({names.RESOURCE_GPU_MEMORY: "50"})))
    assert not mem_only.allowed
    assert names.RESOURCE_GPU_MEMORY in mem_only.message
    assert f"add {names.RESOURCE_NVIDIA_GPU}" in mem_only.message
    half = {names.RESOURCE_NVIDIA_GPU: "500m", names.RESOURCE_GPU_MEMORY: "50"}
    fractional = validate_pod(pod_request(_gpu_pod(half)))
    assert not fractional.allowed and "whole number" in fractional.message
    shared = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_GPU_MEMORY: "50"}
    assert validate_pod(pod_request(_gpu_pod(shared))).allowed


def test_an_init_container_asking_for_gpu_memory_is_refused_naming_it() -> None:
    shared = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_GPU_MEMORY: "50"}
    raw = _gpu_pod(shared)
    raw["spec"]["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": shared}}
    ]
    verdict = validate_pod(pod_request(raw))
    assert not verdict.allowed
    assert f"spec.initContainers[0].resources.{names.RESOURCE_GPU_MEMORY}" in verdict.message
    # whole cards in an init container are Kubernetes' own (the vendor's plugin serves them)
    whole = {"limits": {names.RESOURCE_NVIDIA_GPU: "1"}}
    raw["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": whole}]
    assert validate_pod(pod_request(raw)).allowed


def test_a_plain_pod_is_admitted_silently() -> None:
    verdict = validate_pod(pod_request(pod()))
    assert verdict.allowed and not verdict.warnings


def _cluster_with_webhook() -> tuple[MemoryCluster, WebhookService]:
    cluster = MemoryCluster(clock=VirtualClock())
    service = WebhookService(cluster)
    install(cluster, service)
    return cluster, service


def _spd(name: str, kind: str, target: str) -> dict:  # type: ignore[type-arg]
    return {
        "apiVersion": names.SERVICE_PROFILE_DESCRIPTOR.api_version,
        "kind": "ServiceProfileDescriptor",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}},
    }


def test_a_pod_of_a_deployment_with_an_spd_gets_the_spd_annotation_from_the_cache() -> None:
    cluster, service = _cluster_with_webhook()
    cluster.create(names.SERVICE_PROFILE_DESCRIPTOR, _spd("web", "Deployment", "web"))
    service.sync(0.0)
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f9", "uid": "u"}
    created = cluster.create(
        names.POD, pod("web-5d4f9-abc", owners=[owner], labels={"pod-template-hash": "5d4f9"})
    )
    assert created["metadata"]["annotations"][names.SPD_NAME_ANNOTATION] == "web"
    # a pod of another workload is left alone
    other = dict(owner, name="api-77")
    plain = cluster.create(names.POD, pod("api-77-x", owners=[other]))
    assert names.SPD_NAME_ANNOTATION not in (plain["metadata"].get("annotations") or {})


def test_an_spd_not_yet_in_the_cache_is_not_looked_up_on_the_admission_path() -> None:
    cluster, _ = _cluster_with_webhook()
    cluster.create(names.SERVICE_PROFILE_DESCRIPTOR, _spd("batch", "StatefulSet", "batch"))
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "batch", "uid": "u"}
    created = cluster.create(names.POD, pod("batch-0", owners=[owner]))
    assert names.SPD_NAME_ANNOTATION not in (created["metadata"].get("annotations") or {})


def test_the_memory_cluster_refuses_what_the_webhook_refuses() -> None:
    cluster, _ = _cluster_with_webhook()
    try:
        cluster.create(names.POD, pod(annotations={QOS: "gold_cores"}))
    except Forbidden as exc:
        assert "gold_cores" in str(exc)
    else:
        raise AssertionError("an invalid QoS level was admitted")


def test_the_memory_cluster_applies_the_node_overcommit_on_status_updates() -> None:
    cluster, _ = _cluster_with_webhook()
    from tests.webhook.helpers import node

    cluster.create(names.NODE, node({names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "2"}))
    current = cluster.get(names.NODE, "node-1")
    updated = cluster.update_status(names.NODE, current)
    assert updated["status"]["allocatable"]["cpu"] == "16"
    assert updated["metadata"]["annotations"][names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION] == "8"


def test_the_spd_patch_keeps_the_other_annotations() -> None:
    cluster, service = _cluster_with_webhook()
    cluster.create(names.SERVICE_PROFILE_DESCRIPTOR, _spd("batch", "StatefulSet", "batch"))
    service.sync(0.0)
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "batch", "uid": "u"}
    obj = pod("batch-0", annotations={"a/b~c": "x"}, owners=[owner])
    verdict = service.routes[1].handler(pod_request(obj))
    out = json_patch(obj, verdict.patch or [])
    assert out["metadata"]["annotations"] == {"a/b~c": "x", names.SPD_NAME_ANNOTATION: "batch"}


def test_an_sriov_nic_count_other_than_one_is_refused_naming_the_field() -> None:
    sriov = names.RESOURCE_SRIOV_NIC
    for bad in ("2", "500m"):
        verdict = validate_pod(pod_request(_gpu_pod({sriov: bad})))
        assert not verdict.allowed, bad
        assert sriov in verdict.message and "accepted: 1" in verdict.message
    garbage = validate_pod(pod_request(_gpu_pod({sriov: "lots"})))
    assert not garbage.allowed and sriov in garbage.message
    assert validate_pod(pod_request(_gpu_pod({sriov: "1"}))).allowed
    two = _gpu_pod({sriov: "1"})
    two["spec"]["containers"].append(
        {"name": "side", "image": "x", "resources": {"limits": {sriov: "1"}}}
    )
    verdict = validate_pod(pod_request(two))
    assert not verdict.allowed and "one VF per pod" in verdict.message


def test_an_unreadable_gpu_rdma_pairing_is_refused_naming_the_annotation() -> None:
    aff = names.GPU_RDMA_AFFINITY_ANNOTATION
    koord = names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION
    ask = {names.RESOURCE_NVIDIA_GPU: "1", names.RESOURCE_SRIOV_NIC: "1"}
    for key, bad, accepted in (
        (aff, "always", "pcie_switch, numa, preferred, none"),
        (koord, '{"deviceTypes":["gpu"]}', '["gpu", "rdma"]'),
        (koord, '{"deviceTypes":["gpu","rdma"],"requiredScope":"PCIe"}', "'SamePCIe'"),
        (koord, "[1", "accepted"),
    ):
        obj = _gpu_pod(ask)
        obj["metadata"]["annotations"] = {key: bad}
        verdict = validate_pod(pod_request(obj))
        assert not verdict.allowed, bad
        assert key in verdict.message and accepted in verdict.message, verdict.message
    for key, good in ((aff, "pcie_switch"), (koord, '{"deviceTypes":["gpu","rdma"]}')):
        obj = _gpu_pod(ask)
        obj["metadata"]["annotations"] = {key: good}
        assert validate_pod(pod_request(obj)).allowed
