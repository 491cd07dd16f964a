"""The SPD rules both the controller and the agent read: baseline sentinel, business
performance level, the reclaim gate and the aggMetrics merge."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names, spd
from pykatalyst.api.spd import POOR, PodMeta

metas = st.lists(
    st.builds(PodMeta, st.integers(0, 50).map(float), st.sampled_from("abcdefgh")),
    min_size=0,
    max_size=30,
    unique=True,
)


@settings(max_examples=200, deadline=None)
@given(metas, st.integers(-5, 105))
def test_the_sentinel_is_the_pod_at_floor_n_minus_1_times_p_over_100(
    pods: list[PodMeta], percent: int
) -> None:
    found = spd.sentinel(pods, percent)
    if percent <= 0 or percent >= 100 or not pods:
        assert found is None
        return
    ordered = sorted(pods, key=lambda m: (m.created, m.name))
    index = int((len(pods) - 1) * percent / 100)  # Katalyst's float floor, checked exactly
    assert found == ordered[index]
    baseline = [m for m in pods if spd.baseline_rule(m, percent, found)[0]]
    assert len(baseline) == index + 1
    assert all(m <= found for m in baseline)


def test_100_makes_every_pod_baseline_0_and_none_make_none() -> None:
    pod = PodMeta(10.0, "p")
    assert spd.baseline_rule(pod, 100, None)[0] is True
    assert spd.baseline_rule(pod, 0, None)[0] is False
    assert spd.baseline_rule(pod, None, None)[0] is False


def test_the_annotation_is_written_byte_for_byte_as_katalyst_and_read_back() -> None:
    meta = PodMeta(1701388800.0, "pod1")  # 2023-12-01T00:00:00Z
    text = spd.sentinel_text(meta)
    assert text == '{"timeStamp":"2023-12-01T00:00:00Z","podName":"pod1"}'
    obj = {"metadata": {"annotations": {names.SPD_BASELINE_SENTINEL_ANNOTATION: text}}}
    assert spd.read_sentinel(obj) == meta
    ext = spd.extended_sentinels_text({"b": meta, "a": PodMeta(0.0, "x")})
    assert ext is not None and list(json.loads(ext)) == ["a", "b"]
    assert spd.extended_sentinels_text({}) is None


def _spd(indicators: list[tuple[str, str, float]], current: dict[str, float]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for name, level, value in indicators:
        groups.setdefault(name, []).append({"indicatorLevel": level, "value": value})
    return {
        "spec": {"businessIndicator": [{"name": n, "indicators": i} for n, i in groups.items()]},
        "status": {"businessStatus": [{"name": n, "current": c} for n, c in current.items()]},
    }


def test_business_level_poor_perfect_good_and_the_worst_wins() -> None:
    bounds = [("rpc", "UpperBound", 100.0), ("rpc", "LowerBound", 10.0)]
    assert spd.business_level(_spd(bounds, {"rpc": 150})).level == "Poor"
    assert spd.business_level(_spd(bounds, {"rpc": 5})).level == "Perfect"
    assert spd.business_level(_spd(bounds, {"rpc": 50})).level == "Good"
    two = [*bounds, ("qps", "LowerBound", 1000.0)]
    level = spd.business_level(_spd(two, {"rpc": 5, "qps": 2000}))
    assert level.level == "Good"  # qps is Good, rpc Perfect: the worse one
    missing = spd.business_level(_spd(two, {"rpc": 5}))
    assert missing.level == "Unknown" and "qps has no current value" in missing.error
    assert spd.business_level({"spec": {}}).level == "Unknown"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 100), st.floats(0, 100)), max_size=3),
    st.floats(0, 200),
)
def test_poor_exactly_when_some_indicator_is_above_its_upper_bound(
    groups: list[tuple[str, float, float]], value: float
) -> None:
    named = {n: (u, lo) for n, u, lo in groups}
    inds = [(n, "UpperBound", u) for n, (u, _) in named.items()]
    inds += [(n, "LowerBound", lo) for n, (_, lo) in named.items()]
    level = spd.business_level(_spd(inds, {n: value for n in named}))
    assert (level.level == POOR) == any(value > u for u, _ in named.values())


def test_the_reclaim_gate_says_which_rule_applied() -> None:
    poor = _spd([("rpc", "UpperBound", 100.0)], {"rpc": 150})
    assert "Poor" in spd.reclaim_rule(PodMeta(5.0, "a"), poor)
    sentinel = spd.sentinel_text(PodMeta(5.0, "b"))
    base = {
        "metadata": {"annotations": {names.SPD_BASELINE_SENTINEL_ANNOTATION: sentinel}},
        "spec": {"baselinePercent": 50},
    }
    assert "baseline" in spd.reclaim_rule(PodMeta(5.0, "a"), base)
    assert spd.reclaim_rule(PodMeta(5.0, "c"), base) == ""
    unwritten = {"spec": {"baselinePercent": 50}}
    assert "no spd.katalyst.kubewharf.io/baselineSentinel" in spd.reclaim_rule(
        PodMeta(1.0, "a"), unwritten
    )
    assert spd.reclaim_rule(PodMeta(1.0, "a"), {"spec": {}}) == ""


scopes = st.sampled_from(
    ["", "ResourcePortraitIndicatorPlugin", "ResourcePortraitIndicatorPlugin-x", "Other"]
)
entries = st.lists(
    st.fixed_dictionaries(
        {"scope": scopes, "aggregator": st.sampled_from(["avg", "max"]), "items": st.integers()}
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(entries, entries)
def test_the_merge_keys_by_scope_and_aggregator_and_drops_unproduced_scopes(
    current: list[dict[str, Any]], incoming: list[dict[str, Any]]
) -> None:
    produced = (names.SPD_SCOPE_RESOURCE_PORTRAIT,)
    out = spd.merge_agg_metrics(current, incoming, produced)
    assert all(e["scope"] != "Other" for e in out)
    for e in incoming:
        if e["scope"] != "Other":
            latest = [i for i in incoming if spd.agg_key(i) == spd.agg_key(e)][-1]
            have = [o for o in out if spd.agg_key(o) == spd.agg_key(e)]
            assert have and have[0]["items"] == latest["items"]
    assert spd.merge_agg_metrics(out, [], produced) == out
