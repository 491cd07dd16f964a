"""MemoryCluster behaviour beyond the shared conformance suite."""

from __future__ import annotations

import base64
import itertools
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api.names import CONFIG_MAP, CRD, CUSTOM_NODE_RESOURCE, NAMESPACE, NODE, POD, Kind
from pykatalyst.apiserver.kubelet import StandInKubelet
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.admission import AdmissionResponse
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import AlreadyExists, BadRequest, Conflict, Gone, Invalid, NotFound
from tests.apiserver.conformance import cnr, config_map, node, pod


def test_pod_defaults_the_scheduler_relies_on() -> None:
    mc = MemoryCluster()
    manifest = pod("p1")
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    created = mc.create(POD, manifest)
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert created["spec"]["terminationGracePeriodSeconds"] == 30
    # Limits without requests become the requests, as API-server defaulting does.
    assert created["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "2",
        "memory": "1Gi",
    }


def test_resize_subresource_changes_only_container_resources() -> None:
    mc = MemoryCluster()
    mc.create(POD, pod("p1"))
    resized = mc.patch(
        POD,
        "p1",
        {
            "metadata": {"labels": {"ignored": "yes"}},
            "spec": {
                "nodeName": "ignored",
                "containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}],
            },
        },
        "default",
        patch_type="strategic",
        subresource="resize",
    )
    assert resized["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "2"}}
    assert resized["spec"]["containers"][0]["image"] == "busybox"
    assert "nodeName" not in resized["spec"] and "labels" not in resized["metadata"]
    assert resized["metadata"]["generation"] == 2
    with pytest.raises(NotFound):
        mc.patch(NODE, "n1", {}, subresource="resize")


def test_custom_resource_status_is_dropped_on_create() -> None:
    mc = MemoryCluster()
    manifest = cnr("n1")
    manifest["status"] = {"resources": {}}
    assert "status" not in mc.create(CUSTOM_NODE_RESOURCE, manifest)


def test_seeded_clusters_are_reproducible() -> None:
    def run() -> list[str]:
        mc = MemoryCluster(seed=3)
        gen = pod("x")
        del gen["metadata"]["name"]
        gen["metadata"]["generateName"] = "w-"
        return [mc.create(POD, gen)["metadata"][k] for k in ("uid", "name")]

    assert run() == run()
    counter = itertools.count()
    mc = MemoryCluster(uid_factory=lambda: f"uid-{next(counter)}", namespaces=("default",))
    assert mc.create(NODE, node("n1"))["metadata"]["uid"] == "uid-1"


def test_non_json_values_are_rejected() -> None:
    mc = MemoryCluster()
    manifest = config_map("c1")
    manifest["data"] = {"k": {1, 2}}
    with pytest.raises(BadRequest, match=r"data\.k"):
        mc.create(CONFIG_MAP, manifest)


def test_namespaced_create_needs_a_namespace_and_kind_must_match() -> None:
    mc = MemoryCluster()
    manifest = pod("p1")
    del manifest["metadata"]["namespace"]
    with pytest.raises(BadRequest, match="namespace"):
        mc.create(POD, manifest)
    with pytest.raises(BadRequest, match="Node"):
        mc.create(POD, node("n1"))
    with pytest.raises(BadRequest, match="does not match"):
        mc.create(POD, pod("p1", "kube-system"), namespace="default")


def test_unknown_kind_message_names_the_resource() -> None:
    with pytest.raises(NotFound, match=r"gadgets\.example\.com"):
        MemoryCluster().get(Kind("example.com", "v1", "Gadget", "gadgets", True), "g")


def test_shorter_grace_on_a_second_delete_wins() -> None:
    mc = MemoryCluster(clock=VirtualClock(0))
    mc.create(POD, pod("p1", node="n1", grace=60))
    mc.delete(POD, "p1", "default")
    left = mc.delete(POD, "p1", "default", grace_period_seconds=5)
    assert left is not None and left["metadata"]["deletionGracePeriodSeconds"] == 5
    assert left["metadata"]["deletionTimestamp"] == "1970-01-01T00:00:05Z"


def test_slow_watcher_is_cut_off_with_gone() -> None:
    mc = MemoryCluster(watch_history=4)
    w = mc.watch(CONFIG_MAP, resource_version=mc.resource_version)
    for i in range(6):
        mc.create(CONFIG_MAP, config_map(f"c{i}"))
    for _ in range(2):  # it stays broken until closed
        with pytest.raises(Gone):
            w.next_events()
    w.close()
    assert w.next_events() == []


def test_initial_listing_does_not_count_against_the_window() -> None:
    mc = MemoryCluster(watch_history=2)
    for i in range(5):
        mc.create(CONFIG_MAP, config_map(f"c{i}"))
    w = mc.watch(CONFIG_MAP)
    mc.create(CONFIG_MAP, config_map("late"))
    assert len(w.next_events()) == 6


def test_blocking_watch_wakes_on_a_write_from_another_thread() -> None:
    mc = MemoryCluster()
    w = mc.watch(NODE, resource_version=mc.resource_version)
    t = threading.Timer(0.05, lambda: mc.create(NODE, node("n1")))
    t.start()
    events = w.next_events(timeout=5.0)
    t.join()
    assert [e.type for e in events] == ["ADDED"]
    w.close()
    assert w.next_events(timeout=0.01) == []


def test_concurrent_writers_get_distinct_versions() -> None:
    mc = MemoryCluster()

    def writer(k: int) -> None:
        for i in range(50):
            mc.create(CONFIG_MAP, config_map(f"w{k}-{i}"))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = mc.list(CONFIG_MAP).items
    assert len(items) == 200
    assert len({o["metadata"]["resourceVersion"] for o in items}) == 200


def test_snapshot_round_trip() -> None:
    clock = VirtualClock(50.0)
    mc = MemoryCluster(clock=clock, seed=1)
    mc.create(POD, pod("p1", node="n1", labels={"a": "b"}))
    mc.create(NODE, node("n1"))
    mc.create(CUSTOM_NODE_RESOURCE, cnr("n1"))
    mc.delete(POD, "p1", "default", grace_period_seconds=10)
    data = json.loads(json.dumps(mc.snapshot()))
    back = MemoryCluster.from_snapshot(data, clock=clock)
    for kind in (POD, NODE, CUSTOM_NODE_RESOURCE, NAMESPACE):
        assert back.list(kind).items == mc.list(kind).items
    assert back.resource_version == mc.resource_version
    assert back.list(POD, field_selector="spec.nodeName=n1").items
    # Versions before the snapshot cannot be replayed.
    with pytest.raises(Gone):
        back.watch(POD, resource_version="1")
    # The terminating pod still finishes.
    clock.advance(20)
    assert StandInKubelet(back, clock).finish_deletions() == [("default", "p1")]
    # New writes continue the version sequence.
    before = int(back.resource_version)
    assert before > int(mc.resource_version)
    made = back.create(NODE, node("n2"))
    assert int(made["metadata"]["resourceVersion"]) == before + 1


def test_crd_lifecycle_registers_and_removes_the_kind() -> None:
    mc = MemoryCluster()
    mc.create(
        CRD,
        {
            "metadata": {"name": "gizmos.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Cluster",
                "names": {"kind": "Gizmo", "plural": "gizmos", "shortNames": ["gz"]},
                "versions": [{"name": "v1beta1", "served": True, "storage": True}],
            },
        },
    )
    gizmo = mc.lookup_kind("example.com", "gizmos")
    assert gizmo.kind == "Gizmo" and not gizmo.namespaced and gizmo.short_names == ("gz",)
    assert not mc.has_status_subresource(gizmo)
    mc.create(gizmo, {"metadata": {"name": "g1"}, "status": {"kept": True}})
    assert mc.get(gizmo, "g1")["status"] == {"kept": True}
    mc.delete(CRD, "gizmos.example.com")
    with pytest.raises(NotFound):
        mc.list(gizmo)


def test_deleting_a_namespace_removes_its_objects() -> None:
    mc = MemoryCluster()
    mc.create(NAMESPACE, {"metadata": {"name": "team"}})
    mc.create(POD, pod("p1", "team"))
    mc.create(POD, pod("p1", "default"))
    mc.delete(NAMESPACE, "team")
    assert [o["metadata"]["namespace"] for o in mc.list(POD).items] == ["default"]
    with pytest.raises(NotFound):
        mc.create(POD, pod("p2", "team"))


def test_namespace_names_are_dns_labels() -> None:
    with pytest.raises(Invalid, match="RFC 1123 label"):
        MemoryCluster().create(NAMESPACE, {"metadata": {"name": "a.b"}})


def test_admission_review_wire_form_round_trip() -> None:
    ops = [{"op": "add", "path": "/metadata/labels/foo", "value": "bar"}]
    review = {
        "response": {
            "uid": "u",
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
        }
    }
    resp = AdmissionResponse.from_review(review)
    mc = MemoryCluster()
    mc.add_mutating_admission(lambda req: resp, name="wire")
    created = mc.create(POD, pod("p1", labels={"x": "y"}))
    assert created["metadata"]["labels"] == {"x": "y", "foo": "bar"}
    denial = AdmissionResponse.from_review(
        {"response": {"uid": "u", "allowed": False, "status": {"code": 422, "message": "no"}}}
    )
    mc.add_validating_admission(lambda req: denial, name="deny")
    with pytest.raises(Invalid, match='admission webhook "deny" denied the request: no'):
        mc.create(POD, pod("p2", labels={"x": "y"}))


ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "label", "unlabel", "bind", "delete", "finalize"]),
        st.sampled_from(["a", "b", "c"]),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(min_value=1, max_value=6))
