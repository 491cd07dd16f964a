"""A KVPA whose `algorithmPolicy.recommender` is `pykatalyst`, on MemoryCluster: the vpa
controller reads the workload's usage, recommends with pykatalyst's recommender (the call
the ResourceRecommend controller makes), writes the VPARec (requests, limits in the declared
ratio, the terms behind them), and the KVPA's pods are resized to it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.protocol import JSON
from pykatalyst.controllers import vparec
from pykatalyst.controllers.resource_recommend import ResourceRecommendConfig
from pykatalyst.controllers.vertical import VPAController
from pykatalyst.recommend import CurrentResources, UsageSeries
from pykatalyst.recommend.ensemble import PykatalystSettings
from tests.controllers.test_resource_recommend import FakeSource
from tests.controllers.test_vpa import KVPA, NS, World, res

HOUR = 3600.0
START = 3_000_000.0
MIB = 1024.0**2


def usage(now: float, hours: float, cpu: float = 1.0, mem: float = 200 * MIB) -> UsageSeries:
    t = np.arange(now - hours * HOUR, now, 300.0)
    wave = 1 + 0.2 * np.sin(t / 7000)
    return UsageSeries.of(t, cpu * wave, mem * wave)


def world(data: Mapping[str, UsageSeries] | Exception | None, **kw: Any) -> World:
    w = World()
    w.clock.advance(START - w.clock.now())
    source = FakeSource(data) if data is not None else None
    w.ctl = VPAController(
        w.mc,
        w.ctl.config,
        registry=CollectorRegistry(),
        rr_config=kw.pop("rr_config", None),
        source=source,
        settings=kw.pop("settings", None),
    )
    dep = w.mc.get(names.DEPLOYMENT, "web", NS)
    dep["spec"]["template"] = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": res("200m", "400m")}]},
    }
    w.mc.update(names.DEPLOYMENT, dep)
    return w


def pykatalyst_kvpa(w: World, policies: list[JSON] | None = None) -> JSON:
    body = w.kvpa(policies)
    body["spec"]["resourcePolicy"]["algorithmPolicy"] = {"recommender": "pykatalyst"}
    return w.mc.update(KVPA, body)


def rec_entry(w: World) -> JSON:
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    (entry,) = rec["spec"]["containerRecommendations"]
    return dict(entry)


def figure(part: JSON, resource: str) -> float:
    return Quantity.parse(part["resources"][resource]).as_float()


def test_a_pykatalyst_kvpa_gets_requests_limits_and_terms_and_its_pods_are_resized() -> None:
    w = world({"c": usage(START + 10, 48)})
    w.pod("web-1")
    pykatalyst_kvpa(w)
    w.step()
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    entry = rec_entry(w)
    cpu, mem = figure(entry["requests"], "cpu"), figure(entry["requests"], "memory")
    assert 0.8 <= cpu <= 2.0 and 150 * MIB <= mem <= 400 * MIB
    # the template declares limits at twice the requests: the ratio is kept
    assert abs(figure(entry["limits"], "cpu") - 2 * cpu) < 0.002
    assert abs(figure(entry["limits"], "memory") / mem - 2.0) < 0.01
    terms = json.loads(rec["metadata"]["annotations"][names.RECOMMENDATION_TERMS_ANNOTATION])
    assert terms["containers"]["c"]["recommender"] == "pykatalyst"
    assert terms["containers"]["c"]["cpu"]["model"].startswith("half-life")
    w.step()
    w.step()
    requests = w.pod_now("web-1")["spec"]["containers"][0]["resources"]["requests"]
    assert Quantity.parse(requests["cpu"]).as_float() == cpu


def test_short_history_or_no_prometheus_is_an_event_on_the_kvpa_and_no_vparec() -> None:
    short = world({"c": usage(START + 10, 2)})
    short.pod("web-1")
    pykatalyst_kvpa(short)
    short.step()
    (event,) = short.events("RecommendFailed")
    assert "container c" in event["message"] and "at least 6h" in event["message"]
    assert not short.mc.list(names.VPA_RECOMMENDATION, NS).items
    none = world(None)
    pykatalyst_kvpa(none)
    none.step()
    (event,) = none.events("RecommendFailed")
    assert "no Prometheus address configured" in event["message"]


def test_it_recomputes_on_its_interval_and_writes_only_what_changed() -> None:
    data = {"c": usage(START + 4000, 48)}
    w = world(data, rr_config=ResourceRecommendConfig(vpa_interval_s=600))
    source = w.ctl.source
    assert isinstance(source, FakeSource)
    pykatalyst_kvpa(w)
    w.step()
    first = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    w.step(60)
    assert len(source.calls) == 1
    plan, result = w.step(600)
    assert len(source.calls) == 2
    # the same usage: hysteresis holds the figures and the VPARec is not written again
    assert plan.recs.recommend == ()
    assert not [d for d in result.done if d.startswith("spec vparec")]
    again = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    assert again["spec"] == first["spec"]


def test_an_oom_bump_is_clipped_at_the_policys_max_allowed() -> None:
    w = world({"c": usage(START + 10, 48, mem=200 * MIB)})
    records = [
        {"Namespace": NS, "Pod": "web-1", "Container": "c", "Memory": "900Mi"},
    ]
    records[0]["OOMAt"] = rfc3339(START - 600)
    cm = {
        "metadata": {"name": names.OOM_RECORD_CONFIG_MAP},
        "data": {names.OOM_RECORD_KEY: json.dumps(records)},
    }
    w.mc.create(names.CONFIG_MAP, cm, names.KUBE_SYSTEM_NAMESPACE)
    policy = {
        "containerName": "c",
        "controlledResources": ["cpu", "memory"],
        "maxAllowed": {"memory": "700Mi"},
    }
    pykatalyst_kvpa(w, [policy])
    w.step()
    entry = rec_entry(w)
    # the bump from 900Mi would ask for 1080Mi; the recommender itself stops at maxAllowed
    # (and the bump has faded a little in the 10 minutes since the kill)
    assert 650 * MIB < figure(entry["requests"], "memory") <= 700 * MIB
    rec = w.mc.get(names.VPA_RECOMMENDATION, "web", NS)
    terms = json.loads(rec["metadata"]["annotations"][names.RECOMMENDATION_TERMS_ANNOTATION])
    assert "raised after a recent OOM" in terms["containers"]["c"]["memory"]["notes"]


def test_other_recommenders_are_not_served_by_pykatalyst() -> None:
    w = world({"c": usage(START + 10, 48)})
    w.kvpa()  # recommender "external"
    w.step()
    assert not w.mc.list(names.VPA_RECOMMENDATION, NS).items
    assert w.ctl.source.calls == []  # type: ignore[attr-defined]


def test_settings_reach_the_recommender() -> None:
    grid = PykatalystSettings().cpu.model_copy(
        update={"percentiles": (1.0,), "margins": (0.4,), "half_lives_hours": (12.0,)}
    )
    w = world({"c": usage(START + 10, 48, cpu=1.0)}, settings=PykatalystSettings(cpu=grid))
    pykatalyst_kvpa(w)
    w.step()
    # the only candidate: the peak (1.2 cores) + 40 %
    assert abs(figure(rec_entry(w)["requests"], "cpu") - 1.68) < 0.05


@settings(max_examples=60, deadline=None)
@given(
    st.none() | st.floats(0.05, 8),
    st.none() | st.floats(0.05, 8),
    st.none() | st.floats(0.05, 8),
    st.none() | st.floats(0.05, 8),
)
def test_current_is_the_last_recommendation_in_the_declared_ratio(
    last_req: float | None, last_lim: float | None, d_req: float | None, d_lim: float | None
) -> None:
    part = {}
    if last_req is not None:
        part["requests"] = {"resources": {"cpu": f"{round(last_req * 1000)}m"}}
    if last_lim is not None:
        part["limits"] = {"resources": {"cpu": f"{round(last_lim * 1000)}m"}}
    rec = {"spec": {"containerRecommendations": [{"containerName": "c", **part}]}}
    declared = CurrentResources(cpu_request=d_req, cpu_limit=d_lim)
    inputs = vparec.UsageInputs({}, rec, {}, {"c": declared}, changed_at=5.0)
    cur = vparec.current_of(inputs, "c")
    assert cur is not None and cur.changed_at == 5.0
    if last_req is None:
        assert (cur.cpu_request, cur.cpu_limit) == (d_req, d_lim)
        return
    assert cur.cpu_request == round(last_req * 1000) / 1000
    if last_lim is not None:
        assert cur.cpu_limit == round(last_lim * 1000) / 1000
    elif d_lim is not None and d_req:
        assert cur.cpu_limit is not None
        assert abs(cur.cpu_limit / cur.cpu_request - d_lim / d_req) < 1e-9
    else:
        assert cur.cpu_limit == d_lim


def test_explain_pod_says_why_the_vparec_says_what_it_says() -> None:
    from pykatalyst.cli.explain_pod import explain_pod

    w = world({"c": usage(START + 10, 48)})
    w.pod("web-1")
    pykatalyst_kvpa(w)
    w.step()
    v = explain_pod(w.mc, NS, "web-1", w.clock.now())["vertical"]
    assert v["recommender"] == "pykatalyst"
    cpu = v["terms"]["c"]["cpu"]
    assert cpu.startswith("half-life") and ", cost " in cpu and "; next half-life" in cpu
    # a VPARec another recommender wrote, without terms: nothing is made up
    other = World()
    other.pod("web-1")
    other.rec(other.kvpa())
    other.step()
    assert "terms" not in explain_pod(other.mc, NS, "web-1", other.clock.now())["vertical"]
