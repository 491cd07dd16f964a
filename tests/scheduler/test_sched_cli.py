"""`katalyst scheduler` on the command line: --print-config, refusal of bad files, a short run."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from pykatalyst.cli.main import app

runner = CliRunner()

GOOD = """\
apiVersion: kubescheduler.config.k8s.io/v1beta3
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: katalyst-scheduler
    plugins:
      score:
        enabled: [{name: QoSAwareNodeResourcesFit, weight: 15}]
"""


def test_print_config_prints_resolved_profiles(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(GOOD)
    result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    (prof,) = printed["profiles"]
    assert prof["schedulerName"] == "katalyst-scheduler"
    assert {"name": "QoSAwareNodeResourcesFit", "weight": 15} in prof["plugins"]["score"]
    assert any(c["name"] == "QoSAwareNodeResourcesFit" for c in prof["pluginConfig"])


def test_invalid_file_exits_non_zero_naming_the_plugin(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(GOOD.replace("QoSAwareNodeResourcesFit", "QoSAwareNodeResourcesFitt"))
    result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
    assert result.exit_code == 1
    assert "unknown plugin 'QoSAwareNodeResourcesFitt'" in result.stderr


def test_missing_file_is_reported(tmp_path: Path) -> None:
    result = runner.invoke(app, ["scheduler", "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_a_short_run_against_the_embedded_cluster() -> None:
    result = runner.invoke(
        app, ["scheduler", "--embedded", "--stop-after", "200ms", "--interval", "50ms"]
    )
    assert result.exit_code == 0, result.output
    assert "embedded in-memory cluster" in result.stderr
    assert "scheduling pods of default-scheduler" in result.stdout


def test_bundled_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "scheduler"
    for f in sorted(example.glob("*.yaml")):
        result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
        assert result.exit_code == 0, (f, result.output)


def test_extender_mode_serves_until_stopped() -> None:
    result = runner.invoke(
        app,
        [
            "scheduler",
            "--embedded",
            "--extender",
            "--listen",
            "127.0.0.1:0",
            "--stop-after",
            "200ms",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "extender listening on http://127.0.0.1:0" in result.stdout


def test_bad_listen_address() -> None:
    result = runner.invoke(app, ["scheduler", "--embedded", "--extender", "--listen", "nowhere"])
    assert result.exit_code == 2
    assert "expected HOST:PORT" in result.stderr


def test_the_standalone_scheduler_serves_health_and_stops_on_sigterm() -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [sys.executable, "-c", "from pykatalyst.cli.main import app; app()", "scheduler"]
    proc = subprocess.Popen(
        [*cmd, "--embedded", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        status, deadline = None, time.monotonic() + 60
        while status != 200 and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    status = r.status
            except OSError:
                time.sleep(0.2)
        assert status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert "katalyst_scheduler_ticks_total" in r.read().decode()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "(healthz, readyz, metrics)" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_extender_listens_on_loopback_unless_told_otherwise() -> None:
    # It has no authentication; deploy/extender asks for 0.0.0.0 behind its Service.
    result = runner.invoke(app, ["scheduler", "--help"])
    assert "127.0.0.1:8888" in result.output


def test_leader_election_on_the_embedded_cluster_takes_the_scheduler_lease() -> None:
    result = runner.invoke(
        app,
        ["scheduler", "--embedded", "--leader-elect", "--identity", "r1", "--stop-after", "200ms"],
    )
    assert result.exit_code == 0, result.output
    assert "leader election: lease katalyst-system/katalyst-scheduler as r1" in result.stdout


def test_leader_election_refuses_the_extender_and_bad_timings() -> None:
    both = runner.invoke(app, ["scheduler", "--extender", "--leader-elect"])
    assert both.exit_code == 2
    assert "--leader-elect" in both.stderr and "extender" in both.stderr
    bad = runner.invoke(
        app, ["scheduler", "--leader-elect", "--lease-duration", "5s", "--renew-deadline", "10s"]
    )
    assert bad.exit_code == 2
    assert "--lease-duration" in bad.output and "--renew-deadline" in bad.output


def test_a_real_cluster_s_pods_are_bound_with_binds_in_flight(tmp_path: Path) -> None:
    """`katalyst scheduler` against an API server over HTTP, the kubeconfig named by the
    configuration's clientConnection (as kube-scheduler reads it): every pod is bound and
    reported once, binds in flight or not."""
    from pykatalyst.api import names
    from pykatalyst.apiserver.http import kubeconfig_for
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.runtime.apiserver import ApiServer
    from tests.scheduler.sched_helpers import node, pod

    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    store.create(names.NODE, node("n0", cpu="64", memory="64Gi"))
    for i in range(12):
        store.create(names.POD, pod(f"p{i}", {"cpu": "1"}), "default")
    with ApiServer(store, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        config = tmp_path / "sched.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {kubeconfig}, qps: 200, burst: 50}}\n"
        )
        for workers in ("0", "4"):
            if workers == "4":
                for i in range(12, 24):
                    store.create(names.POD, pod(f"p{i}", {"cpu": "1"}), "default")
            args = ["scheduler", "--config", str(config), "--bind-workers", workers]
            result = runner.invoke(app, [*args, "--stop-after", "3s", "--interval", "50ms"])
            assert result.exit_code == 0, result.output
            bound = [line for line in result.stdout.splitlines() if line.startswith("bound ")]
            first = 0 if workers == "0" else 12
            assert sorted(bound) == sorted(
                f"bound default/p{i} -> n0" for i in range(first, first + 12)
            )
    placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in store.list(names.POD).items}
    assert placed == {f"p{i}": "n0" for i in range(24)}


def test_bind_workers_must_not_be_negative() -> None:
    result = runner.invoke(
        app, ["scheduler", "--embedded", "--bind-workers", "-1", "--stop-after", "100ms"]
    )
    assert result.exit_code == 2
    assert "--bind-workers" in result.output


def _config(tmp_path: Path, leader_election: str) -> Path:
    f = tmp_path / "sched.yaml"
    f.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"leaderElection: {leader_election}\n"
    )
    return f


def test_the_configuration_s_leader_election_is_honoured(tmp_path: Path) -> None:
    run = ["scheduler", "--embedded", "--once", "--identity", "r1", "--config"]
    named = _config(
        tmp_path,
        "{leaderElect: true, resourceName: mine, resourceNamespace: katalyst-system, "
        "leaseDuration: 20s}",
    )
    result = runner.invoke(app, [*run, str(named)])
    assert result.exit_code == 0, result.output
    assert "leader election: lease katalyst-system/mine as r1" in result.stdout
    # a flag given on the command line wins over the file, field by field
    flagged = runner.invoke(app, [*run, str(named), "--lease-name", "theirs"])
    assert "leader election: lease katalyst-system/theirs as r1" in flagged.stdout
    off = runner.invoke(app, [*run, str(_config(tmp_path, "{leaderElect: false}"))])
    assert off.exit_code == 0, off.output
    assert "leader election" not in off.output
    forced = runner.invoke(
        app, [*run, str(_config(tmp_path, "{leaderElect: false}")), "--leader-elect"]
    )
    assert "leader election: lease katalyst-system/katalyst-scheduler as r1" in forced.stdout


def test_leader_election_fields_it_cannot_honour_are_refused(tmp_path: Path) -> None:
    bad = _config(tmp_path, "{resourceLock: endpointsleases}")
    result = runner.invoke(app, ["scheduler", "--embedded", "--once", "--config", str(bad)])
    assert result.exit_code == 1
    assert "leaderElection.resourceLock" in result.output and "leases" in result.output
    timings = _config(tmp_path, "{leaseDuration: 5s, renewDeadline: 10s}")
    result = runner.invoke(app, ["scheduler", "--embedded", "--once", "--config", str(timings)])
    assert result.exit_code == 2
    assert "--lease-duration" in result.output


def test_once_schedules_what_is_pending_and_exits(tmp_path: Path) -> None:
    from pykatalyst.api import names
    from pykatalyst.apiserver.http import kubeconfig_for
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cluster.clock import VirtualClock
    from pykatalyst.runtime.apiserver import ApiServer
    from tests.scheduler.sched_helpers import node, pod

    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    store.create(names.NODE, node("n0", cpu="8", memory="8Gi"))
    for i in range(3):
        store.create(names.POD, pod(f"p{i}", {"cpu": "1"}), "default")
    with ApiServer(store, bookmark_seconds=0) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url)))
        result = runner.invoke(app, ["scheduler", "--kubeconfig", str(kubeconfig), "--once"])
    assert result.exit_code == 0, result.output
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("bound ")) == [
        f"bound default/p{i} -> n0" for i in range(3)
    ]
    assert runner.invoke(app, ["scheduler", "--embedded", "--extender", "--once"]).exit_code == 2


def test_fields_without_effect_are_told_at_start_and_in_print_config(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(GOOD + "parallelism: 32\nenableProfiling: true\n")
    result = runner.invoke(app, ["scheduler", "--config", str(f), "--print-config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    assert set(printed["notImplemented"]) == {"parallelism", "enableProfiling"}
    args = ["scheduler", "--config", str(f), "--embedded", "--no-leader-elect"]
    result = runner.invoke(app, [*args, "--stop-after", "100ms", "--interval", "50ms"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert [n.split()[1] for n in notes] == ["parallelism", "enableProfiling"]
    assert all("is accepted and has no effect" in n for n in notes)