def test_watch_and_informer_replay_equals_list(steps: list[tuple[str, str]], window: int) -> None:
    """Whatever happens, a selector-filtered watch replayed into a dict, and an informer
    that may have to re-list, both end up equal to a fresh list."""
    mc = MemoryCluster(watch_history=window)
    start = mc.resource_version
    w = mc.watch(POD, resource_version=start, label_selector="app=web")
    inf = Informer(mc, POD, label_selector="app=web")
    inf.sync()
    kubelet = StandInKubelet(mc, mc.clock)
    replay: dict[str, dict[str, object]] = {}
    gone = False
    for i, (op, name) in enumerate(steps):
        try:
            if op == "create":
                mc.create(POD, pod(name, labels={"app": "web"}))
            elif op == "label":
                mc.patch(POD, name, {"metadata": {"labels": {"app": "web"}}}, "default")
            elif op == "unlabel":
                mc.patch(POD, name, {"metadata": {"labels": {"app": "db"}}}, "default")
            elif op == "bind":
                mc.bind("default", name, "n1")
            elif op == "delete":
                mc.delete(POD, name, "default", grace_period_seconds=0)
            else:
                kubelet.finish_deletions()
        except (NotFound, Conflict, AlreadyExists):
            pass
        if not gone:
            try:
                for ev in w.next_events():
                    if ev.type == "DELETED":
                        replay.pop(ev.object["metadata"]["name"], None)
                    else:
                        replay[ev.object["metadata"]["name"]] = ev.object
            except Gone:
                gone = True
        if i % 5 == 4:  # a lagging informer, so that some runs have to re-list
            inf.sync()
    inf.sync()
    expected = {o["metadata"]["name"]: o for o in mc.list(POD, label_selector="app=web").items}
    if not gone:
        assert replay == expected
    assert {o["metadata"]["name"]: o for o in inf.list()} == expected


