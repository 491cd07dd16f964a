"""The SPD controller on MemoryCluster: SPDs for enabled workloads, sentinels, pod
stamps, aggMetrics scopes, bad SPDs."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names, spd
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.skips import SkippedObjects
from pykatalyst.controllers.spd import (
    SPDConfig,
    SPDController,
    SPDInputs,
    decide,
    parse_baseline_percent,
    read_workload,
)

SPD = names.SERVICE_PROFILE_DESCRIPTOR


CLOCK = VirtualClock(1000)


def cluster() -> MemoryCluster:
    c = MemoryCluster(clock=CLOCK)
    for kind in (names.DEPLOYMENT, names.STATEFUL_SET):
        c.register_kind(kind, unconditional_update=True)
    return c


def deployment(name: str, *, enabled: bool = True, level: str = "shared_cores") -> dict[str, Any]:
    ann = {names.SPD_ENABLE_ANNOTATION: "true"} if enabled else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"team": "a"},
            "annotations": ann,
        },
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {names.QOS_LEVEL_ANNOTATION: level},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def add_pod(c: MemoryCluster, name: str, app: str) -> None:
    """A pod created now (the API server stamps creationTimestamp), a second after the last."""
    CLOCK.advance(1)
    c.create(names.POD, pod(name, app, 0), "default")


def pod(name: str, app: str, created: float) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": app},
            "creationTimestamp": rfc3339(created),
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def test_an_enabled_deployment_gets_an_spd_its_pods_are_stamped_and_the_sentinel_written() -> None:
    c = cluster()
    dep = c.create(names.DEPLOYMENT, deployment("web"), "default")
    for i in (1, 2, 0, 3):  # created in this order
        add_pod(c, f"web-{i}", "web")
    add_pod(c, "other", "db")
    ctl = SPDController(c, SPDConfig(baseline_percent={"shared_cores": 50}))
    _, result = ctl.run(1000)
    assert not result.failed
    s = c.get(SPD, "web", "default")
    ref = s["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Deployment", "web", dep["metadata"]["uid"])
    assert s["metadata"]["labels"] == {"team": "a"}
    assert s["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    assert s["spec"]["baselinePercent"] == 50
    # 4 pods by creation time: web-1, web-2, web-0, web-3; index ⌊3·50/100⌋ = 1
    sentinel = spd.read_sentinel(s)
    assert sentinel is not None and sentinel.name == "web-2"
    for i in range(4):
        ann = c.get(names.POD, f"web-{i}", "default")["metadata"]["annotations"]
        assert ann[names.SPD_NAME_ANNOTATION] == "web"
    assert names.SPD_NAME_ANNOTATION not in (
        c.get(names.POD, "other", "default")["metadata"].get("annotations") or {}
    )
    assert ctl.run(1001)[0].actions == ()  # settled


def test_the_default_is_100_a_new_pod_moves_the_sentinel_and_extended_indicators_get_theirs() -> (
    None
):
    c = cluster()
    c.create(names.DEPLOYMENT, deployment("web", level="dedicated_cores"), "default")
    add_pod(c, "web-a", "web")
    first = spd.pod_meta(c.get(names.POD, "web-a", "default"))
    ctl = SPDController(c, SPDConfig(baseline_percent={"shared_cores": 50}))
    ctl.run(1000)
    s = c.get(SPD, "web", "default")
    assert s["spec"]["baselinePercent"] == 100
    assert names.SPD_BASELINE_SENTINEL_ANNOTATION not in (s["metadata"].get("annotations") or {})
    s["spec"]["baselinePercent"] = 40
    s["spec"]["extendedIndicator"] = [
        {"name": "ReclaimResource", "baselinePercent": 100},
        {"name": "TMO", "baselinePercent": 60},
    ]
    c.update(SPD, s)
    add_pod(c, "web-0", "web")
    second = spd.pod_meta(c.get(names.POD, "web-0", "default"))
    add_pod(c, "web-1", "web")
    ctl.run(1010)
    ann = c.get(SPD, "web", "default")["metadata"]["annotations"]
    assert spd.read_sentinel({"metadata": {"annotations": ann}}) == first  # ⌊2·0.4⌋ = 0
    ext = ann[names.SPD_EXTENDED_BASELINE_SENTINEL_ANNOTATION]
    want = {"TMO": second.to_json()}  # ⌊2·0.6⌋ = 1
    assert ext == json.dumps(want, separators=(",", ":"))


def test_the_spd_goes_with_the_annotation_and_the_pods_lose_its_name() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment("web"), "default")
    c.create(names.POD, pod("web-0", "web", 100), "default")
    ctl = SPDController(c)
    ctl.run(1000)
    d = c.get(names.DEPLOYMENT, "web", "default")
    d["metadata"]["annotations"] = {}
    c.update(names.DEPLOYMENT, d)
    plan, _ = ctl.run(1010)
    assert [a.verb for a in plan.actions] == ["delete", "stamp-pod"]
    assert c.list(SPD, "default").items == []
    assert names.SPD_NAME_ANNOTATION not in (
        c.get(names.POD, "web-0", "default")["metadata"].get("annotations") or {}
    )


def test_a_users_own_spd_is_kept_synced_and_never_deleted() -> None:
    c = cluster()
    c.create(names.DEPLOYMENT, deployment("web", enabled=False), "default")
    c.create(names.POD, pod("web-0", "web", 100), "default")
    body = {
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {
            "targetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
            "baselinePercent": 100,
        },
    }
    c.create(SPD, body, "default")
    SPDController(c).run(1000)
    assert c.get(SPD, "mine", "default")
    assert (
        c.get(names.POD, "web-0", "default")["metadata"]["annotations"][names.SPD_NAME_ANNOTATION]
        == "mine"
    )


def test_agg_metrics_of_scopes_nothing_produces_are_dropped() -> None:
    c = cluster()
    body = {
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "none"}},
    }
    c.create(SPD, body, "default")
    s = c.get(SPD, "s", "default")
    s["status"] = {
        "aggMetrics": [
            {"aggregator": "avg", "scope": names.SPD_SCOPE_RESOURCE_PORTRAIT, "items": []},
            {"aggregator": "max", "scope": "SomebodyElsesPlugin", "items": []},
            {"aggregator": "avg", "items": []},
        ]
    }
    c.update_status(SPD, s)
    plan, _ = SPDController(c).run(1000)
    assert "SomebodyElsesPlugin" in plan.actions[0].why
    kept = c.get(SPD, "s", "default")["status"]["aggMetrics"]
    assert [e.get("scope", "") for e in kept] == [names.SPD_SCOPE_RESOURCE_PORTRAIT, ""]


def test_a_bad_spd_is_skipped_with_an_event_naming_the_field_and_the_rest_goes_on() -> None:
    c = cluster()
    bad = {
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "baselinePercent": 170},
    }
    c.create(SPD, bad, "default")
    c.create(names.DEPLOYMENT, deployment("db"), "default")
    skips = SkippedObjects("controller", EventRecorder(c, names.CONTROLLER_COMPONENT))
    plan, result = SPDController(c, skips=skips).run(1000)
    assert [s.name for s in plan.skips] == ["bad"] and "baselinePercent" in plan.skips[0].message
    assert c.get(SPD, "db", "default") and not result.failed
    events = [
        e for e in c.list(names.EVENT, "default").items if e["involvedObject"]["name"] == "bad"
    ]
    assert events and "baselinePercent" in events[0]["message"]


def test_the_flag_is_read_and_bad_items_are_refused_naming_them() -> None:
    assert parse_baseline_percent("shared_cores=50, dedicated_cores=0") == {
        "shared_cores": 50,
        "dedicated_cores": 0,
    }
    for bad in ("shared=50", "shared_cores=x", "shared_cores=120", "shared_cores"):
        try:
            parse_baseline_percent(bad)
        except ValueError as exc:
            assert bad.split("=")[0] in str(exc)
        else:
            raise AssertionError(bad)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=6), st.lists(st.integers(0, 5), max_size=10))
def test_decide_creates_exactly_the_missing_spds_and_stamps_exactly_the_workloads_pods(
    enabled: list[bool], pod_owner: list[int]
) -> None:
    workloads = [
        read_workload(
            names.DEPLOYMENT,
            {
                **deployment(f"w{i}", enabled=e),
                "metadata": {**deployment(f"w{i}", enabled=e)["metadata"], "uid": f"u{i}"},
            },
        )
        for i, e in enumerate(enabled)
    ]
    pods = [pod(f"p{j}", f"w{o}", 100 + j) for j, o in enumerate(pod_owner)]
    plan = decide(SPDInputs(workloads, [], pods), SPDConfig(), 0)
    created = {a.name for a in plan.actions if a.verb == "create"}
    assert created == {f"w{i}" for i, e in enumerate(enabled) if e}
    stamped = {a.name for a in plan.actions if a.verb == "stamp-pod"}
    assert stamped == {f"p{j}" for j, o in enumerate(pod_owner) if o < len(enabled) and enabled[o]}
