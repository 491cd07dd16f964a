"""`katalyst controller`: the backstop on a clock with leader election. Two replicas never
both act; a replica that dies hands over; one that loses its lease stops; and the command
works against a cluster reached through a kubeconfig."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pykatalyst.agent.config import ReporterConfig
from pykatalyst.agent.reporter import Reporter, ReportInput
from pykatalyst.api import names
from pykatalyst.apiserver.http import kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.controller import parse_duration
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON, ApiError
from pykatalyst.controllers import BackstopConfig
from pykatalyst.runtime.apiserver import ApiServer
from pykatalyst.runtime.controller import ControllerRunner
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector, LeaseRecord
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

TOPO = CPUTopology.synthetic(sockets=1, cores_per_socket=4, threads_per_core=1)
LEASE_CFG = LeaderConfig(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
BACKSTOP = BackstopConfig(taint_after_s=600, evict_after_s=1200)


def reclaimed_pod(name: str, node: str) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
    }


class World:
    """node-1's agent reports once and then goes silent; node-2's keeps reporting."""

    def __init__(self) -> None:
        self.clock = VirtualClock(100_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.reporters = {}
        for n in ("node-1", "node-2"):
            self.cluster.create(names.NODE, {"metadata": {"name": n}})
            self.reporters[n] = Reporter(n, self.cluster, ReporterConfig())
        self.heartbeat(("node-1", "node-2"))
        for i in range(3):
            self.cluster.create(names.POD, reclaimed_pod(f"batch-{i}", "node-1"))

    def heartbeat(self, nodes: tuple[str, ...] = ("node-2",)) -> None:
        for n in nodes:
            self.reporters[n].report(
                ReportInput(TOPO, CPUSet(), 4.0, 8.0 * 2**30), self.clock.now()
            )

    def replica(self, identity: str) -> ControllerRunner:
        elector = LeaderElector(self.cluster, identity, config=LEASE_CFG)
        return ControllerRunner(self.cluster, BACKSTOP, period_s=30, elector=elector)

    def run(self, replicas: list[ControllerRunner], seconds: float) -> None:
        end = self.clock.now() + seconds
        while self.clock.now() < end:
            self.heartbeat()
            for r in replicas:
                r.step(self.clock.now())
            self.clock.advance(2)

    def backstop_taints(self, node: str) -> list[JSON]:
        cnr = self.cluster.get(names.CUSTOM_NODE_RESOURCE, node)
        return [
            t
            for t in cnr.get("spec", {}).get("taints", [])
            if t.get("key") == names.UNSCHEDULABLE_TAINT_KEY
        ]

    def evicted(self) -> set[str]:
        return {
            p["metadata"]["name"]
            for p in self.cluster.list(names.POD).items
            if p["metadata"].get("deletionTimestamp")
        }

    def events(self, reason: str) -> list[JSON]:
        return [e for e in self.cluster.list(names.EVENT).items if e.get("reason") == reason]


def kinds(runner: ControllerRunner) -> list[str]:
    return [r.kind for r in runner.backstop.records] if runner.backstop is not None else []


def test_of_two_replicas_only_the_leader_acts_and_each_action_happens_once() -> None:
    w = World()
    r1, r2 = w.replica("r1"), w.replica("r2")
    w.run([r1, r2], 25 * 60)
    assert w.backstop_taints("node-1") and not w.backstop_taints("node-2")
    assert len(w.backstop_taints("node-1")) == 1
    assert w.evicted() == {"batch-0", "batch-1", "batch-2"}
    assert kinds(r1).count("backstop-taint") == 1
    assert kinds(r1).count("backstop-eviction") == 3
    assert r2.backstop is None  # the follower never built, let alone ran, a backstop
    assert len(w.events(names.EVENT_REASON_EVICT_CREATED)) == 3
    lease = w.cluster.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == "r1"


def test_when_the_leader_dies_the_other_replica_takes_over_the_work() -> None:
    w = World()
    r1, r2 = w.replica("r1"), w.replica("r2")
    w.run([r1, r2], 60)  # r1 leads, nothing is due yet
    assert kinds(r1) == [] and r2.backstop is None
    w.run([r2], 25 * 60)  # r1 is gone
    assert kinds(r1) == []
    assert "backstop-taint" in kinds(r2)
    assert w.evicted() == {"batch-0", "batch-1", "batch-2"}
    lease = w.cluster.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == "r2"
    assert lease["spec"]["leaseTransitions"] == 1


def test_a_replica_that_loses_its_lease_says_so_and_stops_acting() -> None:
    w = World()
    r1 = w.replica("r1")
    assert r1.step(w.clock.now()).plan is not None
    # Somebody else now holds the lease (e.g. r1 was paused past its deadline).
    lease = w.cluster.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    lease["spec"] = {
        **lease["spec"],
        **LeaseRecord("intruder", 15, 0, w.clock.now(), 1).spec_json(),
    }
    w.cluster.update(names.LEASE, lease)
    w.clock.advance(40)  # a lease round and a reconcile are both due
    report = r1.step(w.clock.now())
    assert report.lost_leadership
    assert report.plan is None


def test_metrics_tell_which_replica_leads() -> None:
    w = World()
    r1, r2 = w.replica("r1"), w.replica("r2")
    w.run([r1, r2], 25 * 60)
    assert r1.registry.get_sample_value("katalyst_controller_leader") == 1
    assert r2.registry.get_sample_value("katalyst_controller_leader") == 0
    evictions = r1.registry.get_sample_value(
        "katalyst_backstop_actions_total", {"action": "eviction", "reason": "AgentSilent"}
    )
    assert evictions == 3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600), ("30s", 30), ("1h30m", 5400), ("1.5h", 5400), ("90", 90), ("250ms", 0.25)],
)
def test_durations_read_like_kubernetes_flags(text: str, seconds: float) -> None:
    assert parse_duration(text, "--period") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10x", "", "m10", "-5s", "10m 5s", "nan"])
def test_bad_durations_are_refused_with_the_option_named(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="not a duration"):
        parse_duration(text, "--period")


def test_evicting_before_tainting_is_refused() -> None:
    result = CliRunner().invoke(
        app, ["controller", "--once", "--taint-after", "10m", "--evict-after", "5m"]
    )
    assert result.exit_code == 2
    assert "--evict-after" in result.output
    assert "shorter than --taint-after" in result.output


def test_once_against_the_embedded_cluster_runs_one_reconcile() -> None:
    result = CliRunner().invoke(app, ["controller", "--embedded", "--once"])
    assert result.exit_code == 0, result.output
    assert "backstop: 0 nodes" in result.output


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MemoryCluster, ApiServer, Path]]:
    # The store's clock is far behind the command's real clock: node-1's agent last
    # reported "years ago", so the backstop is due on it right away.
    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    store.create(names.NODE, {"metadata": {"name": "node-1"}})
    Reporter("node-1", store, ReporterConfig()).report(
        ReportInput(TOPO, CPUSet(), 4.0, 8.0 * 2**30), store.clock.now()
    )
    store.create(names.POD, reclaimed_pod("batch-0", "node-1"))
    server = ApiServer(store, bookmark_seconds=0)
    server.__enter__()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
    yield store, server, kubeconfig
    server.__exit__(None, None, None)


def test_once_through_a_kubeconfig_takes_the_lease_and_acts(
    served: tuple[MemoryCluster, ApiServer, Path], tmp_path: Path
) -> None:
    store, _, kubeconfig = served
    records = tmp_path / "records.jsonl"
    args = ["controller", "--kubeconfig", str(kubeconfig), "--once", "--records", str(records)]
    result = CliRunner().invoke(app, [*args, "--identity", "replica-a"])
    assert result.exit_code == 0, result.output
    assert "1 taint" in result.output and "1 evict" in result.output
    cnr = store.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    assert any(t["key"] == names.UNSCHEDULABLE_TAINT_KEY for t in cnr["spec"]["taints"])
    pod = store.get(names.POD, "batch-0", "default")
    assert pod["metadata"].get("deletionTimestamp")
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    assert {r["kind"] for r in lines} == {"backstop-taint", "backstop-eviction"}
    # A clean exit hands the lease back, so a running replica need not wait for it.
    lease = store.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseTransitions"] == 0


def test_once_while_another_replica_leads_does_nothing(
    served: tuple[MemoryCluster, ApiServer, Path],
) -> None:
    store, _, kubeconfig = served
    holder = LeaseRecord("replica-a", 15, time.time(), time.time(), 0)
    store.create(
        names.LEASE,
        {
            "metadata": {
                "name": names.CONTROLLER_LEASE_NAME,
                "namespace": names.SYSTEM_NAMESPACE,
            },
            "spec": holder.spec_json(),
        },
        names.SYSTEM_NAMESPACE,
    )
    result = CliRunner().invoke(
        app, ["controller", "--kubeconfig", str(kubeconfig), "--once", "--identity", "replica-b"]
    )
    assert result.exit_code == 3, result.output
    assert "not the leader" in result.output and "replica-a" in result.output
    cnr = store.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    assert not cnr.get("spec", {}).get("taints")


def test_dry_run_changes_nothing_not_even_the_lease(
    served: tuple[MemoryCluster, ApiServer, Path],
) -> None:
    store, _, kubeconfig = served
    result = CliRunner().invoke(
        app, ["controller", "--kubeconfig", str(kubeconfig), "--once", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "(dry run)" in result.output
    assert not store.get(names.CUSTOM_NODE_RESOURCE, "node-1").get("spec", {}).get("taints")
    assert not store.list(names.LEASE).items
    assert not store.get(names.POD, "batch-0", "default")["metadata"].get("deletionTimestamp")


def test_the_deploy_doc_describes_every_controller_option() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs/deploy.md").read_text()
    group: Any = typer.main.get_command(app)
    for param in group.commands["controller"].params:
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("--") and opt != "--help":
                assert opt in doc, f"docs/deploy.md does not mention {opt}"


def _holder(store: MemoryCluster) -> str:
    try:
        lease = store.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    except ApiError:
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


def _wait_for(cond: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leader_metric(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("katalyst_controller_leader "):
            return float(line.split()[1])
    return None


def test_two_running_replicas_hand_over_when_the_leader_is_stopped(
    served: tuple[MemoryCluster, ApiServer, Path],
) -> None:
    store, _, kubeconfig = served
    # The installed entry point, run by this interpreter (whatever its venv).
    katalyst = [sys.executable, "-c", "from pykatalyst.cli.main import app; app()"]
    fast = ["--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "0.2s"]

    ports = {name: _free_port() for name in ("replica-a", "replica-b")}

    def start(identity: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                *katalyst,
                "controller",
                "--kubeconfig",
                str(kubeconfig),
                "--interval",
                "1s",
                # The backstop alone: each controller's first reconcile opens its watches,
                # and this test's lease (2s renew deadline) is shorter than all of them.
                "--controllers",
                "backstop",
                "--identity",
                identity,
                "--listen",
                f"127.0.0.1:{ports[identity]}",
                *fast,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    procs = {name: start(name) for name in ("replica-a", "replica-b")}
    try:
        assert _wait_for(lambda: _holder(store) in procs, 60), "nobody took the lease"
        leader = _holder(store)
        (other,) = set(procs) - {leader}
        # The leader acts: node-1's agent is long silent, so its CNR gets tainted.
        assert _wait_for(
            lambda: bool(
                store.get(names.CUSTOM_NODE_RESOURCE, "node-1").get("spec", {}).get("taints")
            ),
            30,
        )
        # Each replica's metrics say which one acts.
        assert _wait_for(lambda: _leader_metric(ports[leader]) == 1.0, 30)
        assert _wait_for(lambda: _leader_metric(ports[other]) == 0.0, 30)
        procs[leader].send_signal(signal.SIGTERM)
        out, _ = procs[leader].communicate(timeout=30)
        assert procs[leader].returncode == 0, out
        assert "leader election: leading" in out and "lease released" in out
        # Handed back, not expired: the other replica takes over.
        assert _wait_for(lambda: _holder(store) == other, 30), _holder(store)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.communicate(timeout=30)
    lease = store.get(names.LEASE, names.CONTROLLER_LEASE_NAME, names.SYSTEM_NAMESPACE)
    assert lease["spec"]["leaseTransitions"] >= 1


def test_json_output_is_only_json_on_stdout(
    served: tuple[MemoryCluster, ApiServer, Path],
) -> None:
    _, _, kubeconfig = served
    result = CliRunner().invoke(
        app, ["controller", "--kubeconfig", str(kubeconfig), "--once", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["leader"]["leading"] is True
    assert [a["action"] for a in report["plan"]["actions"]] == ["taint", "evict"]
    assert report["result"]["done"] == ["taint node-1", "evict default/batch-0"]


class _ForbiddenCNRs(MemoryCluster):
    def list(self, kind: Any, *args: Any, **kw: Any) -> Any:
        if kind == names.CUSTOM_NODE_RESOURCE:
            raise ApiError("customnoderesources is forbidden", "Forbidden", 403)
        return super().list(kind, *args, **kw)


def test_a_failing_reconcile_is_reported_and_costs_no_leadership() -> None:
    clock = VirtualClock(0.0)
    cluster = _ForbiddenCNRs(clock=clock)
    elector = LeaderElector(cluster, "r1", config=LEASE_CFG)
    runner = ControllerRunner(cluster, BACKSTOP, period_s=30, elector=elector)
    errors = []
    for _ in range(60):  # two minutes, far past the renew deadline
        report = runner.step(clock.now())
        assert not report.lost_leadership
        if report.error is not None:
            errors.append(clock.now())
            assert "Forbidden" in report.error
        clock.advance(2)
    assert errors == [0.0, 30.0, 60.0, 90.0]  # once per period, not on every lease round
    assert elector.leading(clock.now() - 2)


def test_bad_lease_timings_are_refused_naming_the_flags() -> None:
    result = CliRunner().invoke(
        app,
        ["controller", "--once", "--lease-duration", "5s", "--renew-deadline", "10s"],
    )
    assert result.exit_code == 2
    assert "--lease-duration" in result.output and "--renew-deadline" in result.output
