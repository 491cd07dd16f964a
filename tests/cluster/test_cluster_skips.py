"""SkippedObjects: every skip counted, one Event per object generation, a throttled Event
tried again on the next skip, nothing raised."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason

AQC = names.ADMIN_QOS_CONFIGURATION


def _obj(generation: int, spec: Any = None) -> dict[str, Any]:
    meta = {"name": "a", "namespace": "default", "uid": "u1", "generation": generation}
    return {"metadata": meta, "spec": {} if spec is None else spec}


def _events(cluster: MemoryCluster) -> list[dict[str, Any]]:
    return cluster.list(names.EVENT).items


def test_the_counter_is_the_components_and_the_event_is_on_the_object() -> None:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    registry = CollectorRegistry()
    skips = SkippedObjects("agent", EventRecorder(cluster, names.AGENT_COMPONENT, "n1"), registry)
    skip = Skip.of(AQC, _obj(1), "invalid", "spec.config: accepted: an object")
    assert skips.report([skip, skip], clock.now()) == []
    labels = {"kind": AQC.kind, "reason": "invalid"}
    assert registry.get_sample_value("katalyst_agent_objects_skipped_total", labels) == 2
    (event,) = _events(cluster)
    assert event["involvedObject"] == {
        "kind": AQC.kind,
        "name": "a",
        "namespace": "default",
        "uid": "u1",
        "apiVersion": AQC.api_version,
    }
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "InvalidConfig", 1)
    assert event["metadata"]["namespace"] == "default"
    # a new generation that is still bad is news again
    skips.report([Skip.of(AQC, _obj(2), "invalid", "spec.config: accepted: an object")], 1)
    assert len(_events(cluster)) == 1 and _events(cluster)[0]["count"] == 2


def test_a_throttled_event_is_said_and_written_on_a_later_skip() -> None:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    recorder = EventRecorder(cluster, names.CONTROLLER_COMPONENT, burst=1, refill_s=10)
    skips = SkippedObjects("controller", recorder)
    recorder.record(Skip.of(AQC, _obj(1), "invalid", "x").ref(), "Normal", "Other", "m", 1000)
    skip = Skip.of(AQC, _obj(1), "invalid", "spec: bad")
    assert skips.report([skip], 1000) == ["AdminQoSConfiguration default/a: throttled"]
    assert skips.count(AQC.kind, "invalid") == 1
    assert skips.report([skip], 1011) == []
    assert [e["reason"] for e in _events(cluster)] == ["Other", "InvalidConfig"]


def test_counted_only_when_another_part_writes_the_event() -> None:
    cluster = MemoryCluster(clock=VirtualClock(0))
    skips = SkippedObjects("agent", EventRecorder(cluster, names.AGENT_COMPONENT))
    skips.report([Skip.of(AQC, _obj(1), "invalid", "m")], 0, event=False)
    assert skips.count(AQC.kind, "invalid") == 1 and _events(cluster) == []


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["metadata", "spec", "status", "kind"]),
        st.one_of(st.none(), st.text(max_size=3), st.integers(), st.lists(st.integers())),
    )
)
def test_any_stored_shape_gives_a_skip_and_a_reason(obj: dict[str, Any]) -> None:
    skip = Skip.of(AQC, obj, skip_reason(obj), "m")
    assert skip.reason in (names.SKIP_REASON_UNREADABLE, names.SKIP_REASON_INVALID)
    broken = any(
        obj.get(k) is not None and not isinstance(obj[k], dict) for k in ("spec", "status")
    )
    assert (skip.reason == names.SKIP_REASON_UNREADABLE) == (
        broken or (obj.get("metadata") is not None and not isinstance(obj["metadata"], dict))
    )
    assert skip.name == ""