def test_a_fresh_cluster_has_the_namespaces_the_manifests_and_components_use() -> None:
    from pykatalyst.api import names

    mc = MemoryCluster()
    have = {ns["metadata"]["name"] for ns in mc.list(NAMESPACE).items}
    assert {
        names.DEFAULT_NAMESPACE,
        names.KUBE_SYSTEM_NAMESPACE,
        names.SYSTEM_NAMESPACE,
    } <= have
    # The controller's leader Lease and the system's ConfigMaps go there without setup.
    lease = {"metadata": {"name": names.CONTROLLER_LEASE_NAME}, "spec": {}}
    mc.create(names.LEASE, lease, names.SYSTEM_NAMESPACE)
    assert mc.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)


def _scaled_crd(scale: dict[str, object]) -> dict[str, object]:
    return {
        "metadata": {"name": "scaleds.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Scaled", "plural": "scaleds"},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "subresources": {"scale": scale}}
            ],
        },
    }


def test_a_crd_with_a_bad_scale_path_is_refused_and_serves_nothing() -> None:
    c = MemoryCluster()
    bad = {"specReplicasPath": "spec.replicas", "statusReplicasPath": ".status.replicas"}
    with pytest.raises(Invalid, match="specReplicasPath"):
        c.create(CRD, _scaled_crd(bad))
    assert all(k.plural != "scaleds" for k in c.registered_kinds())
    with pytest.raises(NotFound):
        c.get(CRD, "scaleds.example.com")


@given(replicas=st.integers(min_value=-5, max_value=2**31 + 5))
@settings(max_examples=40, deadline=None)
def test_a_scale_write_keeps_the_replicas_in_range_and_changes_nothing_else(
    replicas: int,
) -> None:
    c = MemoryCluster()
    good = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
    c.create(CRD, _scaled_crd(good))
    kind = next(k for k in c.registered_kinds() if k.plural == "scaleds")
    body = {"apiVersion": "example.com/v1", "kind": "Scaled", "spec": {"size": 2}}
    c.create(kind, {**body, "metadata": {"name": "s", "namespace": "default"}})
    if 0 <= replicas < 2**31:
        got = c.patch(kind, "s", {"spec": {"replicas": replicas}}, "default", subresource="scale")
        assert got["spec"] == {"replicas": replicas}
        assert c.get(kind, "s", "default")["spec"] == {"size": 2, "replicas": replicas}
    else:
        with pytest.raises(Invalid, match=r"spec\.replicas"):
            c.patch(kind, "s", {"spec": {"replicas": replicas}}, "default", subresource="scale")
        assert c.get(kind, "s", "default")["spec"] == {"size": 2}


def test_uncopied_watch_events_are_the_copied_ones() -> None:
    mc = MemoryCluster()
    copied = mc.watch(CONFIG_MAP, resource_version=mc.resource_version)
    uncopied = mc.watch(CONFIG_MAP, resource_version=mc.resource_version)
    mc.create(CONFIG_MAP, config_map("a"))
    mc.patch(CONFIG_MAP, "a", {"data": {"k": "v"}}, "default")
    mc.delete(CONFIG_MAP, "a", "default")
    got = copied.next_events()
    assert [(e.type, e.object) for e in uncopied.next_events(copy=False)] == [
        (e.type, e.object) for e in got
    ]
    assert [e.type for e in got] == ["ADDED", "MODIFIED", "DELETED"]
    # a copied event is the watcher's own: changing it changes nothing stored
    mc.create(CONFIG_MAP, config_map("b"))
    ev = copied.next_events()[0]
    ev.object["data"] = {"changed": "yes"}
    assert mc.get(CONFIG_MAP, "b", "default").get("data") != {"changed": "yes"}
