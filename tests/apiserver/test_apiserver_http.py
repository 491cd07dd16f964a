"""The HTTP face seen from plain HTTP: discovery, tables, watch streams, content types and
Status errors, as kubectl and other clients rely on them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api.names import (
    CRD,
    CUSTOM_NODE_RESOURCE,
    KATALYST_KINDS,
    NODE,
    POD,
    RECLAIMED_MILLICPU,
)
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.apiserver.tables import human_duration, jsonpath_cell
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.runtime.apiserver import ApiServer

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)


@pytest.fixture
def store(clock: VirtualClock) -> MemoryCluster:
    return MemoryCluster(clock=clock)


@pytest.fixture
def url(store: MemoryCluster) -> Iterator[str]:
    with ApiServer(store, bookmark_seconds=0) as server:
        yield server.url


def call(
    url: str,
    path: str,
    method: str = "GET",
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> tuple[int, Any, dict[str, str]]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Accept", accept)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, dict(resp.headers)
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None, dict(err.headers)


def stream(url: str, path: str) -> list[dict[str, Any]]:
    """A whole watch response (the path sets a short timeoutSeconds), one event a line."""
    with urllib.request.urlopen(url + path, timeout=10) as resp:
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


# --- discovery -------------------------------------------------------------------------------


def test_discovery_lists_core_and_katalyst_resources(url: str) -> None:
    code, versions, _ = call(url, "/api")
    assert code == 200 and versions["versions"] == ["v1"]
    _, core, _ = call(url, "/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert {"pods", "pods/binding", "pods/eviction", "pods/status", "nodes/status"} <= set(by_name)
    assert by_name["pods"]["namespaced"] and by_name["pods"]["shortNames"] == ["po"]
    assert "watch" in by_name["pods"]["verbs"]
    assert by_name["pods/eviction"]["group"] == "policy"
    _, groups, _ = call(url, "/apis")
    served = {g["name"] for g in groups["groups"]}
    assert {k.group for k in KATALYST_KINDS} | {"coordination.k8s.io", CRD.group} <= served
    gv = CUSTOM_NODE_RESOURCE.api_version
    _, resources, _ = call(url, f"/apis/{gv}")
    cnr = next(r for r in resources["resources"] if r["name"] == CUSTOM_NODE_RESOURCE.plural)
    assert cnr["kind"] == "CustomNodeResource" and not cnr["namespaced"]
    assert cnr["shortNames"] == list(CUSTOM_NODE_RESOURCE.short_names)
    code, version, _ = call(url, "/version")
    assert code == 200 and version["major"] == "1"


def test_a_crd_created_at_runtime_is_discovered_and_served(url: str) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    assert call(url, f"/apis/{CRD.api_version}/{CRD.plural}", "POST", crd)[0] == 201
    _, groups, _ = call(url, "/apis")
    assert "example.com" in {g["name"] for g in groups["groups"]}
    _, resources, _ = call(url, "/apis/example.com/v1")
    assert resources["resources"][0]["shortNames"] == ["wd"]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}}
    path = "/apis/example.com/v1/namespaces/default/widgets"
    assert call(url, path, "POST", widget)[0] == 201
    assert call(url, path + "/w1")[1]["metadata"]["name"] == "w1"


def test_unknown_paths_answer_with_a_status(url: str) -> None:
    code, body, _ = call(url, "/apis/example.com/v1/gadgets")
    assert code == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    code, body, _ = call(url, "/api/v2/pods")
    assert code == 404 and body["kind"] == "Status"
    code, body, _ = call(url, "/api/v1/namespaces/default/pods/p1/exec", "POST", {})
    assert code == 404


# --- reads and writes -----------------------------------------------------------------------


def test_list_honours_selectors_and_reports_its_version(url: str) -> None:
    base = "/api/v1/namespaces/default/pods"
    call(url, base, "POST", {**_pod("a"), "metadata": {"name": "a", "labels": {"app": "x"}}})
    call(url, base, "POST", _pod("b", nodeName="n1"))
    _, by_label, _ = call(url, base + "?labelSelector=app%3Dx")
    assert [p["metadata"]["name"] for p in by_label["items"]] == ["a"]
    assert by_label["kind"] == "PodList" and by_label["metadata"]["resourceVersion"]
    _, by_field, _ = call(url, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
    assert [p["metadata"]["name"] for p in by_field["items"]] == ["b"]
    code, body, _ = call(url, base + "?fieldSelector=spec.hostname%3Dx")
    assert code == 400 and "spec.hostname" in body["message"]


def test_patch_content_types(url: str, store: MemoryCluster) -> None:
    base = "/api/v1/namespaces/default/pods"
    call(url, base, "POST", _pod("p1"))
    merge = {"metadata": {"labels": {"a": "1"}}}
    assert call(url, base + "/p1", "PATCH", merge, "application/merge-patch+json")[0] == 200
    ops = [{"op": "add", "path": "/metadata/labels/b", "value": "2"}]
    assert call(url, base + "/p1", "PATCH", ops, "application/json-patch+json")[0] == 200
    strategic = {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    code, patched, _ = call(
        url, base + "/p1", "PATCH", strategic, "application/strategic-merge-patch+json"
    )
    assert code == 200 and patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert patched["spec"]["containers"][0]["image"] == "busybox:2"
    code, body, _ = call(url, base + "/p1", "PATCH", b"{}", "application/apply-patch+yaml")
    assert code == 415 and "server-side apply" in body["message"]
    code, body, _ = call(url, base, "POST", b"\x0a\x02", "application/vnd.kubernetes.protobuf")
    assert code == 415 and "application/json" in body["message"]
    assert store.get(POD, "p1", "default")["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_put_checks_the_name_on_the_url(url: str) -> None:
    base = "/api/v1/namespaces/default/pods"
    _, created, _ = call(url, base, "POST", _pod("p1"))
    code, body, _ = call(url, base + "/other", "PUT", created)
    assert code == 400 and "does not match" in body["message"]


def test_status_subresource(url: str, store: MemoryCluster) -> None:
    store.create(CUSTOM_NODE_RESOURCE, {"metadata": {"name": "n1"}})
    path = f"/apis/{CUSTOM_NODE_RESOURCE.api_version}/{CUSTOM_NODE_RESOURCE.plural}/n1"
    status = {"status": {"topologyPolicy": "None"}}
    code, body, _ = call(url, path + "/status", "PATCH", status, "application/merge-patch+json")
    assert code == 200 and body["status"] == {"topologyPolicy": "None"}
    spec_change = {"spec": {"taints": []}, "status": {"topologyPolicy": "x"}}
    call(url, path + "/status", "PATCH", spec_change, "application/merge-patch+json")
    stored = store.get(CUSTOM_NODE_RESOURCE, "n1")
    assert "taints" not in stored.get("spec", {}) and stored["status"]["topologyPolicy"] == "x"


def test_delete_options_grace_period(url: str, store: MemoryCluster) -> None:
    store.create(POD, _pod("p1", nodeName="n1"))
    store.create(POD, _pod("p2", nodeName="n1"))
    base = "/api/v1/namespaces/default/pods"
    code, body, _ = call(url, base + "/p1", "DELETE", {"gracePeriodSeconds": 5})
    assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 5
    code, body, _ = call(
        url, base + "/p2", "DELETE", {"kind": "DeleteOptions", "gracePeriodSeconds": 0}
    )
    assert code == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert [p["metadata"]["name"] for p in store.list(POD).items] == ["p1"]


def test_binding_collection_and_subresource(url: str, store: MemoryCluster) -> None:
    store.create(POD, _pod("p1"))
    store.create(POD, _pod("p2"))
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    code, body, _ = call(url, "/api/v1/namespaces/default/bindings", "POST", binding)
    assert code == 201 and body["kind"] == "Status" and body["status"] == "Success"
    binding = {"metadata": {"name": "p2"}, "target": {"kind": "Node", "name": "n2"}}
    assert call(url, "/api/v1/namespaces/default/pods/p2/binding", "POST", binding)[0] == 201
    assert [p["spec"]["nodeName"] for p in store.list(POD).items] == ["n1", "n2"]
    code, body, _ = call(url, "/api/v1/namespaces/default/pods/p2/binding", "POST", binding)
    assert code == 409 and body["reason"] == "Conflict"


# --- tables -----------------------------------------------------------------------------------


def test_pod_and_node_tables(url: str, store: MemoryCluster, clock: VirtualClock) -> None:
    store.create(POD, _pod("p1", nodeName="n1"))
    store.create(
        NODE,
        {
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    clock.advance(3 * 3600)
    _, table, _ = call(url, "/api/v1/namespaces/default/pods", accept=TABLE)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert row["Name"] == "p1" and row["Ready"] == "0/1" and row["Status"] == "Pending"
    assert row["Age"] == "3h" and row["Node"] == "n1"
    assert table["rows"][0]["object"]["metadata"]["namespace"] == "default"
    _, nodes, _ = call(url, "/api/v1/nodes/n1", accept=TABLE)
    columns = [c["name"] for c in nodes["columnDefinitions"]]
    row = dict(zip(columns, nodes["rows"][0]["cells"], strict=True))
    assert row["Status"] == "Ready" and row["Roles"] == "worker"


def test_custom_resource_table_uses_the_crd_printer_columns(url: str, store: MemoryCluster) -> None:
    crd = yaml.safe_load(
        (CRD_DIR / "node.katalyst.kubewharf.io_customnoderesources.yaml").read_text()
    )
    store.create(CRD, crd)
    store.create(CUSTOM_NODE_RESOURCE, {"metadata": {"name": "n1"}})
    store.patch(
        CUSTOM_NODE_RESOURCE,
        "n1",
        {"status": {"resources": {"allocatable": {RECLAIMED_MILLICPU: "44k"}}}},
        subresource="status",
    )
    path = f"/apis/{CUSTOM_NODE_RESOURCE.api_version}/{CUSTOM_NODE_RESOURCE.plural}"
    _, table, _ = call(url, path, accept=TABLE)
    columns = [c["name"] for c in table["columnDefinitions"]]
    printer = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert columns == ["Name"] + [c["name"] for c in printer]
    row = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert row["Name"] == "n1" and row["Reclaimed-CPU"] == "44k"


def test_human_durations() -> None:
    assert [human_duration(s) for s in (5, 119, 150, 600, 4000, 7 * 3600 + 60)] == [
        "5s",
        "119s",
        "2m30s",
        "10m",
        "66m",
        "7h1m",
    ]
    assert human_duration(3 * 86400) == "3d" and human_duration(800 * 86400) == "2y"


def test_jsonpath_cells() -> None:
    obj = {"a": {"b.c": [{"d": 1}]}, "s": "x"}
    assert jsonpath_cell(obj, r".a.b\.c[0].d") == 1
    assert jsonpath_cell(obj, "{.s}") == "x"
    assert jsonpath_cell(obj, ".a.missing.d") is None
    assert jsonpath_cell(obj, r".a.b\.c[3]") is None


# --- watch streams ----------------------------------------------------------------------------


def test_watch_stream_is_chunked_json_lines(url: str, store: MemoryCluster) -> None:
    store.create(POD, _pod("p1"))
    start = store.resource_version
    store.create(POD, _pod("p2"))
    store.delete(POD, "p1", "default")
    path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={start}&timeoutSeconds=1"
    events = stream(url, path)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p2"),
        ("MODIFIED", "p1"),  # the deletion, written before the pod goes
        ("DELETED", "p1"),
    ]


def test_watch_past_the_window_gets_a_410_error_event() -> None:
    store = MemoryCluster(watch_history=2)
    first = store.create(POD, _pod("p0"))
    for i in range(1, 5):
        store.create(POD, _pod(f"p{i}"))
    with ApiServer(store, bookmark_seconds=0) as server:
        rv = first["metadata"]["resourceVersion"]
        events = stream(server.url, f"/api/v1/pods?watch=true&resourceVersion={rv}")
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"


def test_watch_table_events_carry_columns_once(url: str, store: MemoryCluster) -> None:
    store.create(POD, _pod("p1"))
    store.create(POD, _pod("p2"))
    req = urllib.request.Request(url + "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1")
    req.add_header("Accept", TABLE)
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    tables = [e["object"] for e in events]
    assert [t["kind"] for t in tables] == ["Table", "Table"]
    assert tables[0]["columnDefinitions"] and not tables[1]["columnDefinitions"]
    assert tables[1]["rows"][0]["cells"][0] == "p2"


def test_bad_watch_requests_fail_before_the_stream(url: str) -> None:
    code, body, _ = call(url, "/api/v1/pods?watch=1&labelSelector=a%20in%20(")
    assert code == 400 and body["kind"] == "Status"
    code, body, _ = call(url, "/api/v1/pods?watch=1&timeoutSeconds=soon")
    assert code == 400 and "timeoutSeconds" in body["message"]


def test_a_failing_admission_plugin_is_a_500_status(url: str, store: MemoryCluster) -> None:
    def broken(request: Any) -> None:
        raise RuntimeError("plugin bug")

    store.add_validating_admission(broken, name="broken.example.com")
    code, body, _ = call(url, "/api/v1/namespaces/default/pods", "POST", _pod("p1"))
    assert code == 500 and body["kind"] == "Status" and "plugin bug" in body["message"]
    assert store.list(POD).items == []
    # the server keeps serving
    assert call(url, "/api/v1/namespaces/default/pods")[0] == 200
