"""The one pod digest agrees with every component's reading of a pod: the scheduler's
PodInfo, the eviction manager's PodInfo, the backstop's ReclaimedPod, the agent's PodSpec
and the Pod view, on pods as an API server stores them and on ill-typed ones."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.eviction.types import pod_info as eviction_pod_info
from pykatalyst.agent.pods import parse_pod
from pykatalyst.api import names
from pykatalyst.api.digest import (
    CONFIG_SOURCE_ANNOTATION,
    MIRROR_POD_ANNOTATION,
    PROBLEM_INVALID_POD,
    PROBLEM_INVALID_QOS,
    PodDigests,
    digest_pod,
)
from pykatalyst.api.objects import Pod
from pykatalyst.controllers.backstop import read_reclaimed_pod
from pykatalyst.scheduler.podinfo import pod_info as scheduler_pod_info
from tests.pod_fuzz import ill_typed_pods, stored_pods

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """Stored pods, with the markers the components read apart: mirror and config-source
    annotations, Node owners, critical priority classes, deletion, legacy reclaimed names."""
    pod = draw(stored_pods())
    meta, spec = pod["metadata"], pod["spec"]
    if draw(st.booleans()):
        meta["annotations"][MIRROR_POD_ANNOTATION] = "abc"
    if draw(st.booleans()):
        meta["annotations"][CONFIG_SOURCE_ANNOTATION] = draw(st.sampled_from(["api", "file"]))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["Node", "ReplicaSet"]))
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": kind, "name": "n", "uid": "o"}]
    if draw(st.booleans()):
        spec["priorityClassName"] = draw(
            st.sampled_from(["system-node-critical", "system-cluster-critical", "batch"])
        )
    if draw(st.booleans()):
        spec["priority"] = draw(st.sampled_from([0, 2_000_000_000, 2_000_001_000, -5]))
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if draw(st.booleans()):
        pod["status"]["phase"] = draw(st.sampled_from(["Failed", "Succeeded", "Running"]))
    if draw(st.booleans()) and spec["containers"]:
        legacy = draw(st.sampled_from(list(names.RESOURCE_ALIASES)))
        res = spec["containers"][0].setdefault("resources", {}).setdefault("requests", {})
        res[legacy] = draw(st.sampled_from(["2k", "1Gi", "500", "0"]))
    if draw(st.booleans()):
        meta["annotations"][names.QOS_LEVEL_ANNOTATION] = names.QOS_RECLAIMED_CORES
    return pod


any_pods = st.one_of(pods(), ill_typed_pods())


@FUZZ
@given(any_pods)
def test_the_scheduler_reads_what_the_digest_reads(raw: dict[str, Any]) -> None:
    d = digest_pod(copy.deepcopy(raw))
    info = scheduler_pod_info(raw)
    assert info.digest == d
    assert (info.uid or info.key, info.key, info.node_name) == (d.uid or d.key, d.key, d.node_name)
    assert (info.terminal, info.deleting) == (d.terminal, d.deleting)
    if not d.readable:
        assert info.problem_reason == PROBLEM_INVALID_POD
        return
    assert info.priority == d.priority and info.labels == d.labels
    assert info.qos == d.qos
    if d.problem_reason:
        # the scheduler reports the digest's problem (a request it cannot score is its own)
        assert info.problem_reason == d.problem_reason
    if not info.problem_reason:
        cpu = d.request(names.RESOURCE_CPU)
        if d.qos is not None and d.qos.is_dedicated:
            cpu = -(-cpu // 1000) * 1000  # whole cores, what the agent allocates
        assert info.requests == {**d.requests, **({names.RESOURCE_CPU: cpu} if cpu else {})}


@FUZZ
@given(any_pods)
def test_eviction_reads_what_the_digest_reads(raw: dict[str, Any]) -> None:
    d = digest_pod(raw)
    info = eviction_pod_info(raw)
    assert (info.uid, info.namespace, info.name) == (d.uid, d.namespace, d.name)
    assert info.static == d.static
    if not d.readable:
        return
    assert info.qos_level == d.level
    assert (info.priority, info.priority_class_name) == (d.priority, d.priority_class_name)
    assert info.terminating == d.deleting
    assert dict(info.annotations) == dict(d.annotations) and dict(info.labels) == d.labels
    assert info.reclaimed_milli_cpu == d.request(names.RECLAIMED_MILLICPU)
    assert info.reclaimed_memory == d.request(names.LEGACY_RECLAIMED_MEMORY)
    assert info.request_milli_cpu == d.request(names.RESOURCE_CPU)


@FUZZ
@given(any_pods)
def test_the_backstop_reads_what_the_digest_reads(raw: dict[str, Any]) -> None:
    d = digest_pod(raw)
    pod, skipped = read_reclaimed_pod(raw)
    if not d.readable:
        # (a pod whose annotations do not ask for reclaimed_cores is passed over unread)
        assert pod is None and skipped in ("", "unreadable", "invalid-qos")
        return
    reclaimed = d.qos is not None and d.qos.is_reclaimed
    assert (pod is not None) == reclaimed
    if d.problem_reason == PROBLEM_INVALID_QOS:
        assert pod is None and skipped in ("", "invalid-qos")
    if pod is not None:
        assert (pod.uid, pod.key, pod.node) == (d.uid, d.key, d.node_name)
        assert pod.terminating == (d.deleting or d.terminal)
        critical = d.priority >= 2_000_000_000 or d.priority_class_name in (
            "system-node-critical",
            "system-cluster-critical",
        )
        assert pod.protected == ("critical pod" if critical else "static pod" if d.static else "")


@FUZZ
@given(any_pods)
def test_the_agent_reads_what_the_digest_reads(raw: dict[str, Any]) -> None:
    d = digest_pod(raw)
    spec = parse_pod(raw)
    assert spec.digest == d  # the agent's view holds the digest, and reads the pod no other way
    assert (spec.uid, spec.namespace, spec.name) == (d.uid, d.namespace, d.name)
    if not d.readable:
        assert spec.error is not None and spec.qos is None
        return
    assert (spec.terminating, spec.finished) == (d.deleting, d.terminal)
    if d.problem_reason == PROBLEM_INVALID_QOS:
        assert spec.error is not None and spec.qos is None
    if not d.problem_reason:
        assert spec.error is None and spec.qos == d.qos and spec.level == d.level
        assert spec.reclaimed_milli_cpu == d.request(names.RECLAIMED_MILLICPU)
        assert spec.reclaimed_memory == d.request(names.RECLAIMED_MEMORY)
        assert spec.memory_request == d.request(names.RESOURCE_MEMORY)
        assert round(spec.request_cores * 1000) == d.request(names.RESOURCE_CPU)


@FUZZ
@given(pods())
def test_the_pod_view_reads_what_the_digest_reads(raw: dict[str, Any]) -> None:
    d = digest_pod(raw)
    if not d.readable:
        return
    pod = Pod(raw)
    assert (pod.priority, pod.is_terminated, pod.node_name) == (d.priority, d.terminal, d.node_name)
    assert (pod.deletion_timestamp is not None) == d.deleting
    assert pod.labels == d.labels and pod.annotations == dict(d.annotations)
    if not d.problem_reason:
        assert pod.reclaimed_milli_cpu() == d.request(names.RECLAIMED_MILLICPU)
        assert pod.request_memory() == d.request(names.RESOURCE_MEMORY)


def test_static_mirror_and_protection_are_read_one_way() -> None:
    base = {
        "metadata": {"name": "p", "namespace": "kube-system", "uid": "u", "annotations": {}},
        "spec": {"containers": [{"name": "c"}]},
    }
    mirror = copy.deepcopy(base)
    mirror["metadata"]["annotations"] = {
        MIRROR_POD_ANNOTATION: "h",
        CONFIG_SOURCE_ANNOTATION: "file",
    }
    from_file = copy.deepcopy(base)
    from_file["metadata"]["annotations"] = {CONFIG_SOURCE_ANNOTATION: "file"}
    owned = copy.deepcopy(base)
    owned["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "n1", "uid": "x"}]
    critical = copy.deepcopy(mirror)
    critical["spec"]["priorityClassName"] = "system-node-critical"
    got = [digest_pod(p) for p in (base, mirror, from_file, owned, critical)]
    assert [(g.mirror, g.static) for g in got] == [
        (False, False),
        (True, True),
        (False, True),
        (False, True),
        (True, True),
    ]
    assert [g.protection for g in got] == [
        "",
        "static pod",
        "static pod",
        "static pod",
        "critical pod",
    ]


def test_a_legacy_reclaimed_name_adds_to_the_current_one() -> None:
    req = {names.RECLAIMED_MILLICPU: "1k", names.LEGACY_RECLAIMED_MILLICPU: "2k"}
    raw = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": req}}]},
    }
    d = digest_pod(raw)
    assert d.request(names.RECLAIMED_MILLICPU) == d.request(names.LEGACY_RECLAIMED_MILLICPU) == 3000
    assert eviction_pod_info(raw).reclaimed_milli_cpu == 3000
    assert parse_pod(raw).reclaimed_milli_cpu == 3000
    assert scheduler_pod_info(raw).request(names.RECLAIMED_MILLICPU) == 3000


def test_digests_are_read_once_per_resource_version() -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "c"}]},
    }
    cache = PodDigests()
    first = cache.get(raw)
    assert cache.get(copy.deepcopy(raw)) is first
    changed = copy.deepcopy(raw)
    changed["metadata"]["resourceVersion"] = "2"
    changed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    again = cache.get(changed)
    assert again is not first and again.deleting
    assert cache.refresh([changed])["u"] is again
    assert cache.refresh([]) == {} and cache.get(changed) is not again  # forgotten
