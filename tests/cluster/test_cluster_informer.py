"""Informer: list + watch cache, handlers, re-list on 410 Gone, indexes."""

from __future__ import annotations

from typing import Any

from pykatalyst.api.names import NODE, POD
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.informer import Informer, index_by_node_name
from tests.apiserver.conformance import node, pod

Seen = list[tuple[str, Any, Any]]


def recorder(seen: Seen) -> Any:
    def handle(etype: str, old: Any, new: Any) -> None:
        def name(o: Any) -> Any:
            return None if o is None else o["metadata"]["name"]

        seen.append((etype, name(old), name(new)))

    return handle


def test_first_sync_lists_then_watches() -> None:
    mc = MemoryCluster()
    mc.create(NODE, node("n1"))
    inf = Informer(mc, NODE)
    seen: Seen = []
    inf.add_handler(recorder(seen))
    assert inf.sync() == 1
    assert seen == [("ADDED", None, "n1")]
    mc.create(NODE, node("n2"))
    mc.patch(NODE, "n1", {"metadata": {"labels": {"a": "b"}}})
    mc.delete(NODE, "n2")
    assert inf.sync() == 3
    assert seen[1:] == [("ADDED", None, "n2"), ("MODIFIED", "n1", "n1"), ("DELETED", "n2", "n2")]
    assert [o["metadata"]["name"] for o in inf.list()] == ["n1"]
    got = inf.get("n1")
    assert got is not None and got["metadata"]["labels"] == {"a": "b"}
    assert inf.resource_version == mc.resource_version


def test_late_handler_is_told_of_the_cache() -> None:
    mc = MemoryCluster()
    mc.create(NODE, node("n1"))
    inf = Informer(mc, NODE)
    inf.sync()
    seen: Seen = []
    inf.add_handler(recorder(seen))
    assert seen == [("ADDED", None, "n1")]


def test_relist_after_gone_reports_the_difference() -> None:
    mc = MemoryCluster(watch_history=3)
    mc.create(POD, pod("keep"))
    mc.create(POD, pod("change"))
    mc.create(POD, pod("remove"))
    inf = Informer(mc, POD, namespace="default")
    inf.sync()
    seen: Seen = []
    inf.add_handler(recorder(seen))
    seen.clear()
    # More changes than the window holds: the informer's watch is cut off.
    mc.patch(POD, "change", {"metadata": {"labels": {"v": "2"}}}, "default")
    mc.delete(POD, "remove", "default")
    for i in range(5):
        mc.create(POD, pod(f"new{i}"))
    mc.delete(POD, "new0", "default")
    inf.sync()
    assert inf.relists == 1
    assert sorted(seen) == sorted(
        [
            ("MODIFIED", "change", "change"),
            ("DELETED", "remove", "remove"),
            *[("ADDED", None, f"new{i}") for i in range(1, 5)],
        ]
    )
    assert [o["metadata"]["name"] for o in inf.list()] == mc_names(mc)
    # And it keeps following afterwards.
    mc.create(POD, pod("after"))
    inf.sync()
    assert inf.get("after", "default") is not None


def mc_names(mc: MemoryCluster) -> list[str]:
    return [o["metadata"]["name"] for o in mc.list(POD, "default").items]


def test_index_by_node_follows_binding_and_deletion() -> None:
    mc = MemoryCluster()
    for i in range(4):
        mc.create(POD, pod(f"p{i}"))
    inf = Informer(mc, POD, indexers={"node": index_by_node_name})
    inf.sync()
    assert len(inf.by_index("node", "")) == 4
    mc.bind("default", "p0", "n1")
    mc.bind("default", "p1", "n1")
    mc.bind("default", "p2", "n2")
    inf.sync()
    assert [o["metadata"]["name"] for o in inf.by_index("node", "n1")] == ["p0", "p1"]
    assert inf.index_values("node") == ["", "n1", "n2"]
    mc.delete(POD, "p0", "default", grace_period_seconds=0)
    inf.sync()
    assert [o["metadata"]["name"] for o in inf.by_index("node", "n1")] == ["p1"]


def test_selected_informer_drops_objects_that_stop_matching() -> None:
    mc = MemoryCluster()
    mc.create(POD, pod("p1", labels={"app": "web"}))
    inf = Informer(mc, POD, label_selector="app=web")
    seen: Seen = []
    inf.add_handler(recorder(seen))
    inf.sync()
    mc.patch(POD, "p1", {"metadata": {"labels": {"app": "db"}}}, "default")
    inf.sync()
    assert seen[-1][0] == "DELETED"
    assert inf.list() == []


def test_bookmarks_advance_the_version_without_handlers() -> None:
    mc = MemoryCluster()
    inf = Informer(mc, POD)
    seen: Seen = []
    inf.add_handler(recorder(seen))
    inf.sync()
    mc.create(NODE, node("n1"))
    version = mc.bookmark()
    assert inf.sync() == 0
    assert inf.resource_version == version and seen == []
