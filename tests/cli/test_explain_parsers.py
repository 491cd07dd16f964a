"""What `katalyst explain` parses from cluster objects: whatever an annotation or an Event
holds, it reads the well-formed ones back exactly and reports the rest, never raising."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.reporter import PodCpus, pools_annotation
from pykatalyst.api import names
from pykatalyst.cli.explain_cluster import (
    RESOURCES,
    SILENT_AFTER_S,
    health_json,
    numa_json,
    pools_json,
    published_pools,
    reclaimed_json,
    taints_json,
)
from pykatalyst.cli.explain_events import event_json, record_from_event
from pykatalyst.topology.cpuset import CPUSet

cpusets = st.frozensets(st.integers(0, 127), max_size=24).map(CPUSet.of)
pool_names = st.sampled_from(["share", "reclaim", "reserve", "flink", "share-NUMA1"])
pods = st.builds(
    PodCpus,
    pod=st.from_regex(r"[a-z]{1,5}/[a-z0-9-]{1,10}", fullmatch=True),
    uid=st.uuids().map(str),
    pool=pool_names,
    cpuset=cpusets,
    ramping_up=st.booleans(),
    note=st.sampled_from(["", "left as placed: invalid QoS"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


def cnr_with(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "annotations": annotations}, "status": {}}


@given(st.dictionaries(pool_names, cpusets, max_size=5), st.lists(pods, max_size=6))
def test_published_pools_read_back_what_the_reporter_wrote(
    pools: dict[str, CPUSet], entries: list[PodCpus]
) -> None:
    value = pools_annotation(pools, entries)
    read, read_pods, error = published_pools(cnr_with({names.CPU_POOLS_ANNOTATION: value}))
    assert error is None
    assert {k: CPUSet.parse(v) for k, v in read.items()} == pools
    assert len(read_pods) == len(entries)
    for p in entries:
        got = next(e for e in read_pods if e["uid"] == p.uid and e["pod"] == p.pod)
        assert got["pool"] == p.pool and CPUSet.parse(got["cpuset"]) == p.cpuset
        assert got.get("ramping_up", False) == p.ramping_up
        assert got.get("note", "") == p.note
    # the same input gives the same text: the reporter rewrites it only on change
    assert pools_annotation(dict(reversed(pools.items())), entries[::-1]) == value


@given(st.text(max_size=40) | json_values.map(json.dumps))
def test_any_annotation_text_is_read_or_reported(text: str) -> None:
    cnr = cnr_with({names.CPU_POOLS_ANNOTATION: text, names.RECLAIMED_TERMS_ANNOTATION: text})
    pools, entries, error = published_pools(cnr)
    assert (error is None) or (pools == {} and entries == [])
    problems: list[str] = []
    reclaimed = reclaimed_json(cnr, problems)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    assert (reclaimed["terms_error"] is None) == isinstance(parsed, dict)
    assert problems == ([] if isinstance(parsed, dict) else [reclaimed["terms_error"]])


events = st.fixed_dictionaries(
    {},
    optional={
        "reason": st.sampled_from(["EvictCreated", "ConditionSet", "AgentSilent", "Pulled"])
        | json_values,
        "message": json_values,
        "source": json_values
        | st.fixed_dictionaries(
            {"component": st.sampled_from([names.AGENT_COMPONENT, names.CONTROLLER_COMPONENT])},
            optional={"host": st.text(max_size=5)},
        ),
        "involvedObject": json_values
        | st.fixed_dictionaries(
            {"kind": st.sampled_from(["Pod", "Node"]), "name": st.text(max_size=5)},
            optional={"namespace": st.text(max_size=5), "uid": st.text(max_size=5)},
        ),
        "lastTimestamp": json_values | st.just("2026-12-01T08:00:00Z"),
        "eventTime": json_values,
        "series": json_values,
        "count": json_values,
    },
)


@given(events)
def test_any_event_is_shown_and_ours_become_records(ev: dict[str, Any]) -> None:
    shown = event_json(ev)
    record = record_from_event(ev)
    assert (shown["record"] is None) == (record is None)
    assert isinstance(shown["count"], int)
    if record is not None:
        assert ev["reason"] in ("EvictCreated", "ConditionSet", "AgentSilent")
        obj = ev.get("involvedObject")
        assert record.object_kind == (str(obj.get("kind", "")) if isinstance(obj, dict) else "")
        if ev.get("lastTimestamp") == "2026-12-01T08:00:00Z":
            assert shown["time"] == "2026-12-01T08:00:00Z"


quantities = st.sampled_from(["8", "40k", "187Gi", "plenty", "", "-1"]) | json_values
statuses = st.fixed_dictionaries(
    {},
    optional={
        "resources": json_values
        | st.fixed_dictionaries(
            {"allocatable": st.dictionaries(st.sampled_from(list(RESOURCES.values())), quantities)}
        ),
        "topologyZone": json_values
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.just(names.ZONE_SOCKET), "name": st.text(max_size=2)},
                optional={"children": json_values},
            ),
            max_size=2,
        ),
        "conditions": json_values
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.just(names.CNR_CONDITION_AGENT_READY)},
                optional={"lastHeartbeatTime": json_values | st.just("2026-12-01T08:00:00Z")},
            ),
            max_size=2,
        ),
    },
)


@given(
    statuses,
    st.fixed_dictionaries({}, optional={"taints": json_values}),
    st.dictionaries(
        st.sampled_from([names.RECLAIMED_TERMS_ANNOTATION, names.CPU_POOLS_ANNOTATION]),
        st.text(max_size=20) | json_values.map(json.dumps),
    ),
)
def test_any_cnr_is_explained_without_raising(
    status: dict[str, Any], spec: dict[str, Any], annotations: dict[str, str]
) -> None:
    cnr = {"metadata": {"name": "n1", "annotations": annotations}, "spec": spec, "status": status}
    problems: list[str] = []
    reclaimed = reclaimed_json(cnr, problems)
    assert set(reclaimed) >= {"cpu", "memory", "terms_time", "terms_error"}
    assert isinstance(numa_json(cnr, problems), list)
    assert isinstance(pools_json(cnr, problems), list)
    health = health_json(cnr, 1e9)
    assert health["silent"] == (health["age_s"] is None or health["age_s"] >= SILENT_AFTER_S)
    taints = taints_json({"metadata": {"name": "n1"}, "spec": spec}, cnr)
    assert set(taints) == {"node", "cnr"}
    assert all(isinstance(p, str) for p in problems)
