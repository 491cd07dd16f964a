"""The simulator end to end on tiny clusters: determinism, conservation, isolation."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from pykatalyst.api import names
from pykatalyst.sim import runner
from pykatalyst.sim.control import SimControlPlane
from pykatalyst.sim.host import run_queue_wait_us
from pykatalyst.sim.report import POLICY_KEYS, write_report
from pykatalyst.sim.runner import GC_YOUNG_THRESHOLD, PolicySim
from pykatalyst.sim.scenario import Scenario, parse_scenario
from pykatalyst.sim.simulate import simulate
from pykatalyst.sim.workload import build_workload
from tests.sim.conftest import KATALYST, RECLAIM_ON, tiny


def test_same_seed_gives_byte_identical_report(tmp_path: Path) -> None:
    sc = parse_scenario(tiny(duration="40m", policies=[{"name": "vanilla"}, KATALYST]))
    write_report(simulate(sc), tmp_path / "a")
    write_report(simulate(sc), tmp_path / "b")
    a = (tmp_path / "a" / "report.json").read_bytes()
    assert a == (tmp_path / "b" / "report.json").read_bytes()
    write_report(simulate(sc, seed=4), tmp_path / "c")
    assert a != (tmp_path / "c" / "report.json").read_bytes()


def test_policies_see_the_same_workload() -> None:
    sc = parse_scenario(tiny(duration="1h"))
    result = simulate(sc)
    arrived = {r.policy.name: len(result.workload.batch) for r in result.runs}
    assert len(set(arrived.values())) == 1
    demand = [sum(r.series.cpu_util_services) for r in result.runs]
    # services get what they ask for under every policy here, so they use the same cpu
    assert np.allclose(demand, demand[0])


def _check_conservation(sim: PolicySim) -> None:
    view = sim.step_view()
    granted = view["granted"]
    if len(granted) == 0:
        return
    used = np.bincount(view["node"], granted, len(view["node_cpus"]))
    assert np.all(used <= view["node_cpus"] + 1e-9)
    assert np.all(granted <= view["limit"] + 1e-9)
    for p, g in zip(view["pods"], granted, strict=True):
        k = p.knobs
        assert g <= k.cpus.bit_count() + 1e-9
        if k.quota_cores is not None:
            assert g <= k.quota_cores + 1e-9


def test_cpu_given_never_exceeds_cpu_available_nor_cpuset_or_quota() -> None:
    data = tiny(duration="1h")
    data["services"][0]["cpu_limit"] = 12  # a quota to respect
    data["batch"]["arrival"]["rate_per_hour"] = 600
    sc = parse_scenario(data)
    wl = build_workload(sc)
    for policy in sc.policies:
        sim = PolicySim(sc, policy, wl)
        for step in range(sc.steps):
            sim.step(step)
            _check_conservation(sim)


def _isolation(policy: str, batch: bool) -> tuple[float, float]:
    """Mean p99 of a service and the batch cpu share on one node under heavy batch load."""
    data: dict[str, Any] = tiny(duration="1h", seed=11)
    data["nodes"][0]["count"] = 1
    data["services"][0].update(
        {"replicas": 1, "cpu_request": 2, "demand": {"kind": "constant", "level": 1.0}}
    )
    data["batch"].update(
        {
            "arrival": {"rate_per_hour": 3000, "diurnal": "none"},
            "minutes": {"median": 60, "sigma": 0.1},
            "cache_pressure": 0.0,
            "max_pending": 40,
        }
    )
    if not batch:
        del data["batch"]
    # whole physical cores per pool, so no service thread has a batch hyperthread sibling
    agent = {"config": {**RECLAIM_ON, "advisor": {"ht_align": True, "enable_reclaim": True}}}
    data["policies"] = [
        {"name": policy, "agent": agent} if policy == "katalyst" else {"name": policy}
    ]
    sc: Scenario = parse_scenario(data)
    run = simulate(sc).runs[0]
    half = len(run.series.time) // 2  # after the cluster has filled up
    return (
        float(np.mean(run.latency["web"][half:])),
        float(np.mean(run.series.cpu_util_batch[half:])),
    )


def test_service_is_isolated_from_batch_under_katalyst_not_under_vanilla() -> None:
    solo, _ = _isolation("vanilla", batch=False)
    vanilla, vanilla_batch = _isolation("vanilla", batch=True)
    katalyst, katalyst_batch = _isolation("katalyst", batch=True)
    # the same heavy batch load runs in both
    assert vanilla_batch > 0.45 and katalyst_batch > 0.45
    assert katalyst <= solo * 1.02
    assert vanilla >= solo * 1.3


def test_report_has_every_metric_for_every_policy(tmp_path: Path) -> None:
    sc = parse_scenario(tiny(duration="1h"))
    data = write_report(simulate(sc), tmp_path)
    assert set(data["policies"]) == {"vanilla", "static-overcommit", "katalyst"}
    for name, p in data["policies"].items():
        missing = [k for k in POLICY_KEYS if k not in p]
        assert not missing, f"{name} lacks {missing}"
        for k in ("cpu_util_mean", "cpu_util_p95", "mem_util_mean", "slo_violation_fraction"):
            assert 0.0 <= p[k] <= 1.0
        assert 0.0 <= p["batch_work_lost_fraction"] <= 1.0
        assert set(p["latency_p99_ms"]) == {"web"}
    assert data["scenario"] == "tiny" and data["seed"] == 3
    md = (tmp_path / "report.md").read_text()
    for png in ("utilization.png", "sample_node.png", "slo.png", "evictions.png"):
        assert f"]({png})" in md
        assert (tmp_path / png).stat().st_size > 1000
    assert "## Model and assumptions" in md


def test_memory_overcommit_ends_in_oom_kills_of_batch_first() -> None:
    data = tiny(duration="1h")
    data["services"][0]["memory_usage"] = 0.95
    data["batch"].update(
        {"memory_per_core": "6Gi", "memory_usage": 1.0, "arrival": {"rate_per_hour": 600}}
    )
    data["policies"] = [
        {"name": "vanilla"},
        {"name": "static-overcommit", "cpu_overcommit_ratio": 2, "memory_overcommit_ratio": 2},
    ]
    result = simulate(parse_scenario(data))
    vanilla, over = result.run("vanilla"), result.run("static-overcommit")
    assert vanilla.tally.oom_kills == 0
    assert over.tally.oom_kills > 0
    # the kernel takes the batch pods (highest oom_score) before any service container
    assert over.tally.service_restarts == 0
    assert over.tally.lost_work > 0
    kinds = {e[1] for e in over.tally.events}
    assert {"Started", "Completed", "OOMKilled"} <= kinds


KATALYST_EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "katalyst-examples"


@pytest.mark.skipif(
    not (KATALYST_EXAMPLES / "scheduler-policy-binpack.yaml").is_file(),
    reason="Katalyst's example scheduler policies are not checked out next to the project",
)
def test_katalyst_policy_takes_katalysts_own_scheduler_policy_file() -> None:
    policy = KATALYST_EXAMPLES / "scheduler-policy-binpack.yaml"
    data = tiny(
        duration="1h",
        policies=[
            {
                "name": "katalyst",
                "scheduler": {"config": str(policy)},
                "agent": {"config": RECLAIM_ON},
            }
        ],
    )
    data["nodes"][0]["count"] = 3
    run = simulate(parse_scenario(data)).runs[0]
    # the file's profile (schedulerName katalyst-scheduler) places the reclaimed pods
    assert run.tally.completed > 0
    assert run.series.reclaimed_capacity[-1] > 0


def test_dedicated_service_gets_cpus_no_batch_pod_shares_under_katalyst() -> None:
    data = tiny(duration="30m")
    data["services"][0].update(
        {"qos": "dedicated_cores", "cpu_request": 4, "demand": {"kind": "constant", "level": 0.5}}
    )
    data["batch"]["arrival"]["rate_per_hour"] = 2000
    data["policies"] = [KATALYST]
    sc = parse_scenario(data)
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    for step in range(sc.steps):
        sim.step(step)
    pods = sim.step_view()["pods"]
    services = [p for p in pods if p.kind == "service"]
    batch = [p for p in pods if p.kind == "batch"]
    assert len(services) == 2 and batch
    for svc in services:
        assert svc.knobs.cpus.bit_count() == 4
        for b in batch:
            if b.node == svc.node:
                assert svc.knobs.cpus & b.knobs.cpus == 0
                assert b.knobs.idle


def test_load_spike_shrinks_the_reclaim_pool_then_evicts_with_a_tight_threshold(
    tmp_path: Path,
) -> None:
    curve = ["0.1"] * 6 + ["1.0"] * 6 + ["0.1"] * 12  # 5-minute samples: a 30-minute spike
    (tmp_path / "spike.csv").write_text("load\n" + "\n".join(curve) + "\n")
    data = tiny(duration="2h")
    data["nodes"][0]["count"] = 1
    demand = {"kind": "csv", "path": str(tmp_path / "spike.csv"), "column": "load"}
    data["services"][0].update(
        {"replicas": 1, "cpu_request": 10, "noise": 0.0, "demand": {**demand, "mean": 0.325}}
    )
    data["batch"].update(
        {"arrival": {"rate_per_hour": 600, "diurnal": "none"}, "minutes": {"median": 60}}
    )
    hard = {"reclaimed_resource": {"eviction_threshold": {names.RECLAIMED_MILLICPU: 1.0}}}
    data["policies"] = [
        {"name": "katalyst", "agent": {"config": RECLAIM_ON, "eviction_config": hard}}
    ]
    sc = parse_scenario(data)
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    run = sim.run()
    s = run.series
    before, during = s.sample_reclaim_pool[25], s.sample_reclaim_pool[40]
    assert during < before  # throttle first: the reclaim pool gives the cpus back
    assert run.tally.evictions > 0 and run.tally.lost_work > 0
    assert sum(s.slo_violations) == 0
    evicted = {pod for _, kind, pod, _ in run.tally.events if kind == "Evicted"}
    started = {pod for _, kind, pod, _ in run.tally.events if kind == "Started"}
    waiting = {f"batch/task-{t}-{a}" for t, a in sim.batch.queue} | set(sim.kubelet.pods)
    # an evicted task comes back as its next attempt (task-<n>-<attempt>)
    for pod in evicted:
        stem, attempt = pod.rsplit("-", 1)
        assert f"{stem}-{int(attempt) + 1}" in started | waiting


def test_latency_constants_can_be_overridden_and_are_reported(tmp_path: Path) -> None:
    base = tiny(duration="30m", policies=[{"name": "vanilla"}])
    base["batch"]["arrival"]["rate_per_hour"] = 2000
    default = simulate(parse_scenario(base))
    calm = simulate(parse_scenario({**base, "model": {"alpha_ht": 0.0, "alpha_llc": 0.0}}))
    assert np.mean(calm.runs[0].latency["web"]) < np.mean(default.runs[0].latency["web"])
    data = write_report(calm, tmp_path)
    assert data["model"]["constants"]["alpha_ht"] == 0.0
    assert "`alpha_ht` = 0 (set by the scenario)" in (tmp_path / "report.md").read_text()


def _katalyst_steps(duration: str) -> Iterator[PolicySim]:
    """The tiny cluster under `katalyst`, stepped: the simulation after each step."""
    sc = parse_scenario({**tiny(duration=duration), "policies": [KATALYST]})
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    for step in range(sc.steps):
        sim.step(step)
        yield sim


def test_physics_arrays_follow_each_pods_knobs_as_the_agent_rewrites_them() -> None:
    # Each pod's row is kept until its knobs change: after every step, the cpus, quota,
    # weight, SCHED_IDLE and memory limit the physics used are the kernel's for that pod.
    checked = 0
    for sim in _katalyst_steps("1h"):
        rows = sim.machines.rows
        for i, pod in enumerate(rows.running):
            host = sim.nodes[pod.node].host
            if not host.has_pod(pod.uid):  # finished or killed after the physics ran
                continue
            k = host.effective(pod.uid)
            quota = np.inf if k.quota_cores is None else k.quota_cores
            assert rows.node[i] == pod.node
            assert rows.limit[i] == min(float(k.cpus.bit_count()), quota)
            assert rows.weight[i] == k.shares and bool(rows.idle[i]) == k.idle
            mem = np.inf if k.memory_limit is None else k.memory_limit
            assert rows.mem_limit[i] == mem and rows.mem_used[i] == pod.memory_used
            checked += 1
    assert checked > 0 and sim.tally.agent_reconciles > 0


def test_each_host_reports_its_own_nodes_busy_cpus_and_run_queue_waits() -> None:
    # What a node's agent samples is its own machine's row of the last step: the busy
    # share of each of its cpus and that cpu's run-queue wait, whichever node asks first.
    busy_seen = 0
    for sim in _katalyst_steps("30m"):
        per_cpu = sim.machines.per_cpu_all
        for n in reversed(range(len(sim.nodes))):
            u = sim.nodes[n].host.node_usage()
            valid = sim.machines.static.valid[n]
            own = [min(max(float(b), 0.0), 1.0) for b in per_cpu[n][valid]]
            assert list(u.cpu_ratio) == own
            assert list(u.sched_wait_us) == [run_queue_wait_us(b) for b in own]
            busy_seen += sum(b > 0 for b in own)
    assert busy_seen > 0 and len(sim.nodes) > 1


def test_a_run_leaves_the_garbage_collectors_settings_as_it_found_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    sc = parse_scenario(tiny(duration="10m"))
    seen: list[tuple[int, ...]] = []
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    sim.run(lambda done, total: seen.append(gc.get_threshold()))
    assert seen and seen[0][0] >= GC_YOUNG_THRESHOLD  # collections were fewer meanwhile
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
    # ... and fewer still on a larger cluster: the threshold grows with its nodes.
    monkeypatch.setattr(runner, "GC_YOUNG_PER_NODE", GC_YOUNG_THRESHOLD)
    seen.clear()
    PolicySim(sc, sc.policies[0], build_workload(sc)).run(
        lambda done, total: seen.append(gc.get_threshold())
    )
    assert len(sim.nodes) > 1 and seen[0][0] == GC_YOUNG_THRESHOLD * len(sim.nodes)
    assert gc.get_threshold() == before


def test_the_steps_of_a_run_leave_no_reference_cycles() -> None:
    # A run collects cycles rarely (`few_collections`): what its steps allocate must be
    # freed as it is dropped, or a day of a large cluster would hold it until a collection.
    sc = parse_scenario(tiny(duration="3h", policies=[KATALYST]))
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    gc.collect()
    gc.disable()
    try:
        sim.run(lambda done, total: None)
        gc.set_debug(gc.DEBUG_SAVEALL)
        found = gc.collect()
        kinds = sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert sim.tally.agent_reconciles > 0
    assert found == 0, f"{found} objects in reference cycles: {kinds[:10]}"


def test_each_agent_reconciles_on_its_staggered_period_and_after_a_pod_starts_there() -> None:
    # Agents are timed by their ComponentHost: node i every period from step -i mod P on,
    # and once more in the step a pod starts on it (the next one if the agents ran already).
    data = tiny(duration="1h")
    data["nodes"][0]["count"] = 3
    katalyst = {**KATALYST, "agent": {**KATALYST["agent"], "period": "180s"}}
    sc = parse_scenario({**data, "policies": [katalyst]})
    sim = PolicySim(sc, sc.policies[0], build_workload(sc))
    control = cast(SimControlPlane, sim.control)
    assert control.period_steps == 3
    runs: dict[int, list[int]] = {i: [] for i in range(len(control.agents))}
    for i, agent in enumerate(control.agents):
        reconcile = agent.reconcile

        def counted(now: float, i: int = i, reconcile: Any = reconcile) -> Any:
            runs[i].append(round(now / sc.step))
            return reconcile(now)

        agent.reconcile = counted
    run = sim.run()
    starts = [
        (round(t / sc.step), node) for t, kind, _, node in run.tally.events if kind == "Started"
    ]
    assert starts
    for i, node in enumerate(sim.nodes):
        steps = set(runs[i])
        assert len(steps) == len(runs[i])  # at most once a step
        grid = {s for s in range(sc.steps) if (s + i) % 3 == 0}
        assert grid <= steps
        started = {s for s, n in starts if n == node.name}
        for s in started:
            assert s in steps or s + 1 in steps
        assert steps - grid <= started | {s + 1 for s in started}
    assert sim.tally.agent_reconciles == sum(len(r) for r in runs.values())


def test_policies_side_by_side_in_processes_give_the_same_report(tmp_path: Path) -> None:
    sc = parse_scenario(
        tiny(
            duration="40m",
            policies=[
                {"name": "vanilla"},
                {"name": "static-overcommit", "cpu_overcommit_ratio": 1.5},
                KATALYST,
            ],
        )
    )
    seen: dict[str, list[int]] = {}

    def progress(policy: str, done: int, total: int) -> None:
        seen.setdefault(policy, []).append(done)
        assert total == sc.steps

    write_report(simulate(sc), tmp_path / "alone")
    side = simulate(sc, progress, workers=2)
    write_report(side, tmp_path / "side")
    assert [r.policy.name for r in side.runs] == ["vanilla", "static-overcommit", "katalyst"]
    for name in ("report.json", "report.md", "events.csv"):
        assert (tmp_path / "alone" / name).read_bytes() == (tmp_path / "side" / name).read_bytes()
    # every policy's progress reached the caller from its process, in order, to the end
    assert {p: steps == sorted(steps) and steps[-1] for p, steps in seen.items()} == {
        p: sc.steps for p in ("vanilla", "static-overcommit", "katalyst")
    }


def test_workers_below_one_are_refused_before_running() -> None:
    sc = parse_scenario(tiny(duration="40m"))
    with pytest.raises(ValueError, match="workers: 0 is not accepted"):
        simulate(sc, workers=0)


def test_a_run_that_fails_in_its_process_names_its_policy_and_error(tmp_path: Path) -> None:
    from pykatalyst.scheduler.config import SchedulerConfigError
    from pykatalyst.sim.scenario import SchedulerSettings
    from pykatalyst.sim.simulate import PolicyRunError

    sc = parse_scenario(tiny(duration="20m", policies=[{"name": "vanilla"}, KATALYST]))
    # a configuration file removed after the scenario was read
    gone = SchedulerSettings(config=tmp_path / "gone.yaml")
    sc = sc.model_copy(
        update={"policies": [sc.policies[0].model_copy(update={"scheduler": gone}), sc.policies[1]]}
    )
    with pytest.raises(SchedulerConfigError, match=r"gone\.yaml"):
        simulate(sc)
    with pytest.raises(PolicyRunError, match=r"policy vanilla: SchedulerConfigError: .*gone\.yaml"):
        simulate(sc, lambda *_: None, workers=2)
