"""The eviction stage's view of the pods stays true while it reuses parsed pods: the same
figures as a fresh parse, and a changed pod is read again."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.eviction.stage import StageReads
from pykatalyst.agent.eviction.types import EvictionSnapshot, PodInfo, pod_info
from pykatalyst.agent.inputs import EvictionInput
from pykatalyst.agent.pods import ParsedPods
from pykatalyst.api import names
from tests.agent.test_eviction_agent_scenario import Node

FROM_OBJECT = (
    "uid",
    "namespace",
    "name",
    "qos_level",
    "priority",
    "priority_class_name",
    "static",
    "terminating",
    "annotations",
    "labels",
    "request_milli_cpu",
    "request_memory",
    "reclaimed_milli_cpu",
    "reclaimed_memory",
)


def watched_node() -> tuple[Node, list[EvictionSnapshot]]:
    node = Node()
    seen: list[EvictionSnapshot] = []
    snapshot = node.stage.snapshot

    def record(inp: EvictionInput, reads: StageReads | None = None) -> EvictionSnapshot:
        seen.append(snapshot(inp, reads))
        return seen[-1]

    node.stage.snapshot = record  # type: ignore[method-assign]
    node.add("web", cpu="4", memory="8Gi")
    node.add(
        "batch",
        level="reclaimed_cores",
        cpu=None,
        memory=None,
        reclaimed_cpu="12k",
        reclaimed_memory="24Gi",
    )
    return node, seen


def by_name(snap: EvictionSnapshot) -> dict[str, PodInfo]:
    return {p.name: p for p in snap.pods}


def test_stage_pods_match_a_fresh_parse_and_follow_changes() -> None:
    node, seen = watched_node()
    node.tick()
    node.tick()
    for name, got in by_name(seen[-1]).items():
        fresh = pod_info(node.cluster.get(names.POD, name, "default"))
        assert {f: getattr(got, f) for f in FROM_OBJECT} == {
            f: getattr(fresh, f) for f in FROM_OBJECT
        }
    assert by_name(seen[-1])["batch"].reclaimed_milli_cpu == 12_000
    assert by_name(seen[-1])["batch"].evict_score == 0.0
    # an operator marks the batch pod: the next round sees the new annotation
    node.cluster.patch(
        names.POD,
        "batch",
        {"metadata": {"annotations": {names.POD_EVICT_SCORE_ANNOTATION: "-5"}}},
        "default",
    )
    node.tick()
    assert by_name(seen[-1])["batch"].evict_score == -5.0


def test_parsed_pods_parse_once_per_resource_version() -> None:
    calls: list[str] = []

    def parse(obj: dict[str, Any]) -> str:
        calls.append(obj["metadata"]["resourceVersion"])
        return str(obj["metadata"]["name"])

    cache: ParsedPods[str] = ParsedPods(parse)

    def obj(uid: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "name": f"pod-{uid}", "resourceVersion": rv}}

    assert cache.refresh([obj("a", "1"), obj("b", "1")]) == {"a": "pod-a", "b": "pod-b"}
    assert cache.refresh([obj("a", "1"), obj("b", "2")]) == {"a": "pod-a", "b": "pod-b"}
    assert calls == ["1", "1", "2"]
    # a pod gone from the list is forgotten: seen again, it is parsed again
    cache.refresh([obj("a", "1")])
    cache.refresh([obj("a", "1"), obj("b", "2")])
    assert calls == ["1", "1", "2", "2"]
