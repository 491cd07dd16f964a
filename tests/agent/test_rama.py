"""The rama provision policy: PID controllers that size the share pool from its indicators."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig, ConfigError, PIDParams, parse_config
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.procfs import parse_schedstat
from pykatalyst.agent.rama import (
    PIDState,
    pid_adjust,
    rama_requirement,
    region_targets,
    spd_targets,
)
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.sim.host import run_queue_wait_us
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json
from tests.agent.test_host_linux import make_kubelet_tree

USAGE = AgentConfig().advisor.rama.pid_parameters["cpu_usage_ratio"]
WAIT = AgentConfig().advisor.rama.pid_parameters["cpu_sched_wait"]
LOWER, UPPER = 4.0, 48.0


# --- the controller ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.floats(0.01, 100.0), st.sampled_from([8.0, 8.0, 8.0, 12.0])),
        min_size=1,
        max_size=60,
    ),
    kpp=st.floats(0.0, 2.0),
    kdp=st.floats(0.0, 2.0),
)
def test_the_integral_never_winds_up(
    steps: list[tuple[float, float]], kpp: float, kdp: float
) -> None:
    params = PIDParams(
        kpp=kpp, kpn=kpp, kdp=kdp, kdn=kdp, deadband_upper_pct=0.0, deadband_lower_pct=0.0
    )
    state = PIDState()
    for current, knob in steps:
        changed = state.knob is not None and state.knob != knob
        before = state.total
        result, state, terms = pid_adjust(
            state, params, knob, 1.0, current, lower_bound=LOWER, upper_bound=UPPER
        )
        # However long the indicator stays off target, the accumulated adjustment stays
        # within the ramp limits, and restarts when the pool's size moved.
        assert -params.adjustment_lower <= state.total <= params.adjustment_upper
        if changed:
            assert "reset" in terms
            assert state.total == pytest.approx(min(max(terms["adjustment"], -2.0), 10.0), abs=1e-5)
        else:
            assert state.total == pytest.approx(
                min(max(before + terms["adjustment"], -2.0), 10.0), abs=1e-5
            )
        assert LOWER <= result <= UPPER


@settings(max_examples=150, deadline=None)
@given(
    knob=st.floats(LOWER, UPPER),
    target=st.floats(0.05, 1000.0),
    current=st.floats(0.001, 10_000.0),
    total=st.floats(-2.0, 10.0),
)
def test_a_step_is_bounded_and_points_the_right_way(
    knob: float, target: float, current: float, total: float
) -> None:
    state = PIDState(total=total, knob=knob)
    result, _, terms = pid_adjust(
        state, USAGE, knob, target, current, lower_bound=LOWER, upper_bound=UPPER
    )
    assert knob - 2.0 - 1e-9 <= result <= knob + 10.0 + 1e-9
    assert LOWER <= result <= UPPER
    # The requirement is reverse-acting: an indicator above its target never shrinks it.
    if "deadband" not in terms:
        assert (terms["adjustment"] >= 0) == (current > target)
    else:
        assert terms["adjustment"] == 0


def _plant(demand: float, lag: float, noise: float, seed: int, steps: int) -> list[float]:
    """A first-order plant: the pool's usage ratio moves a share `lag` of the way towards
    demand / size each tick, measured with multiplicative noise; the controller's result
    is the next size (the pool size is the knob, so the integral restarts when it moves)."""
    rng = random.Random(seed)
    size, y = 24.0, demand / 24.0
    state = PIDState()
    sizes = []
    for _ in range(steps):
        y += lag * (demand / size - y)
        measured = max(y * (1 + rng.uniform(-noise, noise)), 1e-6)
        size, state, _ = pid_adjust(
            state, USAGE, size, 0.8, measured, lower_bound=LOWER, upper_bound=UPPER
        )
        sizes.append(size)
    return sizes


@settings(max_examples=60, deadline=None)
@given(demand=st.floats(4.0, 36.0), lag=st.floats(0.3, 1.0))
def test_it_converges_on_a_first_order_plant(demand: float, lag: float) -> None:
    sizes = _plant(demand, lag, 0.0, 0, 80)
    ideal = demand / 0.8
    # Settled where the ratio is within the deadband (+1 % / -6 % of its target).
    for s in sizes[-10:]:
        assert ideal / 1.01 - 0.05 <= s <= ideal / 0.94 + 0.05
    assert max(sizes[-10:]) - min(sizes[-10:]) < 0.5


@settings(max_examples=40, deadline=None)
@given(demand=st.floats(4.0, 36.0), seed=st.integers(0, 10_000))
def test_it_stays_stable_under_measurement_noise(demand: float, seed: int) -> None:
    sizes = _plant(demand, 0.7, 0.05, seed, 150)
    ideal = demand / 0.8
    settled = sizes[-60:]
    # ±5 % noise on the measurement moves the size by about as much, never into a swing.
    assert all(ideal * 0.85 - 0.5 <= s <= ideal * 1.15 + 0.5 for s in settled)
    assert all(LOWER <= s <= UPPER for s in sizes)


def test_the_largest_indicator_requirement_wins_and_each_is_explained() -> None:
    result = rama_requirement(
        8.0,
        {"cpu_sched_wait": 920.0, "cpu_usage_ratio": 0.4},
        {"cpu_sched_wait": 460.0, "cpu_usage_ratio": 0.8},
        {"cpu_sched_wait": WAIT, "cpu_usage_ratio": USAGE},
        {},
        lower_bound=LOWER,
        upper_bound=UPPER,
    )
    assert result is not None
    assert result.terms["dominant"] == "cpu_sched_wait"
    wait = result.terms["indicators"]["cpu_sched_wait"]
    assert wait["target"] == 460.0 and wait["current"] == 920.0
    # kp = Kpp × upper bound; P = kp × ln(920 / 460)
    assert wait["kp"] == pytest.approx(0.05 * UPPER)
    assert wait["p"] == pytest.approx(0.05 * UPPER * math.log(2), abs=1e-5)
    assert {"i", "d", "adjustment", "result"} <= set(wait)
    assert result.requirement == pytest.approx(8.0 + 0.05 * UPPER * math.log(2), abs=1e-5)


def test_no_measured_indicator_means_no_rama_result() -> None:
    out = rama_requirement(
        8.0,
        {"cpu_sched_wait": None, "cpu_usage_ratio": 0.0},
        {"cpu_sched_wait": 460.0, "cpu_usage_ratio": 0.8},
        {"cpu_sched_wait": WAIT, "cpu_usage_ratio": USAGE},
        {},
        lower_bound=LOWER,
        upper_bound=UPPER,
    )
    assert out is None


# --- targets ---------------------------------------------------------------------------------


def test_spd_targets_take_the_upper_bound_then_the_lower() -> None:
    spd = {
        "spec": {
            "systemIndicator": [
                {
                    "name": "cpu_sched_wait",
                    "indicators": [
                        {"indicatorLevel": "LowerBound", "value": 100},
                        {"indicatorLevel": "UpperBound", "value": 300},
                    ],
                },
                {
                    "name": "cpu_usage_ratio",
                    "indicators": [{"indicatorLevel": "LowerBound", "value": 0.6}],
                },
            ]
        }
    }
    assert spd_targets(spd) == {"cpu_sched_wait": 300.0, "cpu_usage_ratio": 0.6}


def test_a_pool_takes_the_smallest_wait_target_and_the_average_ratio() -> None:
    targets, terms = region_targets(
        {"cpu_sched_wait": 460.0, "cpu_usage_ratio": 0.8},
        {"ns/a": {"cpu_sched_wait": 200.0, "cpu_usage_ratio": 0.6}, "ns/b": {}},
    )
    assert targets == {"cpu_sched_wait": 200.0, "cpu_usage_ratio": pytest.approx(0.7)}
    assert terms["cpu_sched_wait"]["spd-min of"] == ["ns/a"]


# --- configuration --------------------------------------------------------------------------


def test_bad_provision_settings_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="provision_policy 'pid': accepted: canonical, rama"):
        parse_config({"advisor": {"provision_policy": "pid"}})
    with pytest.raises(ConfigError, match="unknown indicator 'cpi'"):
        parse_config({"advisor": {"rama": {"indicator_targets": {"cpi": 1.4}}}})
    with pytest.raises(ConfigError, match="must be > 0"):
        parse_config({"advisor": {"rama": {"indicator_targets": {"cpu_sched_wait": 0}}}})


def test_a_partial_pid_section_keeps_katalysts_other_parameters() -> None:
    cfg = parse_config({"advisor": {"rama": {"pid_parameters": {"cpu_sched_wait": {"kpp": 0.2}}}}})
    pid = cfg.advisor.rama.pid_parameters
    assert pid["cpu_sched_wait"].kpp == 0.2 and pid["cpu_sched_wait"].kpn == 0.009
    assert pid["cpu_usage_ratio"].kpp == 0.1


# --- the agent ------------------------------------------------------------------------------

TOPO = CPUTopology.synthetic(1, 16, 2, memory_per_numa=64 * GIB)
RAMA: dict[str, Any] = {
    "cpu": {"ramp_up_period_s": 0},
    "advisor": {
        "enable_reclaim": True,
        "provision_policy": "rama",
        "reserved_for_allocate_cpu": 0,
        "min_ramp_down_period_s": 0,
    },
}


class Node:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.clock = VirtualClock(1_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            AgentConfig.model_validate(cfg),
            Enforcer(self.host, None, self.clock),
        )

    def share(self, plan: Any) -> Any:
        return next(p for p in plan.pools if p.name == names.POOL_SHARE)

    def tick(self) -> Any:
        plan = self.agent.reconcile(self.clock.now())
        self.clock.advance(5)
        return plan


def test_rama_grows_the_pool_while_tasks_wait_and_shrinks_it_when_they_do_not() -> None:
    node = Node(RAMA)
    node.cluster.create(names.POD, pod_json("web", cpu="2"), "default")
    first = node.share(node.tick())
    assert first.terms["provision"]["rama_skipped"] == "no pool size to start from yet"
    size = len(first.cpuset)
    node.host.sched_wait_us = [2000.0] * TOPO.num_cpus
    grown = node.share(node.tick())
    assert len(grown.cpuset) > size
    step = grown.terms["provision"]
    assert step["policy"] == "rama" and step["dominant"] == "cpu_sched_wait"
    wait = step["indicators"]["cpu_sched_wait"]
    assert wait["current"] == 2000.0 and wait["target"] == 460.0
    assert {"p", "i", "d", "kp"} <= set(wait)
    node.host.sched_wait_us = [50.0] * TOPO.num_cpus
    sizes = [len(node.share(node.tick()).cpuset) for _ in range(12)]
    assert sizes[-1] < len(grown.cpuset)
    assert all(s >= 4 for s in sizes)  # never below min_share_cpu_requirement


def test_rama_with_a_burst_buffer_falls_back_to_canonical_and_says_why() -> None:
    cfg = {**RAMA, "advisor": {**RAMA["advisor"], "reserved_for_allocate_cpu": 4}}
    node = Node(cfg)
    node.cluster.create(names.POD, pod_json("web", cpu="2"), "default")
    node.tick()
    node.host.sched_wait_us = [2000.0] * TOPO.num_cpus
    step = node.share(node.tick()).terms["provision"]
    assert step["policy"] == "canonical"
    assert "reserved_for_allocate_cpu: 0" in step["rama_skipped"]


def test_the_admin_qos_configuration_selects_rama_and_its_targets() -> None:
    cfg = {**RAMA, "advisor": {**RAMA["advisor"], "provision_policy": "canonical"}}
    cfg["admin_qos_config"] = "default/aqc"
    node = Node(cfg)
    node.cluster.create(
        names.ADMIN_QOS_CONFIGURATION,
        {
            "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
            "kind": names.ADMIN_QOS_CONFIGURATION.kind,
            "metadata": {
                "name": "aqc",
                "namespace": "default",
                "annotations": {names.CPU_PROVISION_POLICY_ANNOTATION: "rama"},
            },
            "spec": {
                "config": {
                    "advisorConfig": {
                        "cpuAdvisorConfig": {
                            "cpuProvisionConfig": {
                                "regionIndicators": [
                                    {
                                        "regionType": "share",
                                        "targets": [{"name": "cpu_sched_wait", "target": 300}],
                                    }
                                ]
                            }
                        }
                    }
                }
            },
        },
        "default",
    )
    node.cluster.create(names.POD, pod_json("web", cpu="2"), "default")
    node.tick()
    node.host.sched_wait_us = [600.0] * TOPO.num_cpus
    plan = node.tick()
    assert plan.config["state"] == "in force" and not plan.config["not_implemented"]
    step = node.share(plan).terms["provision"]
    assert step["policy"] == "rama"
    assert set(step["indicators"]) == {"cpu_sched_wait"}
    assert step["indicators"]["cpu_sched_wait"]["target"] == 300.0


def test_a_bad_policy_annotation_changes_nothing_and_names_itself() -> None:
    cfg = {**RAMA, "advisor": {**RAMA["advisor"], "provision_policy": "canonical"}}
    node = Node({**cfg, "admin_qos_config": "default/aqc"})
    node.cluster.create(
        names.ADMIN_QOS_CONFIGURATION,
        {
            "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
            "kind": names.ADMIN_QOS_CONFIGURATION.kind,
            "metadata": {
                "name": "aqc",
                "namespace": "default",
                "annotations": {names.CPU_PROVISION_POLICY_ANNOTATION: "pid"},
            },
            "spec": {"config": {}},
        },
        "default",
    )
    node.cluster.create(names.POD, pod_json("web", cpu="2"), "default")
    node.tick()
    plan = node.tick()
    assert plan.config["state"] == "invalid"
    assert names.CPU_PROVISION_POLICY_ANNOTATION in plan.config["error"]
    assert "accepted: canonical, rama" in plan.config["error"]
    assert node.share(plan).terms["provision"] == {"policy": "canonical"}


def test_an_spd_lowers_the_pools_wait_target() -> None:
    node = Node(RAMA)
    node.cluster.create(
        names.SERVICE_PROFILE_DESCRIPTOR,
        {
            "apiVersion": names.SERVICE_PROFILE_DESCRIPTOR.api_version,
            "kind": names.SERVICE_PROFILE_DESCRIPTOR.kind,
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "systemIndicator": [
                    {
                        "name": "cpu_sched_wait",
                        "indicators": [{"indicatorLevel": "UpperBound", "value": 200}],
                    }
                ],
            },
        },
        "default",
    )
    pod = pod_json("web", cpu="2", annotations={names.SPD_NAME_ANNOTATION: "web"})
    node.cluster.create(names.POD, pod, "default")
    node.tick()
    node.host.sched_wait_us = [300.0] * TOPO.num_cpus
    step = node.share(node.tick()).terms["provision"]
    assert step["indicators"]["cpu_sched_wait"]["target"] == 200.0
    assert step["cpu_sched_wait"]["spd-min of"] == ["default/web"]


def test_the_cnr_carries_the_step_that_sized_each_pool() -> None:
    import json

    node = Node(RAMA)
    node.cluster.create(names.POD, pod_json("web", cpu="2"), "default")
    node.tick()
    node.host.sched_wait_us = [2000.0] * TOPO.num_cpus
    node.tick()
    cnr = node.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    body = json.loads(cnr["metadata"]["annotations"][names.CPU_POOLS_ANNOTATION])
    step = body["provision"][names.POOL_SHARE]
    assert step["policy"] == "rama" and step["size"] > step["previous"]
    assert step["indicators"]["cpu_sched_wait"]["current"] == 2000.0


# --- sampling ---------------------------------------------------------------------------------


def test_schedstat_lines_give_wait_and_timeslices() -> None:
    text = "version 15\ntimestamp 1\ncpu0 0 0 10 2 5 5 1000 4000 20\ndomain0 3 1 2 3\n"
    got = parse_schedstat(text)
    assert got[0].wait_ns == 4000 and got[0].timeslices == 20


def test_the_linux_host_reports_run_queue_wait_per_cpu(tmp_path: Path) -> None:
    topo = CPUTopology.synthetic(1, 1, 2, 1, memory_per_numa=8 << 30)
    node = make_kubelet_tree(tmp_path, [], topology=topo)
    host = node.host()
    stat = tmp_path / "proc" / "schedstat"
    stat.write_text("version 15\ncpu0 0 0 0 0 0 0 0 1000000 100\ncpu1 0 0 0 0 0 0 0 0 50\n")
    assert host.sample(1.0, []).cpu_sched_wait_us == []  # unknown until a second sample
    stat.write_text("version 15\ncpu0 0 0 0 0 0 0 0 3000000 200\ncpu1 0 0 0 0 0 0 0 0 50\n")
    # cpu0: 2 ms of waiting over 100 timeslices = 20 µs each; cpu1 ran nothing.
    assert host.sample(2.0, []).cpu_sched_wait_us == [20.0, 0.0]


def test_the_simulated_run_queue_waits_longer_the_busier_the_cpu() -> None:
    waits = [run_queue_wait_us(r / 10) for r in range(11)]
    assert waits == sorted(waits) and waits[0] == 0.0
    assert 400 < run_queue_wait_us(0.82) < 520


def test_an_invalid_spd_is_counted_told_on_the_object_and_the_pool_keeps_its_defaults() -> None:
    node = Node(RAMA)
    kind = names.SERVICE_PROFILE_DESCRIPTOR
    node.cluster.create(
        kind,
        {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "systemIndicator": "cpu_sched_wait=200",
            },
        },
        "default",
    )
    pod = pod_json("web", cpu="2", annotations={names.SPD_NAME_ANNOTATION: "web"})
    node.cluster.create(names.POD, pod, "default")
    node.tick()
    node.host.sched_wait_us = [300.0] * TOPO.num_cpus
    step = node.share(node.tick()).terms["provision"]
    default = node.agent.config.advisor.rama.indicator_targets["cpu_sched_wait"]
    assert step["indicators"]["cpu_sched_wait"]["target"] == default
    assert node.agent.node_state.skips.counts == {(kind.kind, "invalid"): 1}
    (event,) = [
        e for e in node.cluster.list(names.EVENT).items if e["involvedObject"]["kind"] == kind.kind
    ]
    assert event["type"] == "Warning" and event["reason"] == names.EVENT_REASON_INVALID_CONFIG
    assert "spec.systemIndicator" in event["message"], event["message"]
    assert "default indicator targets" in event["message"]
