"""API-server conformance tests for any `Cluster` implementation.

This module holds tests only; a test module imports them (`from tests.apiserver.conformance
import *`) and provides these fixtures:

- `cluster`: a fresh `Cluster` per test in which the namespaces "default" and
  "kube-system" exist and the core and Katalyst kinds are served.
- `clock`: the `VirtualClock` that stamps `cluster`'s timestamps, or None when the
  implementation's time cannot be controlled (tests that need it skip).
- `backend`: the `MemoryCluster` that holds `cluster`'s state (the same object when
  `cluster` is a MemoryCluster, the store behind the server for a remote run), or None.
  Tests that install admission plugins, an eviction guard or trigger bookmarks use it and
  skip without it; they still act through `cluster`, so a remote run checks the wire.
- `small_history_cluster`: a fresh `Cluster` whose watch history keeps only
  `SMALL_HISTORY` events.

Watches are read with a short wait so that events travelling over a network arrive; the
in-memory implementation delivers them at once. resourceVersions are compared as integers,
which MemoryCluster (and anything serving it) guarantees and a real API server does not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from pykatalyst.api.names import (
    CONFIG_MAP,
    CUSTOM_NODE_RESOURCE,
    EVENT,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    Kind,
)
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import (
    JSON,
    AlreadyExists,
    ApiError,
    BadRequest,
    Cluster,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    TooManyRequests,
    Watch,
    WatchEvent,
)

SMALL_HISTORY = 5
WAIT = 2.0  # seconds to wait for an expected event (remote runs)
QUIET = 0.2  # seconds to wait before concluding no event is coming


# --- helpers ------------------------------------------------------------------------------


def pod(
    name: str,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    node: str | None = None,
    grace: int | None = None,
) -> JSON:
    spec: JSON = {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: JSON = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def node(name: str, labels: dict[str, str] | None = None) -> JSON:
    meta: JSON = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {}}


def config_map(name: str, data: dict[str, str] | None = None, **meta: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", **meta},
        "data": data or {},
    }


def cnr(name: str) -> JSON:
    return {
        "apiVersion": CUSTOM_NODE_RESOURCE.api_version,
        "kind": CUSTOM_NODE_RESOURCE.kind,
        "metadata": {"name": name},
        "spec": {"nodeResourceProperties": []},
    }


def rv(obj: JSON) -> int:
    return int(obj["metadata"]["resourceVersion"])


def names(items: list[JSON]) -> list[str]:
    return [o["metadata"]["name"] for o in items]


def collect(w: Watch, n: int, wait: float = WAIT, bookmarks: bool = False) -> list[WatchEvent]:
    """Read until `n` events arrived (BOOKMARKs are skipped unless asked for)."""
    out: list[WatchEvent] = []
    deadline = time.monotonic() + wait
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for ev in w.next_events(timeout=min(left, 0.1)):
            if ev.type != "BOOKMARK" or bookmarks:
                out.append(ev)
    return out


def quiet(w: Watch) -> list[WatchEvent]:
    """Events (other than BOOKMARKs) that show up within a short wait."""
    return [e for e in collect(w, 1_000_000, wait=QUIET) if e.type != "BOOKMARK"]


def summary(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.object["metadata"]["name"]) for e in events]


def need(value: Any, what: str) -> Any:
    if value is None:
        pytest.skip(f"this implementation provides no {what}")
    return value


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    opened: list[Watch] = []
    yield opened
    for w in opened:
        w.close()


# --- create / get / list ------------------------------------------------------------------


def test_implements_the_protocol(cluster: Cluster) -> None:
    assert isinstance(cluster, Cluster)


def test_create_sets_server_fields(cluster: Cluster) -> None:
    created = cluster.create(POD, pod("p1"))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    assert meta["generation"] == 1
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert cluster.get(POD, "p1", "default") == created


def test_creation_timestamp_follows_the_clock(cluster: Cluster, clock: VirtualClock | None) -> None:
    clock = need(clock, "controllable clock")
    clock.advance(3600)
    created = cluster.create(NODE, node("n1"))
    assert created["metadata"]["creationTimestamp"] == rfc3339(clock.now())


def test_uids_are_unique(cluster: Cluster) -> None:
    uids = {cluster.create(POD, pod(f"p{i}"))["metadata"]["uid"] for i in range(5)}
    assert len(uids) == 5


def test_returned_objects_are_copies(cluster: Cluster) -> None:
    manifest = pod("p1", labels={"app": "a"})
    created = cluster.create(POD, manifest)
    manifest["metadata"]["labels"]["app"] = "changed-input"
    created["metadata"]["labels"]["app"] = "changed-output"
    fetched = cluster.get(POD, "p1", "default")
    assert fetched["metadata"]["labels"] == {"app": "a"}
    fetched["spec"]["containers"].clear()
    listed = cluster.list(POD, "default").items
    assert listed[0]["spec"]["containers"][0]["name"] == "main"


def test_list_is_ordered_by_namespace_then_name(cluster: Cluster) -> None:
    for ns, name in [
        ("kube-system", "b"),
        ("default", "c"),
        ("default", "a"),
        ("kube-system", "a"),
    ]:
        cluster.create(POD, pod(name, ns))
    items = cluster.list(POD).items
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items] == [
        ("default", "a"),
        ("default", "c"),
        ("kube-system", "a"),
        ("kube-system", "b"),
    ]
    assert names(cluster.list(POD, "kube-system").items) == ["a", "b"]


def test_list_version_covers_its_items(cluster: Cluster) -> None:
    for i in range(3):
        cluster.create(POD, pod(f"p{i}"))
    result = cluster.list(POD, "default")
    assert int(result.resource_version) >= max(rv(o) for o in result.items)


def test_resource_version_increases_across_kinds(cluster: Cluster) -> None:
    a = cluster.create(POD, pod("p1"))
    b = cluster.create(NODE, node("n1"))
    c = cluster.create(CONFIG_MAP, config_map("c1"))
    d = cluster.patch(POD, "p1", {"metadata": {"labels": {"x": "y"}}}, "default")
    assert rv(a) < rv(b) < rv(c) < rv(d)


def test_create_existing_is_already_exists(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1"))
    with pytest.raises(AlreadyExists) as err:
        cluster.create(POD, pod("p1"))
    assert err.value.code == 409 and err.value.reason == "AlreadyExists"
    assert '"p1"' in err.value.message and "already exists" in err.value.message


def test_same_name_in_other_namespace_is_fine(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", "default"))
    cluster.create(POD, pod("p1", "kube-system"))
    assert len(cluster.list(POD).items) == 2


def test_get_missing_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound) as err:
        cluster.get(POD, "nope", "default")
    assert err.value.code == 404
    assert err.value.message == 'pods "nope" not found'


def test_create_in_missing_namespace_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound) as err:
        cluster.create(POD, pod("p1", "no-such-ns"))
    assert "no-such-ns" in err.value.message


def test_invalid_name_is_rejected_naming_the_field(cluster: Cluster) -> None:
    with pytest.raises(Invalid) as err:
        cluster.create(POD, pod("Not_Valid"))
    assert err.value.code == 422 and "metadata.name" in err.value.message
    assert cluster.list(POD).items == []


@pytest.mark.parametrize(
    ("labels", "field"),
    [({"app": "has space"}, "metadata.labels"), ({"bad key!": "x"}, "metadata.labels")],
)
def test_invalid_labels_are_rejected(cluster: Cluster, labels: dict[str, str], field: str) -> None:
    with pytest.raises(Invalid) as err:
        cluster.create(POD, pod("p1", labels=labels))
    assert field in err.value.message


def test_generate_name(cluster: Cluster) -> None:
    manifest = pod("x")
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "web-"
    a = cluster.create(POD, manifest)
    b = cluster.create(POD, manifest)
    assert a["metadata"]["name"].startswith("web-") and b["metadata"]["name"].startswith("web-")
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert len(a["metadata"]["name"]) > len("web-")


def test_cluster_scoped_kind_has_no_namespace(cluster: Cluster) -> None:
    created = cluster.create(NODE, node("n1"))
    assert "namespace" not in created["metadata"]
    assert cluster.get(NODE, "n1")["metadata"]["name"] == "n1"


def test_custom_resources_are_served(cluster: Cluster) -> None:
    # A live cluster's real nodes have their CNRs already.
    before = names(cluster.list(CUSTOM_NODE_RESOURCE).items)
    created = cluster.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    assert created["apiVersion"] == CUSTOM_NODE_RESOURCE.api_version
    assert names(cluster.list(CUSTOM_NODE_RESOURCE).items) == sorted([*before, "n1"])


def test_unknown_kind_is_not_found(cluster: Cluster) -> None:
    gadget = Kind("example.com", "v1", "Gadget", "gadgets", True)
    with pytest.raises(NotFound):
        cluster.list(gadget)


CRD_KIND = Kind(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)


SCALE_PATHS: JSON = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def serve_crd(
    cluster: Cluster, kind: Kind, status_subresource: bool = True, scale: bool = False
) -> None:
    """Create a CRD for `kind` (group example.com, any content) and wait until it is served:
    a real server serves the new kind once the CRD is Established, a moment later."""
    version: JSON = {
        "name": kind.version,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if status_subresource:
        version["subresources"] = {"status": {}}
    if scale:
        version["subresources"] = {**version.get("subresources", {}), "scale": SCALE_PATHS}
    cluster.create(
        CRD_KIND,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{kind.plural}.{kind.group}"},
            "spec": {
                "group": kind.group,
                "scope": "Namespaced" if kind.namespaced else "Cluster",
                "names": {
                    "kind": kind.kind,
                    "plural": kind.plural,
                    "singular": kind.kind.lower(),
                },
                "versions": [version],
            },
        },
    )
    served_by = time.monotonic() + WAIT
    while True:
        try:
            cluster.list(kind, "default" if kind.namespaced else None)
            return
        except NotFound:
            if time.monotonic() > served_by:
                raise
            time.sleep(0.05)


def widget(name: str, **body: Any) -> JSON:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        **body,
    }


WIDGET = Kind("example.com", "v1", "Widget", "widgets", True)


def test_creating_a_crd_serves_its_kind(cluster: Cluster) -> None:
    serve_crd(cluster, WIDGET)
    made = cluster.create(WIDGET, widget("w1", spec={"size": 3}))
    assert made["spec"] == {"size": 3} and made["metadata"]["generation"] == 1
    assert names(cluster.list(WIDGET, "default").items) == ["w1"]


def test_a_crd_status_subresource_splits_the_writes(cluster: Cluster) -> None:
    serve_crd(cluster, WIDGET)
    made = cluster.create(WIDGET, widget("w1", spec={"size": 3}, status={"ready": True}))
    assert "status" not in made
    made["status"] = {"ready": True}
    made["spec"] = {"size": 4}
    updated = cluster.update(WIDGET, made)
    assert "status" not in updated and updated["metadata"]["generation"] == 2
    updated["status"] = {"ready": True}
    updated["spec"] = {"size": 5}
    updated["metadata"]["labels"] = {"a": "b"}
    after = cluster.update_status(WIDGET, updated)
    assert after["status"] == {"ready": True} and after["spec"] == {"size": 4}
    assert "labels" not in after["metadata"] and after["metadata"]["generation"] == 2


GADGET = Kind("example.com", "v1", "Gadget", "gadgets", True)


def test_a_crd_without_status_subresource_writes_status_as_data(cluster: Cluster) -> None:
    serve_crd(cluster, GADGET, status_subresource=False)
    body = {**widget("g1", spec={"size": 3}, status={"ready": False}), "kind": "Gadget"}
    made = cluster.create(GADGET, body)
    assert made["status"] == {"ready": False}
    made["status"] = {"ready": True}
    updated = cluster.update(GADGET, made)
    # Without the subresource, status is content: written, and counted in generation.
    assert updated["status"] == {"ready": True} and updated["metadata"]["generation"] == 2
    with pytest.raises(NotFound):
        cluster.patch(GADGET, "g1", {"status": {"ready": False}}, "default", subresource="status")


SCALED = Kind("example.com", "v1", "Scaled", "scaleds", True)


def test_a_crd_scale_subresource_reads_and_writes_the_replicas(cluster: Cluster) -> None:
    serve_crd(cluster, SCALED, scale=True)
    body = {**widget("s1", spec={"replicas": 1, "size": 3}), "kind": "Scaled"}
    made = cluster.create(SCALED, body)
    made["status"] = {"replicas": 1, "selector": "app=s1"}
    made = cluster.update_status(SCALED, made)
    got = cluster.patch(SCALED, "s1", {"spec": {"replicas": 3}}, "default", subresource="scale")
    assert (got["apiVersion"], got["kind"]) == ("autoscaling/v1", "Scale")
    assert got["metadata"]["name"] == "s1" and got["metadata"]["uid"] == made["metadata"]["uid"]
    assert got["spec"] == {"replicas": 3}
    assert got["status"] == {"replicas": 1, "selector": "app=s1"}
    after = cluster.get(SCALED, "s1", "default")
    # only the replicas change, a spec change like any other
    assert after["spec"] == {"replicas": 3, "size": 3} and after["status"] == made["status"]
    assert after["metadata"]["generation"] == 2
    assert got["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    with pytest.raises(Invalid, match=r"spec\.replicas"):
        cluster.patch(SCALED, "s1", {"spec": {"replicas": -1}}, "default", subresource="scale")
    stale = {"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]}}
    with pytest.raises(Conflict):
        cluster.patch(
            SCALED, "s1", {**stale, "spec": {"replicas": 5}}, "default", subresource="scale"
        )
    assert cluster.get(SCALED, "s1", "default")["spec"]["replicas"] == 3


def test_a_kind_without_a_scale_subresource_has_none(cluster: Cluster) -> None:
    serve_crd(cluster, WIDGET)
    cluster.create(WIDGET, widget("w1", spec={"replicas": 1}))
    with pytest.raises(NotFound):
        cluster.patch(WIDGET, "w1", {"spec": {"replicas": 2}}, "default", subresource="scale")
    assert cluster.get(WIDGET, "w1", "default")["spec"] == {"replicas": 1}


def event(namespace: str, involved: JSON, **extra: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "e-", "namespace": namespace},
        "involvedObject": involved,
        "reason": "Tested",
        "message": "m",
        "type": "Normal",
        "source": {"component": "conformance"},
        **extra,
    }


def test_events_belong_to_their_objects_namespace(cluster: Cluster) -> None:
    pod_ref = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "default"}
    node_ref = {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    made = [cluster.create(EVENT, event("default", ref)) for ref in (pod_ref, node_ref)]
    for ns, ref in (("kube-system", pod_ref), ("kube-system", node_ref)):
        with pytest.raises(Invalid) as err:
            cluster.create(EVENT, event(ns, ref))
        assert "involvedObject.namespace" in err.value.message
    # An event with an eventTime must say who reported it.
    timed = {"eventTime": "2026-01-01T00:00:00.000000Z", "action": "Test"}
    with pytest.raises(Invalid) as err:
        cluster.create(EVENT, event("default", pod_ref, **timed))
    assert "reportingComponent" in err.value.message
    reported = {**timed, "reportingComponent": "conformance", "reportingInstance": "i1"}
    made.append(cluster.create(EVENT, event("kube-system", node_ref, **reported)))
    listed = {
        (e["metadata"]["namespace"], e["metadata"]["name"]) for e in cluster.list(EVENT).items
    }
    assert {(e["metadata"]["namespace"], e["metadata"]["name"]) for e in made} <= listed


# --- update and optimistic concurrency ----------------------------------------------------


def test_stale_update_conflicts(cluster: Cluster) -> None:
    first = cluster.create(POD, pod("p1"))
    current = cluster.patch(POD, "p1", {"metadata": {"labels": {"v": "2"}}}, "default")
    first["metadata"]["labels"] = {"v": "stale"}
    with pytest.raises(Conflict) as err:
        cluster.update(POD, first)
    assert err.value.code == 409
    assert "the object has been modified" in err.value.message
    assert cluster.get(POD, "p1", "default") == current


def test_update_with_current_version_succeeds(cluster: Cluster) -> None:
    obj = cluster.create(POD, pod("p1"))
    obj["metadata"]["labels"] = {"a": "b"}
    updated = cluster.update(POD, obj)
    assert updated["metadata"]["labels"] == {"a": "b"}
    assert rv(updated) > rv(obj)
    assert updated["metadata"]["uid"] == obj["metadata"]["uid"]


def test_update_without_version_is_unconditional_for_core_kinds(cluster: Cluster) -> None:
    obj = cluster.create(CONFIG_MAP, config_map("c1", {"k": "1"}))
    cluster.patch(CONFIG_MAP, "c1", {"data": {"k": "2"}}, "default")
    del obj["metadata"]["resourceVersion"]
    obj["data"] = {"k": "3"}
    assert cluster.update(CONFIG_MAP, obj)["data"] == {"k": "3"}


def test_update_of_custom_resource_needs_a_version(cluster: Cluster) -> None:
    obj = cluster.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    del obj["metadata"]["resourceVersion"]
    with pytest.raises(Invalid) as err:
        cluster.update(CUSTOM_NODE_RESOURCE, obj)
    assert "resourceVersion" in err.value.message


def test_update_missing_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.update(POD, pod("ghost"))


def test_pod_spec_is_immutable_but_for_a_few_fields(cluster: Cluster) -> None:
    created = cluster.create(POD, pod("p1"))
    created["spec"]["nodeName"] = "n1"
    with pytest.raises(Invalid) as err:
        cluster.update(POD, created)
    assert err.value.code == 422 and "spec" in err.value.message
    with pytest.raises(Invalid):
        cluster.patch(
            POD,
            "p1",
            {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}},
            "default",
            patch_type="strategic",
        )
    image = cluster.patch(
        POD,
        "p1",
        {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}},
        "default",
        patch_type="strategic",
    )
    assert image["spec"]["containers"][0]["image"] == "busybox:2"
    assert image["spec"].get("nodeName") is None


def test_generation_counts_spec_changes_only(cluster: Cluster) -> None:
    obj = cluster.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    assert obj["metadata"]["generation"] == 1
    labelled = cluster.patch(CUSTOM_NODE_RESOURCE, "n1", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    with_status = cluster.patch(
        CUSTOM_NODE_RESOURCE, "n1", {"status": {"resources": {}}}, subresource="status"
    )
    assert with_status["metadata"]["generation"] == 1
    respecced = cluster.patch(
        CUSTOM_NODE_RESOURCE, "n1", {"spec": {"nodeResourceProperties": [{"propertyName": "x"}]}}
    )
    assert respecced["metadata"]["generation"] == 2
    assert obj["metadata"]["uid"] == respecced["metadata"]["uid"]


def test_pod_generation_counts_spec_changes_but_not_binding(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1"))
    labelled = cluster.patch(POD, "p1", {"metadata": {"labels": {"a": "b"}}}, "default")
    assert labelled["metadata"]["generation"] == 1
    cluster.bind("default", "p1", "n1")
    assert cluster.get(POD, "p1", "default")["metadata"]["generation"] == 1
    image = cluster.patch(
        POD,
        "p1",
        {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}},
        "default",
        patch_type="strategic",
    )
    assert image["metadata"]["generation"] == 2
    # The first graceful deletion counts as a change too; shortening it does not.
    marked = cluster.delete(POD, "p1", "default", grace_period_seconds=30)
    assert marked is not None and marked["metadata"]["generation"] == 3
    shorter = cluster.delete(POD, "p1", "default", grace_period_seconds=10)
    assert shorter is not None and shorter["metadata"]["generation"] == 3


@pytest.mark.parametrize(
    ("kind", "manifest"), [(NODE, node("n1")), (CONFIG_MAP, config_map("n1", {"k": "v"}))]
)
def test_nodes_and_config_maps_have_no_generation(
    cluster: Cluster, kind: Kind, manifest: JSON
) -> None:
    ns = "default" if kind.namespaced else None
    created = cluster.create(kind, manifest)
    assert "generation" not in created["metadata"]
    change = {"spec": {"unschedulable": True}} if kind == NODE else {"data": {"k": "w"}}
    changed = cluster.patch(kind, "n1", change, ns)
    assert "generation" not in changed["metadata"]


def test_noop_update_changes_nothing(cluster: Cluster) -> None:
    obj = cluster.create(CONFIG_MAP, config_map("c1", {"k": "v"}))
    again = cluster.update(CONFIG_MAP, obj)
    assert rv(again) == rv(obj)


# --- selectors ----------------------------------------------------------------------------


@pytest.fixture
def labelled_pods(cluster: Cluster) -> Cluster:
    cluster.create(POD, pod("a", labels={"app": "web", "tier": "front"}))
    cluster.create(POD, pod("b", labels={"app": "web", "tier": "back"}))
    cluster.create(POD, pod("c", labels={"app": "db"}))
    cluster.create(POD, pod("d"))
    return cluster


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("app in (web,db)", ["a", "b", "c"]),
        ("app notin (web)", ["c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=web,tier=back", ["b"]),
        ("app=web,!tier", []),
        ("app in (db), app notin (db)", []),
        ("", ["a", "b", "c", "d"]),
    ],
)
def test_label_selectors(labelled_pods: Cluster, selector: str, expected: list[str]) -> None:
    assert names(labelled_pods.list(POD, "default", label_selector=selector).items) == expected


def test_malformed_label_selector_is_bad_request(cluster: Cluster) -> None:
    with pytest.raises(BadRequest):
        cluster.list(POD, label_selector="app in web")


def test_field_selectors(cluster: Cluster) -> None:
    cluster.create(POD, pod("a", node="n1"))
    cluster.create(POD, pod("b", node="n2"))
    cluster.create(POD, pod("c"))
    cluster.create(POD, pod("a", "kube-system", node="n1"))

    def sel(s: str) -> list[str]:
        return [
            f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in cluster.list(POD, field_selector=s).items
        ]

    assert sel("spec.nodeName=n1") == ["default/a", "kube-system/a"]
    assert sel("spec.nodeName==n2") == ["default/b"]
    assert sel("spec.nodeName=") == ["default/c"]
    assert sel("spec.nodeName!=n1") == ["default/b", "default/c"]
    assert sel("metadata.name=a,metadata.namespace=kube-system") == ["kube-system/a"]
    assert sel("status.phase=Pending,spec.nodeName=n2") == ["default/b"]
    assert sel("status.phase=Running") == []


def test_node_field_selectors(cluster: Cluster) -> None:
    cluster.create(NODE, node("n1"))
    cordoned = node("n2")
    cordoned["spec"] = {"unschedulable": True}
    cluster.create(NODE, cordoned)

    def sel(s: str) -> list[str]:
        return [n for n in names(cluster.list(NODE, field_selector=s).items) if n in ("n1", "n2")]

    # An unset spec.unschedulable selects as false.
    assert sel("spec.unschedulable=false") == ["n1"]
    assert sel("spec.unschedulable!=false") == ["n2"]
    assert sel("metadata.name=n2") == ["n2"]


def test_unsupported_field_selector_is_bad_request(cluster: Cluster) -> None:
    with pytest.raises(BadRequest) as err:
        cluster.list(POD, field_selector="spec.hostname=x")
    assert err.value.code == 400 and "spec.hostname" in err.value.message


# --- watch --------------------------------------------------------------------------------


def test_watch_from_version_sees_changes_in_order(cluster: Cluster, watches: list[Watch]) -> None:
    start = cluster.list(POD, "default").resource_version
    w = cluster.watch(POD, "default", resource_version=start)
    watches.append(w)
    cluster.create(POD, pod("p1"))
    cluster.patch(POD, "p1", {"metadata": {"labels": {"a": "b"}}}, "default")
    cluster.create(POD, pod("p2"))
    assert cluster.delete(POD, "p1", "default") is None
    events = collect(w, 5)
    # An unbound pod goes at once, but its deletion is written first: MODIFIED, then DELETED.
    assert summary(events) == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("ADDED", "p2"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]
    versions = [rv(e.object) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 5
    assert events[1].object["metadata"]["labels"] == {"a": "b"}
    for ev in events[3:]:
        assert ev.object["metadata"]["deletionGracePeriodSeconds"] == 0
        assert "deletionTimestamp" in ev.object["metadata"]
    assert quiet(w) == []


def test_watch_replays_from_an_older_version(cluster: Cluster, watches: list[Watch]) -> None:
    first = cluster.create(POD, pod("p1"))
    cluster.create(POD, pod("p2"))
    cluster.create(POD, pod("p3"))
    w = cluster.watch(POD, "default", resource_version=first["metadata"]["resourceVersion"])
    watches.append(w)
    assert summary(collect(w, 2)) == [("ADDED", "p2"), ("ADDED", "p3")]


def test_watch_without_version_starts_with_current_objects(
    cluster: Cluster, watches: list[Watch]
) -> None:
    cluster.create(POD, pod("b"))
    cluster.create(POD, pod("a"))
    w = cluster.watch(POD, "default")
    watches.append(w)
    initial = collect(w, 2)
    assert sorted(summary(initial)) == [("ADDED", "a"), ("ADDED", "b")]
    cluster.create(POD, pod("c"))
    assert summary(collect(w, 1)) == [("ADDED", "c")]


def test_watch_from_version_zero_starts_with_current_objects(
    cluster: Cluster, watches: list[Watch]
) -> None:
    cluster.create(POD, pod("a"))
    w = cluster.watch(POD, "default", resource_version="0")
    watches.append(w)
    assert summary(collect(w, 1)) == [("ADDED", "a")]
    cluster.create(POD, pod("b"))
    assert summary(collect(w, 1)) == [("ADDED", "b")]
    assert quiet(w) == []


def test_watch_filters_by_namespace(cluster: Cluster, watches: list[Watch]) -> None:
    start = cluster.list(POD).resource_version
    w = cluster.watch(POD, "kube-system", resource_version=start)
    watches.append(w)
    cluster.create(POD, pod("x", "default"))
    cluster.create(POD, pod("y", "kube-system"))
    assert summary(collect(w, 1)) == [("ADDED", "y")]
    assert quiet(w) == []


def test_watch_filters_by_kind(cluster: Cluster, watches: list[Watch]) -> None:
    start = cluster.list(NODE).resource_version
    w = cluster.watch(NODE, resource_version=start)
    watches.append(w)
    cluster.create(POD, pod("p1"))
    cluster.create(NODE, node("n1"))
    assert summary(collect(w, 1)) == [("ADDED", "n1")]


def test_label_selected_watch_sees_objects_enter_and_leave(
    cluster: Cluster, watches: list[Watch]
) -> None:
    cluster.create(POD, pod("p1", labels={"app": "web"}))
    start = cluster.list(POD).resource_version
    w = cluster.watch(POD, "default", resource_version=start, label_selector="app=web")
    watches.append(w)
    cluster.patch(POD, "p1", {"metadata": {"labels": {"app": "db"}}}, "default")
    cluster.patch(POD, "p1", {"metadata": {"labels": {"extra": "1"}}}, "default")
    cluster.patch(POD, "p1", {"metadata": {"labels": {"app": "web"}}}, "default")
    cluster.patch(POD, "p1", {"metadata": {"labels": {"extra": "2"}}}, "default")
    events = collect(w, 3)
    assert summary(events) == [("DELETED", "p1"), ("ADDED", "p1"), ("MODIFIED", "p1")]
    # The leaving event carries the last matching content at the new version.
    assert events[0].object["metadata"]["labels"] == {"app": "web"}
    assert rv(events[0].object) > int(start)
    assert quiet(w) == []


def test_field_selected_watch_sees_a_pod_bound_to_its_node(
    cluster: Cluster, watches: list[Watch]
) -> None:
    cluster.create(POD, pod("p1"))
    start = cluster.list(POD).resource_version
    w = cluster.watch(POD, resource_version=start, field_selector="spec.nodeName=n1")
    watches.append(w)
    cluster.bind("default", "p1", "n1")
    events = collect(w, 1)
    assert summary(events) == [("ADDED", "p1")]
    assert events[0].object["spec"]["nodeName"] == "n1"
    cluster.delete(POD, "p1", "default", grace_period_seconds=0)
    assert summary(collect(w, 2)) == [("MODIFIED", "p1"), ("DELETED", "p1")]


def test_bookmarks_carry_the_current_version(
    cluster: Cluster, backend: MemoryCluster | None, watches: list[Watch]
) -> None:
    store = need(backend, "backend store")
    start = cluster.list(POD).resource_version
    w = cluster.watch(POD, resource_version=start, allow_bookmarks=True)
    plain = cluster.watch(POD, resource_version=start)
    watches.extend([w, plain])
    cluster.create(NODE, node("n1"))
    version = store.bookmark()
    events = collect(w, 1, bookmarks=True)
    assert [e.type for e in events] == ["BOOKMARK"]
    assert events[0].object["metadata"]["resourceVersion"] == version
    assert quiet(plain) == []


def test_watch_from_a_version_past_the_window_is_gone(small_history_cluster: Cluster) -> None:
    c = small_history_cluster
    first = c.create(CONFIG_MAP, config_map("c0"))
    for i in range(1, SMALL_HISTORY + 3):
        c.create(CONFIG_MAP, config_map(f"c{i}"))
    with pytest.raises(Gone) as err:
        w = c.watch(CONFIG_MAP, "default", resource_version=first["metadata"]["resourceVersion"])
        collect(w, 1)
    assert err.value.code == 410 and err.value.reason == "Expired"


def test_watch_inside_the_window_is_not_gone(small_history_cluster: Cluster) -> None:
    c = small_history_cluster
    for i in range(SMALL_HISTORY + 3):
        c.create(CONFIG_MAP, config_map(f"c{i}"))
    recent = c.list(CONFIG_MAP, "default").resource_version
    c.create(CONFIG_MAP, config_map("late"))
    w = c.watch(CONFIG_MAP, "default", resource_version=recent)
    assert summary(collect(w, 1)) == [("ADDED", "late")]
    w.close()


# --- patch --------------------------------------------------------------------------------


def test_merge_patch(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", labels={"keep": "1", "drop": "2"}))
    patched = cluster.patch(
        POD, "p1", {"metadata": {"labels": {"drop": None, "new": "3"}}}, "default"
    )
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "3"}
    assert patched["spec"]["containers"][0]["name"] == "main"


def test_json_patch(cluster: Cluster) -> None:
    cluster.create(CONFIG_MAP, config_map("c1", {"a": "1", "b": "2"}))
    patched = cluster.patch(
        CONFIG_MAP,
        "c1",
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "10"},
            {"op": "remove", "path": "/data/b"},
            {"op": "add", "path": "/data/c", "value": "3"},
            {"op": "copy", "from": "/data/c", "path": "/data/d"},
            {"op": "move", "from": "/data/d", "path": "/data/e"},
        ],
        "default",
        patch_type="json",
    )
    assert patched["data"] == {"a": "10", "c": "3", "e": "3"}


def test_failed_json_patch_test_changes_nothing(cluster: Cluster) -> None:
    before = cluster.create(CONFIG_MAP, config_map("c1", {"a": "1"}))
    with pytest.raises(ApiError) as err:
        cluster.patch(
            CONFIG_MAP,
            "c1",
            [
                {"op": "replace", "path": "/data/a", "value": "2"},
                {"op": "test", "path": "/data/a", "value": "1"},
            ],
            "default",
            patch_type="json",
        )
    assert err.value.code == 422
    assert cluster.get(CONFIG_MAP, "c1", "default") == before


def test_strategic_patch_merges_containers_by_name(cluster: Cluster) -> None:
    manifest = pod("p1")
    manifest["spec"]["containers"].append({"name": "side", "image": "envoy"})
    cluster.create(POD, manifest)
    patched = cluster.patch(
        POD,
        "p1",
        {"spec": {"containers": [{"name": "side", "image": "envoy:2"}]}},
        "default",
        patch_type="strategic",
    )
    images = {c["name"]: c["image"] for c in patched["spec"]["containers"]}
    assert images == {"main": "busybox", "side": "envoy:2"}


def test_strategic_patch_replaces_node_taints(cluster: Cluster) -> None:
    manifest = node("n1")
    manifest["spec"] = {"taints": [{"key": "a", "effect": "NoSchedule"}]}
    cluster.create(NODE, manifest)
    patched = cluster.patch(
        NODE,
        "n1",
        {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}},
        patch_type="strategic",
    )
    assert patched["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]


def test_strategic_patch_merges_finalizers(cluster: Cluster) -> None:
    cluster.create(CONFIG_MAP, config_map("c1", finalizers=["example.com/a", "example.com/c"]))
    patched = cluster.patch(
        CONFIG_MAP,
        "c1",
        {"metadata": {"finalizers": ["example.com/c", "example.com/b"]}},
        "default",
        patch_type="strategic",
    )
    assert patched["metadata"]["finalizers"] == ["example.com/a", "example.com/c", "example.com/b"]
    dropped = cluster.patch(
        CONFIG_MAP,
        "c1",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}},
        "default",
        patch_type="strategic",
    )
    assert dropped["metadata"]["finalizers"] == ["example.com/c", "example.com/b"]
    cluster.patch(CONFIG_MAP, "c1", {"metadata": {"finalizers": None}}, "default")


def test_strategic_patch_of_a_custom_resource_is_unsupported(cluster: Cluster) -> None:
    before = cluster.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    with pytest.raises(ApiError) as err:
        cluster.patch(
            CUSTOM_NODE_RESOURCE, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="strategic"
        )
    assert err.value.code == 415 and err.value.reason == "UnsupportedMediaType"
    assert cluster.get(CUSTOM_NODE_RESOURCE, "n1") == before


def test_patch_with_stale_version_conflicts(cluster: Cluster) -> None:
    old = cluster.create(POD, pod("p1"))
    cluster.patch(POD, "p1", {"metadata": {"labels": {"a": "1"}}}, "default")
    with pytest.raises(Conflict):
        cluster.patch(
            POD,
            "p1",
            {
                "metadata": {
                    "labels": {"a": "2"},
                    "resourceVersion": old["metadata"]["resourceVersion"],
                }
            },
            "default",
        )
    assert cluster.get(POD, "p1", "default")["metadata"]["labels"] == {"a": "1"}


def test_patch_missing_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.patch(POD, "ghost", {"metadata": {"labels": {"a": "1"}}}, "default")


# --- status subresource -------------------------------------------------------------------


def test_update_ignores_status_and_update_status_ignores_spec(cluster: Cluster) -> None:
    obj = cluster.create(NODE, node("n1"))
    obj["status"] = {"capacity": {"cpu": "8"}}
    obj["metadata"]["labels"] = {"zone": "a"}
    updated = cluster.update(NODE, obj)
    assert updated["metadata"]["labels"] == {"zone": "a"}
    assert updated.get("status", {}).get("capacity") is None

    # A built-in kind's status write keeps spec but writes labels and annotations.
    updated["status"] = {"capacity": {"cpu": "16"}}
    updated["metadata"]["labels"] = {"zone": "b"}
    updated["spec"] = {"unschedulable": True}
    after = cluster.update_status(NODE, updated)
    assert after["status"]["capacity"] == {"cpu": "16"}
    assert after["metadata"]["labels"] == {"zone": "b"}
    assert after["spec"].get("unschedulable") is None
    patched = cluster.patch(
        NODE,
        "n1",
        {"metadata": {"labels": {"rack": "r1"}}, "spec": {"unschedulable": True}},
        subresource="status",
    )
    assert patched["metadata"]["labels"] == {"zone": "b", "rack": "r1"}
    assert patched["spec"].get("unschedulable") is None


def test_nodes_may_carry_status_from_creation(cluster: Cluster) -> None:
    manifest = {**node("n1"), "status": {"capacity": {"cpu": "4"}}}
    assert cluster.create(NODE, manifest)["status"]["capacity"] == {"cpu": "4"}


def test_status_patch_touches_only_status(cluster: Cluster) -> None:
    cluster.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    patched = cluster.patch(
        CUSTOM_NODE_RESOURCE,
        "n1",
        {"metadata": {"labels": {"ignored": "yes"}}, "status": {"resources": {"allocatable": {}}}},
        subresource="status",
    )
    # (a server with Katalyst's CRD schema also defaults status.topologyPolicy to "none")
    assert patched["status"]["resources"] == {"allocatable": {}}
    assert "ignored" not in (patched["metadata"].get("labels") or {})
    plain = cluster.patch(CUSTOM_NODE_RESOURCE, "n1", {"status": {"resources": None}})
    assert plain["status"]["resources"] == {"allocatable": {}}


def test_status_stale_version_conflicts(cluster: Cluster) -> None:
    old = cluster.create(POD, pod("p1"))
    cluster.patch(POD, "p1", {"status": {"phase": "Running"}}, "default", subresource="status")
    old["status"] = {"phase": "Failed"}
    with pytest.raises(Conflict):
        cluster.update_status(POD, old)


def test_new_pods_start_pending(cluster: Cluster) -> None:
    manifest = pod("p1")
    manifest["status"] = {"phase": "Running"}
    assert cluster.create(POD, manifest)["status"]["phase"] == "Pending"


def _resources(requests: dict[str, str], limits: dict[str, str]) -> JSON:
    out: JSON = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


@pytest.mark.parametrize(
    ("requests", "limits", "qos"),
    [
        ({}, {}, "BestEffort"),
        ({"cpu": "100m"}, {}, "Burstable"),
        ({}, {"cpu": "1", "memory": "1Gi"}, "Guaranteed"),  # requests default to limits
        ({"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi"}, "Guaranteed"),
        ({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}, "Burstable"),
        ({"cpu": "1"}, {"cpu": "1"}, "Burstable"),  # no memory limit
    ],
)
def test_new_pods_get_their_qos_class(
    cluster: Cluster, requests: dict[str, str], limits: dict[str, str], qos: str
) -> None:
    manifest = pod("p1")
    manifest["spec"]["containers"][0]["resources"] = _resources(requests, limits)
    created = cluster.create(POD, manifest)
    assert created["status"]["qosClass"] == qos
    # A status write that leaves it out keeps it.
    created["status"] = {"phase": "Running"}
    assert cluster.update_status(POD, created)["status"]["qosClass"] == qos


def test_create_with_a_resource_version_is_refused(cluster: Cluster) -> None:
    manifest = config_map("c1")
    manifest["metadata"]["resourceVersion"] = "5"
    with pytest.raises(ApiError) as err:
        cluster.create(CONFIG_MAP, manifest)
    assert "resourceVersion should not be set on objects to be created" in err.value.message
    with pytest.raises(NotFound):
        cluster.get(CONFIG_MAP, "c1", "default")


def test_empty_labels_and_finalizers_are_left_out(cluster: Cluster) -> None:
    created = cluster.create(CONFIG_MAP, config_map("c1", labels={}, finalizers=[]))
    assert "labels" not in created["metadata"] and "finalizers" not in created["metadata"]
    cluster.patch(CONFIG_MAP, "c1", {"metadata": {"labels": {"a": "1"}}}, "default")
    emptied = cluster.patch(CONFIG_MAP, "c1", {"metadata": {"labels": {"a": None}}}, "default")
    assert "labels" not in emptied["metadata"]
    # Removing a label that is not there writes nothing.
    again = cluster.patch(CONFIG_MAP, "c1", {"metadata": {"labels": {"a": None}}}, "default")
    assert rv(again) == rv(emptied)


# --- typed decode -------------------------------------------------------------------------


def _set(obj: JSON, path: str, value: Any) -> JSON:
    *parents, last = path.split(".")
    node: Any = obj
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return obj


# Each of these is a body the real server refuses before it stores anything, with a 400
# naming the field (`json: cannot unmarshal string into Go struct field PodSpec.spec.affinity
# of type v1.Affinity`).
ILL_TYPED_PODS = [
    ("spec.affinity", "x", "spec.affinity"),
    ("metadata.labels", ["a"], "metadata.labels"),
    ("metadata.annotations", {"a": 5}, "metadata.annotations"),
    ("spec.containers", 5, "spec.containers"),
    ("spec.containers.0", 5, "spec.containers"),
    ("spec.containers.0.name", 5, "spec.containers.name"),
    ("spec.containers.0.resources", "x", "spec.containers.resources"),
    ("spec.nodeName", 5, "spec.nodeName"),
    ("spec.nodeSelector", {"a": 1}, "spec.nodeSelector"),
    ("spec.tolerations", "x", "spec.tolerations"),
    ("spec.priority", "5", "spec.priority"),
    ("spec.priority", 1.5, "spec.priority"),
    ("spec.priority", True, "spec.priority"),
    ("spec.priority", 99999999999, "spec.priority"),
    ("spec.hostNetwork", "true", "spec.hostNetwork"),
    ("metadata.ownerReferences", "x", "metadata.ownerReferences"),
    ("status.phase", 5, "status.phase"),
    ("spec", "x", "spec"),
    (
        "spec.affinity",
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "In", "values": [1]}]}
                    ]
                }
            }
        },
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms.matchExpressions.values",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field"), ILL_TYPED_PODS, ids=[f"{p}={v!r}" for p, v, _ in ILL_TYPED_PODS]
)
def test_an_ill_typed_pod_is_refused_naming_the_field(
    cluster: Cluster, path: str, value: Any, field: str
) -> None:
    with pytest.raises(BadRequest) as err:
        cluster.create(POD, _set(pod("p1"), path, value))
    assert err.value.code == 400
    assert "cannot be handled as a Pod" in err.value.message
    assert f".{field} of type " in err.value.message
    assert cluster.list(POD, "default").items == []


@pytest.mark.parametrize(
    ("path", "value"),
    [("spec.containers.0.resources.requests.cpu", "abc"), ("spec.overhead", {"cpu": [1]})],
)
def test_a_malformed_quantity_is_refused(cluster: Cluster, path: str, value: Any) -> None:
    with pytest.raises(BadRequest) as err:
        cluster.create(POD, _set(pod("p1"), path, value))
    assert "quantities must match the regular expression" in err.value.message
    assert cluster.list(POD, "default").items == []


def test_numeric_quantities_and_nulls_are_stored_as_the_server_decodes_them(
    cluster: Cluster,
) -> None:
    manifest = _set(pod("p1"), "spec.containers.0.resources.requests", {"cpu": 5.5, "memory": 1000})
    manifest["spec"]["affinity"] = None
    manifest["spec"]["nodeSelector"] = {"a": None}
    created = cluster.create(POD, manifest)
    assert created["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "5500m",
        "memory": "1k",
    }
    assert "affinity" not in created["spec"]
    assert created["spec"]["nodeSelector"] == {"a": ""}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"spec": {"tolerations": "x"}}, "spec.tolerations"),
        ({"metadata": {"labels": ["a"]}}, "metadata.labels"),
        ({"spec": {"activeDeadlineSeconds": "x"}}, "spec.activeDeadlineSeconds"),
    ],
)
def test_a_patch_that_makes_a_pod_ill_typed_is_invalid(
    cluster: Cluster, patch: JSON, field: str
) -> None:
    before = cluster.create(POD, pod("p1"))
    with pytest.raises(Invalid) as err:
        cluster.patch(POD, "p1", patch, "default")
    assert err.value.code == 422 and f".{field} of type " in err.value.message
    after = cluster.get(POD, "p1", "default")
    for part, body in patch.items():
        for key in body:
            assert after[part].get(key) == before[part].get(key)


def test_a_status_patch_that_makes_a_pod_ill_typed_is_invalid(cluster: Cluster) -> None:
    before = cluster.create(POD, pod("p1"))
    with pytest.raises(Invalid) as err:
        cluster.patch(POD, "p1", {"status": {"phase": 5}}, "default", subresource="status")
    assert ".status.phase of type " in err.value.message
    assert cluster.get(POD, "p1", "default")["status"]["phase"] == before["status"]["phase"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.taints", "x", ".spec.taints of type []v1.Taint"),
        ("spec.unschedulable", "yes", ".spec.unschedulable of type bool"),
        ("status.allocatable", {"cpu": "abc"}, "quantities must match"),
    ],
)
def test_an_ill_typed_node_is_refused(
    cluster: Cluster, path: str, value: Any, message: str
) -> None:
    with pytest.raises(BadRequest) as err:
        cluster.create(NODE, _set(node("harden-fake"), path, value))
    assert message in err.value.message
    with pytest.raises(NotFound):
        cluster.get(NODE, "harden-fake")


# --- binding ------------------------------------------------------------------------------


def test_bind_sets_node_and_scheduled_condition(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1"))
    cluster.bind("default", "p1", "n1")
    bound = cluster.get(POD, "p1", "default")
    assert bound["spec"]["nodeName"] == "n1"
    conditions = {c["type"]: c["status"] for c in bound["status"].get("conditions", [])}
    assert conditions.get("PodScheduled") == "True"


def test_a_bindings_annotations_land_on_the_pod_with_its_node(cluster: Cluster) -> None:
    obj = pod("p1")
    obj["metadata"]["annotations"] = {"keep": "mine", "over": "old"}
    cluster.create(POD, obj)
    cluster.bind("default", "p1", "n1", {"over": "new", "added": "x"})
    bound = cluster.get(POD, "p1", "default")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"keep": "mine", "over": "new", "added": "x"}


def test_double_bind_conflicts(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1"))
    cluster.bind("default", "p1", "n1")
    with pytest.raises(Conflict) as err:
        cluster.bind("default", "p1", "n2")
    assert err.value.code == 409 and "already assigned" in err.value.message
    assert cluster.get(POD, "p1", "default")["spec"]["nodeName"] == "n1"


def test_bind_missing_pod_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.bind("default", "ghost", "n1")


# --- deletion, grace and finalizers -------------------------------------------------------


def test_delete_unbound_pod_is_immediate(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", grace=30))
    assert cluster.delete(POD, "p1", "default") is None
    with pytest.raises(NotFound):
        cluster.get(POD, "p1", "default")


def test_delete_missing_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.delete(POD, "ghost", "default")


def test_bound_pod_terminates_gracefully(cluster: Cluster, clock: VirtualClock | None) -> None:
    cluster.create(POD, pod("p1", node="n1", grace=30))
    left = cluster.delete(POD, "p1", "default", grace_period_seconds=20)
    assert left is not None
    assert left["metadata"]["deletionGracePeriodSeconds"] == 20
    if clock is not None:
        assert left["metadata"]["deletionTimestamp"] == rfc3339(clock.now() + 20)
    # Still there (the kubelet has not finished), deletion marked.
    assert "deletionTimestamp" in cluster.get(POD, "p1", "default")["metadata"]
    # The kubelet's final delete.
    assert cluster.delete(POD, "p1", "default", grace_period_seconds=0) is None
    with pytest.raises(NotFound):
        cluster.get(POD, "p1", "default")


def test_bound_pod_default_grace_is_its_termination_grace(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", node="n1", grace=45))
    left = cluster.delete(POD, "p1", "default")
    assert left is not None and left["metadata"]["deletionGracePeriodSeconds"] == 45


def test_negative_grace_is_the_shortest_grace(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", node="n1", grace=30))
    left = cluster.delete(POD, "p1", "default", grace_period_seconds=-5)
    assert left is not None and left["metadata"]["deletionGracePeriodSeconds"] == 1
    cluster.create(POD, pod("p2", node="n1", grace=30))
    cluster.evict("default", "p2", grace_period_seconds=-5)
    assert cluster.get(POD, "p2", "default")["metadata"]["deletionGracePeriodSeconds"] == 1
    cluster.create(POD, pod("p3"))
    assert cluster.delete(POD, "p3", "default", grace_period_seconds=-5) is None


def test_grace_zero_on_a_terminating_pod_deletes_it_after_a_last_write(
    cluster: Cluster, watches: list[Watch]
) -> None:
    cluster.create(POD, pod("p1", node="n1", grace=30))
    start = cluster.list(POD, "default").resource_version
    w = cluster.watch(POD, "default", resource_version=start)
    watches.append(w)
    cluster.delete(POD, "p1", "default")
    assert cluster.delete(POD, "p1", "default", grace_period_seconds=0) is None
    events = collect(w, 3)
    assert summary(events) == [("MODIFIED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    grace = [e.object["metadata"]["deletionGracePeriodSeconds"] for e in events]
    assert grace == [30, 0, 0]
    assert quiet(w) == []


def test_finalizers_hold_deletion_until_removed(cluster: Cluster, watches: list[Watch]) -> None:
    cluster.create(CONFIG_MAP, config_map("c1", finalizers=["example.com/hold"]))
    start = cluster.list(CONFIG_MAP).resource_version
    w = cluster.watch(CONFIG_MAP, "default", resource_version=start)
    watches.append(w)
    left = cluster.delete(CONFIG_MAP, "c1", "default")
    assert left is not None and "deletionTimestamp" in left["metadata"]
    assert summary(collect(w, 1)) == [("MODIFIED", "c1")]
    # A second delete changes nothing.
    again = cluster.delete(CONFIG_MAP, "c1", "default")
    assert again is not None and rv(again) == rv(left)
    # No new finalizers on an object being deleted.
    with pytest.raises(Invalid):
        cluster.patch(
            CONFIG_MAP,
            "c1",
            {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
            "default",
        )
    cluster.patch(CONFIG_MAP, "c1", {"metadata": {"finalizers": None}}, "default")
    assert summary(collect(w, 1)) == [("DELETED", "c1")]
    with pytest.raises(NotFound):
        cluster.get(CONFIG_MAP, "c1", "default")


def test_deletion_timestamp_cannot_be_cleared_by_update(cluster: Cluster) -> None:
    cluster.create(CONFIG_MAP, config_map("c1", finalizers=["example.com/hold"]))
    marked = cluster.delete(CONFIG_MAP, "c1", "default")
    assert marked is not None
    del marked["metadata"]["deletionTimestamp"]
    marked["data"] = {"k": "v"}
    after = cluster.update(CONFIG_MAP, marked)
    assert "deletionTimestamp" in after["metadata"] and after["data"] == {"k": "v"}


# --- eviction -----------------------------------------------------------------------------


def test_evict_bound_pod_is_graceful(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", node="n1", grace=30))
    cluster.evict("default", "p1", grace_period_seconds=10)
    marked = cluster.get(POD, "p1", "default")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 10
    # Evicting a terminating pod succeeds and changes nothing.
    cluster.evict("default", "p1")
    assert cluster.get(POD, "p1", "default") == marked


def test_evict_unbound_pod_removes_it(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1"))
    cluster.evict("default", "p1")
    with pytest.raises(NotFound):
        cluster.get(POD, "p1", "default")


def test_evict_missing_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.evict("default", "ghost")


def test_eviction_refused_by_guard_is_too_many_requests(
    cluster: Cluster, backend: MemoryCluster | None
) -> None:
    store = need(backend, "backend store")
    store.eviction_guard = lambda p: (
        "budget allows 0 disruptions" if p["metadata"].get("labels", {}).get("protected") else None
    )
    cluster.create(POD, pod("p1", labels={"protected": "yes"}, node="n1"))
    with pytest.raises(TooManyRequests) as err:
        cluster.evict("default", "p1")
    assert err.value.code == 429 and "budget" in err.value.message
    assert "deletionTimestamp" not in cluster.get(POD, "p1", "default")["metadata"]


def running(cluster: Cluster, name: str, ready: bool = True) -> None:
    """Play the kubelet: the pod runs (and is Ready, unless told otherwise)."""
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    cluster.patch(
        POD,
        name,
        {"status": {"phase": "Running", "conditions": [condition]}},
        "default",
        subresource="status",
    )


def budget(cluster: Cluster, name: str, app: str, **status: Any) -> JSON:
    """A PodDisruptionBudget over pods labelled app=`app`; with `status`, written as if the
    disruption controller had observed it (the suite runs without one)."""
    created = cluster.create(
        POD_DISRUPTION_BUDGET,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )
    if not status:
        return created
    observed = {"observedGeneration": created["metadata"]["generation"], **status}
    return cluster.patch(
        POD_DISRUPTION_BUDGET, name, {"status": observed}, "default", subresource="status"
    )


def test_eviction_spends_the_budget(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", labels={"app": "web"}, node="n1", grace=30))
    running(cluster, "p1")
    budget(
        cluster,
        "web",
        "web",
        disruptionsAllowed=1,
        currentHealthy=2,
        desiredHealthy=1,
        expectedPods=2,
    )
    cluster.evict("default", "p1")
    evicted = cluster.get(POD, "p1", "default")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30
    target = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["status"], c["reason"]) for c in target] == [("True", "EvictionByEvictionAPI")]
    spent = cluster.get(POD_DISRUPTION_BUDGET, "web", "default")["status"]
    assert spent["disruptionsAllowed"] == 0 and list(spent["disruptedPods"]) == ["p1"]
    allowed = [c for c in spent["conditions"] if c["type"] == "DisruptionAllowed"]
    assert [(c["status"], c["reason"]) for c in allowed] == [("False", "InsufficientPods")]


def test_eviction_refused_by_an_exhausted_budget_is_429(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", labels={"app": "web"}, node="n1"))
    running(cluster, "p1")
    budget(cluster, "web", "web", disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1)
    before = cluster.get(POD, "p1", "default")
    with pytest.raises(TooManyRequests) as err:
        cluster.evict("default", "p1")
    assert err.value.code == 429
    assert "violate the pod's disruption budget" in err.value.message
    causes = err.value.details.get("causes") or []
    assert [c.get("reason") for c in causes] == ["DisruptionBudget"]
    assert "needs 1 healthy pods and has 1 currently" in causes[0]["message"]
    assert cluster.get(POD, "p1", "default") == before


def test_eviction_under_a_budget_not_yet_observed_is_429(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", labels={"app": "web"}, node="n1"))
    running(cluster, "p1")
    budget(cluster, "web", "web")
    with pytest.raises(TooManyRequests) as err:
        cluster.evict("default", "p1")
    causes = err.value.details.get("causes") or []
    assert "still being processed" in causes[0]["message"]
    assert err.value.retry_after_seconds == 10
    assert "deletionTimestamp" not in cluster.get(POD, "p1", "default")["metadata"]


def test_eviction_under_two_budgets_is_a_server_error(cluster: Cluster) -> None:
    cluster.create(POD, pod("p1", labels={"app": "web"}, node="n1"))
    running(cluster, "p1")
    budget(cluster, "a", "web", disruptionsAllowed=1, currentHealthy=2, desiredHealthy=1)
    budget(cluster, "b", "web", disruptionsAllowed=1, currentHealthy=2, desiredHealthy=1)
    with pytest.raises(ApiError) as err:
        cluster.evict("default", "p1")
    assert err.value.code == 500 and "more than one PodDisruptionBudget" in err.value.message


def test_pending_and_unready_pods_may_be_evicted_past_the_budget(cluster: Cluster) -> None:
    budget(cluster, "web", "web", disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1)
    cluster.create(POD, pod("pending", labels={"app": "web"}, node="n1"))
    cluster.evict("default", "pending")
    assert "deletionTimestamp" in cluster.get(POD, "pending", "default")["metadata"]
    # Not Ready, while the budget has its healthy pods: the pod goes.
    cluster.create(POD, pod("unready", labels={"app": "web"}, node="n1"))
    running(cluster, "unready", ready=False)
    cluster.evict("default", "unready")
    assert "deletionTimestamp" in cluster.get(POD, "unready", "default")["metadata"]
    assert cluster.get(POD_DISRUPTION_BUDGET, "web", "default")["status"]["disruptionsAllowed"] == 0


# Budgets the real server refuses, with the status code and what its message says.
REFUSED_BUDGETS = [
    ("x", 400, "Go struct field PodDisruptionBudget.spec of type v1.PodDisruptionBudgetSpec"),
    (
        {"minAvailable": {"x": 1}},
        400,
        "Go struct field PodDisruptionBudgetSpec.spec.minAvailable of type int32",
    ),
    ({"selector": "x"}, 400, "PodDisruptionBudgetSpec.spec.selector of type v1.LabelSelector"),
    ({"minAvailable": "abc"}, 422, 'spec.minAvailable: Invalid value: "abc": a valid percent'),
    ({"maxUnavailable": -1}, 422, "spec.maxUnavailable: Invalid value: -1: must be greater"),
    ({"minAvailable": "150%"}, 422, 'Invalid value: "150%": must not be greater than 100%'),
    ({"minAvailable": 1, "maxUnavailable": 1}, 422, "cannot be both set"),
]


@pytest.mark.parametrize(
    ("spec", "code", "message"), REFUSED_BUDGETS, ids=[repr(s) for s, _, _ in REFUSED_BUDGETS]
)
def test_a_malformed_budget_is_refused_naming_the_field(
    cluster: Cluster, spec: Any, code: int, message: str
) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "bad-budget", "namespace": "default"},
        "spec": spec,
    }
    with pytest.raises(ApiError) as err:
        cluster.create(POD_DISRUPTION_BUDGET, body)
    assert err.value.code == code
    assert message in err.value.message, err.value.message
    with pytest.raises(NotFound):
        cluster.get(POD_DISRUPTION_BUDGET, "bad-budget", "default")


# --- admission ----------------------------------------------------------------------------


def test_admission_mutates_then_validates(cluster: Cluster, backend: MemoryCluster | None) -> None:
    store = need(backend, "backend store")
    seen: list[AdmissionRequest] = []

    def add_team(req: AdmissionRequest) -> JSON | None:
        if req.kind.kind != "Pod" or req.operation != "CREATE" or req.sub_resource:
            return None
        obj = req.object
        assert obj is not None
        obj["metadata"].setdefault("labels", {})["team"] = "core"
        return obj

    def require_team(req: AdmissionRequest) -> AdmissionResponse | None:
        seen.append(req)
        labels = (req.object or {}).get("metadata", {}).get("labels") or {}
        if req.kind.kind == "Pod" and req.object is not None and labels.get("team") != "core":
            return AdmissionResponse.deny("pods need a team label")
        return None

    store.add_validating_admission(require_team, name="team.example.com")
    store.add_mutating_admission(add_team, name="add-team.example.com")
    created = cluster.create(POD, pod("p1"))
    assert created["metadata"]["labels"] == {"team": "core"}
    assert seen[0].operation == "CREATE" and seen[0].namespace == "default"
    review = seen[0].to_review()["request"]
    assert review["operation"] == "CREATE" and review["kind"]["kind"] == "Pod"


def test_admission_denial_leaves_the_store_untouched(
    cluster: Cluster, backend: MemoryCluster | None
) -> None:
    store = need(backend, "backend store")
    before = cluster.create(POD, pod("p1", labels={"a": "1"}))

    def no_changes(req: AdmissionRequest) -> AdmissionResponse | None:
        if req.operation in ("UPDATE", "DELETE") and req.kind.kind == "Pod":
            return AdmissionResponse.deny("frozen")
        return None

    store.add_validating_admission(no_changes, name="freeze.example.com")
    with pytest.raises(Forbidden) as err:
        cluster.patch(POD, "p1", {"metadata": {"labels": {"a": "2"}}}, "default")
    assert err.value.code == 403 and "frozen" in err.value.message
    with pytest.raises(Forbidden):
        cluster.delete(POD, "p1", "default")
    assert cluster.get(POD, "p1", "default") == before


def test_admission_json_patch_and_old_object(
    cluster: Cluster, backend: MemoryCluster | None
) -> None:
    store = need(backend, "backend store")
    olds: list[JSON | None] = []

    def stamp(req: AdmissionRequest) -> list[JSON] | None:
        if req.kind.kind != "ConfigMap":
            return None
        olds.append(req.old_object)
        return [{"op": "add", "path": "/data/stamped", "value": req.operation}]

    store.add_mutating_admission(stamp, name="stamp.example.com")
    cluster.create(CONFIG_MAP, config_map("c1", {"k": "1"}))
    updated = cluster.patch(CONFIG_MAP, "c1", {"data": {"k": "2"}}, "default")
    assert updated["data"] == {"k": "2", "stamped": "UPDATE"}
    assert olds[0] is None
    assert olds[1] is not None and olds[1]["data"] == {"k": "1", "stamped": "CREATE"}


def test_admission_sees_binding_and_eviction(
    cluster: Cluster, backend: MemoryCluster | None
) -> None:
    store = need(backend, "backend store")
    subresources: list[tuple[str, str]] = []

    def record(req: AdmissionRequest) -> None:
        if req.sub_resource:
            subresources.append((req.operation, req.sub_resource))

    store.add_validating_admission(record, name="record.example.com")
    cluster.create(POD, pod("p1"))
    cluster.bind("default", "p1", "n1")
    cluster.evict("default", "p1", grace_period_seconds=0)
    assert subresources == [("CREATE", "binding"), ("CREATE", "eviction")]


# --- pods/resize ------------------------------------------------------------------------------


def _sized_pod(name: str) -> JSON:
    body = pod(name)
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "200m", "memory": "64Mi"},
        "limits": {"cpu": "400m", "memory": "128Mi"},
    }
    return body


def _resize(cluster: Cluster, name: str, resources: Any, patch_type: Any = "strategic") -> JSON:
    container = {"name": "main", "resources": resources}
    return cluster.patch(
        POD, name, {"spec": {"containers": [container]}}, "default", patch_type, "resize"
    )


def test_resize_changes_cpu_and_memory_and_nothing_else(cluster: Cluster) -> None:
    cluster.create(POD, _sized_pod("rz"), "default")
    body = {
        "metadata": {"labels": {"ignored": "yes"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "other",
                    "resources": {"requests": {"cpu": "300m"}, "limits": {"cpu": "600m"}},
                }
            ]
        },
    }
    out = cluster.patch(POD, "rz", body, "default", "strategic", "resize")
    c = out["spec"]["containers"][0]
    assert c["resources"] == {
        "requests": {"cpu": "300m", "memory": "64Mi"},
        "limits": {"cpu": "600m", "memory": "128Mi"},
    }
    assert c["image"] == "busybox"
    assert "ignored" not in (out["metadata"].get("labels") or {})
    assert out["metadata"]["generation"] == 2
    assert cluster.get(POD, "rz", "default")["spec"]["containers"][0]["resources"] == c["resources"]


@pytest.mark.parametrize(
    ("resources", "patch_type", "message"),
    [
        # a merge patch replaces the containers' whole resources: what it leaves out is removed
        ({"requests": {"cpu": "300m"}}, "merge", "resource requests cannot be removed"),
        ({"requests": {"cpu": "400m", "memory": "128Mi"}}, "strategic", "Pod QOS Class may not"),
        ({"requests": {"ephemeral-storage": "1Mi"}}, "strategic", "only cpu and memory"),
        ({"requests": {"cpu": "900m"}}, "strategic", "must be less than or equal to cpu limit"),
        ({"requests": {"cpu": "-1"}}, "strategic", "must be greater than or equal to 0"),
    ],
)
def test_resize_refuses_what_the_api_server_refuses(
    cluster: Cluster, resources: JSON, patch_type: str, message: str
) -> None:
    cluster.create(POD, _sized_pod("rz"), "default")
    with pytest.raises(Invalid) as err:
        _resize(cluster, "rz", resources, patch_type)
    assert message in err.value.message
    kept = cluster.get(POD, "rz", "default")["spec"]["containers"][0]["resources"]
    assert kept["requests"] == {"cpu": "200m", "memory": "64Mi"}


def test_resize_neither_adds_containers_nor_changes_resize_policy(cluster: Cluster) -> None:
    cluster.create(POD, _sized_pod("rz"), "default")
    add = {"name": "extra", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    with pytest.raises(Invalid) as err:
        cluster.patch(POD, "rz", {"spec": {"containers": [add]}}, "default", "strategic", "resize")
    assert "containers may not be added or removed on resize" in err.value.message
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    body = {"spec": {"containers": [{"name": "main", "resizePolicy": policy}]}}
    with pytest.raises(Invalid) as err:
        cluster.patch(POD, "rz", body, "default", "strategic", "resize")
    assert "only cpu and memory resources are mutable" in err.value.message


__all__ = [name for name in dir() if name.startswith("test_")] + ["watches", "labelled_pods"]
