"""The EventRecorder: client-go's aggregation and spam filter, decision records carried in
a structured field, and writes that never raise."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.records import DecisionRecord
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.explain_events import record_from_event
from pykatalyst.cluster.events import SPAM_BURST, SPAM_REFILL_S, EventRecorder, ObjectRef
from pykatalyst.cluster.protocol import JSON, Forbidden

POD = ObjectRef.pod("team/web-0", uid="u-1")


class _Cluster(MemoryCluster):
    def __init__(self) -> None:
        super().__init__()
        self.create(names.NAMESPACE, {"metadata": {"name": "team"}})


def _events(cluster: MemoryCluster, namespace: str = "team") -> list[JSON]:
    return cluster.list(names.EVENT, namespace).items


def test_a_repeated_event_bumps_its_count_instead_of_adding_one() -> None:
    cluster = _Cluster()
    rec = EventRecorder(cluster, "katalyst-agent", "node-a")
    assert rec.record(POD, "Warning", "InvalidQoS", "bad qos_level", 100.0) == "created"
    assert rec.record(POD, "Warning", "InvalidQoS", "bad qos_level", 160.0) == "updated"
    assert rec.record(POD, "Warning", "InvalidQoS", "other message", 170.0) == "created"
    evs = sorted(_events(cluster), key=lambda e: e["message"])
    assert [(e["message"], e["count"]) for e in evs] == [
        ("bad qos_level", 2),
        ("other message", 1),
    ]
    first = evs[0]
    assert first["firstTimestamp"] == "1970-01-01T00:01:40Z"
    assert first["lastTimestamp"] == "1970-01-01T00:02:40Z"
    assert first["source"] == {"component": "katalyst-agent", "host": "node-a"}
    assert first["involvedObject"] == {
        "kind": "Pod",
        "name": "web-0",
        "namespace": "team",
        "uid": "u-1",
        "apiVersion": "v1",
    }


def test_an_expired_event_is_written_anew() -> None:
    cluster = _Cluster()
    rec = EventRecorder(cluster, "katalyst-agent")
    rec.record(POD, "Warning", "InvalidQoS", "bad", 1.0)
    (ev,) = _events(cluster)
    cluster.delete(names.EVENT, ev["metadata"]["name"], "team")
    assert rec.record(POD, "Warning", "InvalidQoS", "bad", 2.0) == "created"
    (again,) = _events(cluster)
    assert again["count"] == 1


def test_events_about_nodes_go_to_the_default_namespace() -> None:
    cluster = _Cluster()
    EventRecorder(cluster, "katalyst-controller").record(
        ObjectRef.node("node-a"), "Warning", "AgentSilent", "silent", 5.0
    )
    (ev,) = _events(cluster, "default")
    assert ev["involvedObject"] == {"kind": "Node", "name": "node-a", "apiVersion": "v1"}


def test_one_object_cannot_flood_the_api_server() -> None:
    cluster = _Cluster()
    rec = EventRecorder(cluster, "katalyst-agent")
    outcomes = [rec.record(POD, "Warning", "R", f"m{i}", 10.0) for i in range(SPAM_BURST + 5)]
    assert outcomes.count("created") == SPAM_BURST
    assert outcomes.count("throttled") == 5 and rec.throttled == 5
    # other objects are not held back by this one
    other = ObjectRef.pod("team/web-1")
    assert rec.record(other, "Warning", "R", "m", 10.0) == "created"
    # one more for the noisy pod once a refill period has passed
    assert rec.record(POD, "Warning", "R", "late", 10.0 + SPAM_REFILL_S) == "created"
    assert rec.record(POD, "Warning", "R", "later", 10.0 + SPAM_REFILL_S) == "throttled"


class _NoPatch(_Cluster):
    def patch(self, *args: Any, **kwargs: Any) -> JSON:
        raise Forbidden("events is forbidden: cannot patch")


def test_a_refused_write_is_counted_and_never_raised() -> None:
    cluster = _NoPatch()
    rec = EventRecorder(cluster, "katalyst-agent")
    rec.record(POD, "Warning", "R", "m", 1.0)
    assert rec.record(POD, "Warning", "R", "m", 2.0) == "failed"
    assert rec.failed == 1
    (ev,) = _events(cluster)
    assert ev["count"] == 1


def test_the_decision_record_travels_in_a_structured_field() -> None:
    cluster = _Cluster()
    record = DecisionRecord(
        time=50.0,
        node="node-a",
        kind="eviction",
        plugin="memory-pressure",
        reason=names.EVENT_REASON_EVICT_CREATED,
        # nothing in the message names the plugin
        message="evicted to relieve the node",
        object_key="team/web-0",
        object_uid="u-1",
        signal="memory.available",
        observed=0.04,
        threshold=0.05,
    )
    EventRecorder(cluster, names.AGENT_COMPONENT, "node-a").record(
        POD, "Warning", record.reason, record.message, record.time, decision=record
    )
    (ev,) = _events(cluster)
    back = record_from_event(ev)
    assert back is not None
    assert (back.plugin, back.signal, back.observed, back.threshold) == (
        "memory-pressure",
        "memory.available",
        0.04,
        0.05,
    )
    # a hand-edited, unreadable record falls back to the Event's own fields
    ev["metadata"]["annotations"][names.EVENT_RECORD_ANNOTATION] = "{not json"
    fallback = record_from_event(ev)
    assert fallback is not None and fallback.plugin == "" and fallback.kind == "eviction"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.floats(0, 400)),
        min_size=1,
        max_size=80,
    )
)
def test_every_recorded_event_is_stored_once_or_counted(
    calls: list[tuple[int, int, float]],
) -> None:
    cluster = _Cluster()
    rec = EventRecorder(cluster, "c", burst=5, refill_s=100.0)
    now = 0.0
    written: dict[int, int] = {}
    for obj, msg, dt in calls:
        now += dt
        ref = ObjectRef.pod(f"team/p{obj}")
        out = rec.record(ref, "Normal", "R", f"m{msg}", now)
        assert out in ("created", "updated", "throttled")
        if out != "throttled":
            written[obj] = written.get(obj, 0) + 1
    evs = _events(cluster)
    # one Event per distinct (object, message); counts add up to what was let through
    keys = [(e["involvedObject"]["name"], e["message"]) for e in evs]
    assert len(keys) == len(set(keys))
    for obj, n in written.items():
        assert sum(e["count"] for e in evs if e["involvedObject"]["name"] == f"p{obj}") == n
        # never more than the burst plus what the refill allows over the whole run
        assert n <= 5 + now / 100.0 + 1


def test_recording_from_several_threads_writes_every_event_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from pykatalyst.cluster.clock import VirtualClock

    cluster = MemoryCluster(VirtualClock())
    recorder = EventRecorder(cluster, "katalyst-scheduler")

    def one(i: int) -> str:
        ref = ObjectRef.pod(f"default/p{i % 40}", f"uid-{i % 40}", "1")
        return recorder.record(ref, "Normal", "Scheduled", f"assigned to n{i % 3}", 1.0)

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(one, range(400)))
    events = cluster.list(names.EVENT, "default").items
    # 40 pods x 3 messages, 10 records per pod (under the spam filter's 25): every record
    # is in an Event's count, none is lost; repeats are counted up (two threads writing
    # the same new Event at the same moment may both create it)
    assert set(outcomes) <= {"created", "updated"}, outcomes
    assert sum(e["count"] for e in events) == 400
    assert 120 <= len(events) < 200
