"""Hypothesis strategies for pods as an API server stores them, and ill-typed ones, with
every entry point that reads a pod. Shared by the fuzz tests of the suite."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from pykatalyst.agent.eviction.types import pod_info as eviction_pod_info
from pykatalyst.agent.pods import parse_pod
from pykatalyst.api import names
from pykatalyst.api.digest import digest_pod
from pykatalyst.api.manifests import Document
from pykatalyst.api.qos import QoSError, parse_pod_qos
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.validate import Report, _check_document
from pykatalyst.cluster.admission import AdmissionRequest
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.controllers.backstop import read_reclaimed_pod
from pykatalyst.scheduler.extender import ExtenderService
from pykatalyst.scheduler.podinfo import pod_info as scheduler_pod_info
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.webhook.pods import validate_pod

KNOWN_ANNOTATIONS = (
    names.QOS_LEVEL_ANNOTATION,
    names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.CPU_ENHANCEMENT_ANNOTATION,
    names.NETWORK_ENHANCEMENT_ANNOTATION,
    names.NUMA_NUMBER_ANNOTATION,
    names.NUMA_IDS_ANNOTATION,
    names.POD_EVICT_SCORE_ANNOTATION,
)
ENHANCEMENT_KEYS = (
    names.ENH_NUMA_BINDING,
    names.ENH_NUMA_EXCLUSIVE,
    names.ENH_OOM_PRIORITY,
    names.ENH_RSS_OVERUSE_THRESHOLD,
    names.ENH_CPUSET_POOL,
    names.ENH_NUMA_SHARE,
    names.ENH_SUPPRESSION_TOLERANCE_RATE,
    names.ENH_CPU_BURST_POLICY,
    names.ENH_CPU_BURST_PERCENT,
    names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA,
    names.ENH_FULL_PCPUS_PAIRING,
    names.ENH_NAMESPACE_TYPE,
)
RESOURCES = (
    names.RESOURCE_CPU,
    names.RESOURCE_MEMORY,
    names.RECLAIMED_MILLICPU,
    names.RECLAIMED_MEMORY,
    "nvidia.com/gpu",
)

_dns_name = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
_digits = st.integers(1, 5000).map(lambda n: "1" * n)
_quantity = st.one_of(
    st.from_regex(
        r"[+-]?[0-9]{1,22}(\.[0-9]{0,12})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,4})?",
        fullmatch=True,
    ),
    _digits,
    st.text(max_size=12),
)
_scalar_text = st.one_of(
    st.sampled_from(["true", "false", "True", "", "0", "-1", "300", "0,2-3", "0-1023"]),
    st.sampled_from(names.QOS_LEVELS),
    _digits,
    st.text(max_size=20),
)
_enhancement_json = st.one_of(
    st.dictionaries(
        st.sampled_from(ENHANCEMENT_KEYS), st.one_of(_scalar_text, st.integers()), max_size=4
    ).map(json.dumps),
    _digits,
    st.text(max_size=30),
)
_annotation_value = st.one_of(_scalar_text, _enhancement_json)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


def _container(name: str) -> st.SearchStrategy[dict[str, Any]]:
    resources = st.dictionaries(st.sampled_from(RESOURCES), _quantity, max_size=4)
    return st.fixed_dictionaries(
        {"name": st.just(name), "image": st.just("busybox")},
        optional={
            "resources": st.fixed_dictionaries(
                {}, optional={"requests": resources, "limits": resources}
            ),
            "restartPolicy": st.sampled_from(["Always", "Never"]),
        },
    )


@st.composite
def stored_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A pod as an API server stores it: the Pod schema's types, any string values."""
    annotations = draw(
        st.dictionaries(st.sampled_from(KNOWN_ANNOTATIONS), _annotation_value, max_size=5)
    )
    containers = draw(st.lists(st.sampled_from(["a", "b", "c"]).flatmap(_container), max_size=3))
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(_container("init"), max_size=2))
    if draw(st.booleans()):
        spec["overhead"] = draw(st.dictionaries(st.sampled_from(RESOURCES), _quantity, max_size=2))
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["node-1", "node-2"]))
    if draw(st.booleans()):
        spec["priority"] = draw(st.integers(-(2**31), 2**31 - 1))
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": draw(st.text(max_size=5)), "operator": "Exists"}]
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5)))
    if draw(st.booleans()):
        term = {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": draw(st.one_of(_dns_name, _dns_name, st.text(max_size=10))),
            "namespace": "default",
            "uid": draw(st.text(max_size=10)),
            "resourceVersion": draw(st.integers(1, 10**6).map(str)),
            "labels": draw(st.dictionaries(_dns_name, _dns_name | st.just(""), max_size=2)),
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "x"]))},
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(_paths(item, (*prefix, i)))
    return out


@st.composite
def ill_typed_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A stored pod with a few values replaced by JSON of any type (`spec.affinity: "x"`,
    `metadata.labels: [...]`)."""
    pod = draw(stored_pods())
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(pod)
        path = draw(st.sampled_from(paths))
        node: Any = pod
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = draw(json_values)
    return pod


def _validate(pod: Any) -> object:
    _check_document(Document(Path("fuzz.yaml"), 0, pod), Report())
    return None


def _qos(pod: Any) -> object:
    try:
        return parse_pod_qos(pod)
    except QoSError:
        return None


def _cluster() -> MemoryCluster:
    cluster = MemoryCluster(VirtualClock())
    cluster.create(
        names.NODE,
        {
            "metadata": {"name": "node-1"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    return cluster


CLUSTER = _cluster()
EXTENDER = ExtenderService(Scheduler(CLUSTER))


class ExtenderRefused(AssertionError):
    """The extender answered a pod the API server stored with an Error."""


def _stored_then_extender(pod: Any) -> object:
    """The pod through the API server's create (a refusal is an answer: 400 or 422 naming
    the field), then, when stored, the extender's filter and prioritize of the cluster's
    copy, which must answer per node, never with an Error."""
    body = dict(pod) if isinstance(pod, dict) else pod
    if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
        # what the server sets, a client leaves out
        body["metadata"] = {
            k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "uid")
        }
    try:
        stored = CLUSTER.create(names.POD, body)
    except ApiError as exc:
        return exc.code
    meta = stored["metadata"]
    try:
        args = {"Pod": stored, "NodeNames": ["node-1"]}
        result = EXTENDER.filter(args, 0.0)
        if result.get("Error"):
            raise ExtenderRefused(result["Error"])
        EXTENDER.prioritize(args, 0.0)
    finally:
        CLUSTER.delete(names.POD, meta["name"], meta["namespace"], grace_period_seconds=0)
    return result


def _webhook(pod: Any) -> object:
    request = AdmissionRequest(
        uid="fuzz",
        kind=names.POD,
        operation="CREATE",
        name="",
        namespace="default",
        object=pod if isinstance(pod, dict) else None,
        old_object=None,
    )
    return validate_pod(request)


# Every entry point that reads a pod; each must return, never raise.
ENTRY_POINTS: dict[str, Callable[[Any], object]] = {
    "validate": _validate,
    "qos": _qos,
    "pod digest": digest_pod,
    "agent pod parse": parse_pod,
    "scheduler pod parse": scheduler_pod_info,
    "eviction pod info": eviction_pod_info,
    "backstop": read_reclaimed_pod,
    "webhook": _webhook,
    "api server, then extender": _stored_then_extender,
}
