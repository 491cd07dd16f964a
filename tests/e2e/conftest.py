"""The end-to-end suite: pykatalyst on a real, upstream Kubernetes.

Run it with `bash scripts/e2e.sh` (brings up the one-node cluster of scripts/cluster.sh,
runs `pytest -m e2e`, tears down what it started), or against any cluster:

    KUBECONFIG=~/.kube/config pytest -m e2e tests/e2e

Every test here carries the `e2e` marker; the unit run deselects them. Without a
KUBECONFIG the whole suite skips, saying so. Checks that look at the node itself (crictl,
cgroups, /proc of the containers, restarting the kubelet) need the cluster of
scripts/cluster.sh on this machine (PYKATALYST_CLUSTER_DIR and CONTAINER_RUNTIME_ENDPOINT
set by `cluster.sh env`) and skip with that reason elsewhere.

Each pykatalyst component runs as a host process with its own ServiceAccount's kubeconfig
(PYKATALYST_{AGENT,SCHEDULER,CONTROLLER}_KUBECONFIG), so the real authorizer checks the RBAC
in deploy/: a component log line saying "forbidden" fails the test that started it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO.parent / "shared" / "katalyst-examples"
# The authorizer's refusal ('... is forbidden: User "system:serviceaccount:ns:sa" cannot
# list resource ...'), not other 403s such as writes into a namespace being deleted.
RBAC_DENIED = re.compile(r'forbidden: User "[^"]*" cannot ')
WORKLOAD_IMAGE = os.environ.get("PYKATALYST_E2E_IMAGE", "pykatalyst.test/busybox:1")


# The lanes of `scripts/e2e.sh`. The "node" and "api" lanes run side by side, each one test
# at a time; the "alone" tests run afterwards with nothing beside them. An entry is a file
# or a file::test.
# - alone: the test stops or pauses part of the control plane under everyone's tests, takes
#   all of the node's allocatable cpu (others' pods would stay Pending meanwhile), or needs
#   the node's idle cpu while its pods hold much of the rest;
# - api: the test uses the cluster's API, its own controllers (each on a lease of its own,
#   scoped to its objects), schedulers for fake nodes, or small pods it does not pin;
# - node (everything else): an agent, a device plugin or the kubelet's restart on the one
#   real node, or a reading of its idle cpu; two agents on one node would fight.
ALONE_TESTS: Final = frozenset(
    {
        "test_e2e_faults.py",  # stops the API server, etcd, containerd, the kubelet
        "test_e2e_conformance.py",  # pauses kube-scheduler and the controller manager
        # a dedicated pod and a burner, one cpu each, and the node's idle cpu read
        "test_e2e_colocation.py::test_reclaimed_capacity_falls_while_a_shared_pod_burns_and_"
        "recovers",
        # the kubelet restarted with the static policy: one cpu reserved, the other taken
        "test_e2e_kubelet_static.py",
        # a dedicated pod's whole cpu beside pods that need reclaimed capacity, which the
        # other lane's burning pods would take (the README's pods; the Helm release's)
        "test_e2e_readme.py",
        "test_e2e_helm.py",
        # installs Katalyst's CRDs over ours and back: other tests' objects meanwhile meet
        # Katalyst's schemas (a KVPA's container policies pruned, for one)
        "test_e2e_crds.py",
        # a KCC for AdminQoSConfiguration, a kind the cluster's oldest KCC governs alone:
        # beside the api lane's KCCs for it, their configs would be judged by this one
        "test_e2e_controllers.py::test_the_running_agent_takes_a_changed_config_from_its_cnc",
    }
)
API_TESTS: Final = frozenset(
    {
        "test_e2e_explain.py",
        "test_e2e_extender.py",
        "test_e2e_ihpa.py",
        # serves on a port of its own; the file's device-plugin test reads the real node's
        # plugin directory and allocatable, which the node lane's device plugins and
        # overcommit test change: it runs in the node lane, one test at a time
        "test_e2e_node_daemons_once.py::test_metrics_names_the_cluster_it_serves",
        "test_e2e_node_restriction.py",
        "test_e2e_rbac.py",
        "test_e2e_sched_leader.py",
        "test_e2e_scheduler_vs_kube.py",
        "test_e2e_skipped_configs.py",
        "test_e2e_strategies.py",
        "test_e2e_webhook.py",
        # the controllers on fake nodes only
        "test_e2e_controllers.py::test_overcommit_kcc_and_lifecycle_on_a_fake_node",
        "test_e2e_controllers.py::test_dynamic_config_tiers_canary_and_conflict_on_the_api_server",
    }
)
# Tests that leave the node alone and spend most of their time waiting for Prometheus to
# gather usage: a lane of their own beside the other two. The KVPA files are both here
# because their vertical controllers act on every KVPA: never two at once.
WAIT_TESTS: Final = frozenset(
    {
        "test_e2e_kvpa.py",
        "test_e2e_kvpa_pykatalyst.py",
        # The tests that run an RR controller, which acts on every ResourceRecommend in the
        # cluster: two at once would fight over the quick start's status (the malformed
        # RR's, with no Prometheus, writes DataSourceUnavailable). The file's SPD tests run
        # SPD controllers, which write every workload's SPD: the node lane, one at a time.
        "test_e2e_spd_rr.py::test_katalysts_rr_quick_start_gets_a_recommendation_from_the_"
        "real_prometheus",
        "test_e2e_spd_rr.py::test_a_malformed_rr_is_told_naming_the_field",
    }
)


def lane(item: pytest.Item) -> str:
    """The lane `item` runs in (see ALONE_TESTS, API_TESTS and WAIT_TESTS)."""
    file = Path(str(item.fspath)).name
    test = f"{file}::{item.name.split('[')[0]}"
    for name, table in (("alone", ALONE_TESTS), ("api", API_TESTS), ("wait", WAIT_TESTS)):
        if file in table or test in table:
            return name
    return "node"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
            where = lane(item)
            if where == "alone":
                item.add_marker(pytest.mark.e2e_alone)
            elif where == "api":
                item.add_marker(pytest.mark.e2e_api)
            elif where == "wait":
                item.add_marker(pytest.mark.e2e_wait)


def _kubeconfig() -> str:
    path = os.environ.get("KUBECONFIG", "")
    if not path or not Path(path).is_file():
        pytest.skip(
            "no cluster: set KUBECONFIG to a cluster's admin kubeconfig, or run "
            "`bash scripts/e2e.sh`, which brings up a one-node cluster"
        )
    return path


def _tool(name: str) -> str:
    bin_dir = os.environ.get("PYKATALYST_K8S_BIN", "")
    if bin_dir and (Path(bin_dir) / name).is_file():
        return str(Path(bin_dir) / name)
    found = shutil.which(name)
    if not found:
        pytest.skip(f'{name} is not on PATH (`eval "$(bash scripts/cluster.sh env)"`)')
    return found


@dataclass
class Kubectl:
    """kubectl as a user runs it, with the admin kubeconfig."""

    binary: str
    kubeconfig: str

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(self, manifest: str | dict[str, Any], *args: str) -> str:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.run("apply", "-f", "-", *args, input=text).stdout


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return _kubeconfig()


@pytest.fixture(scope="session")
def kubectl(kubeconfig: str) -> Kubectl:
    return Kubectl(_tool("kubectl"), kubeconfig)


@pytest.fixture(scope="session")
def admin(kubeconfig: str) -> Iterator[Any]:
    from pykatalyst.cluster.kube import KubeCluster

    cluster = KubeCluster.from_kubeconfig(kubeconfig, None, qps=0)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def node_name(kubectl: Kubectl) -> str:
    nodes = kubectl.json("get", "nodes")["items"]
    ready = [
        n["metadata"]["name"]
        for n in nodes
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in n.get("status", {}).get("conditions", [])
        )
    ]
    wanted = os.environ.get("NODE_NAME")
    if wanted and wanted in ready:
        return wanted
    if not ready:
        pytest.skip("the cluster has no Ready node with a kubelet")
    return ready[0]


@dataclass
class LocalNode:
    """The node of scripts/cluster.sh, on this machine: crictl and the cgroup tree."""

    name: str
    state_dir: Path
    crictl: str
    endpoint: str

    def crictl_json(self, command: str, *args: str) -> Any:
        out = subprocess.run(
            [self.crictl, "--runtime-endpoint", self.endpoint, command, "-o", "json", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout)

    def kubelet_restart(self, policy: str | None = None) -> None:
        cmd = ["bash", str(REPO / "scripts" / "cluster.sh"), "kubelet-restart"]
        if policy:
            cmd.append(policy)
        subprocess.run(cmd, check=True, timeout=300, capture_output=True)

    def kubelet_healthy(self, timeout: float = 60) -> None:
        """The kubelet answers its health check, or the test fails with its last log lines."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            probe = subprocess.run(
                ["curl", "-sf", "http://127.0.0.1:10248/healthz"], capture_output=True
            )
            if probe.returncode == 0:
                return
            time.sleep(1)
        log = (self.state_dir / "logs" / "kubelet.log").read_text(errors="replace")
        tail = "\n".join(log.splitlines()[-5:])
        raise AssertionError(f"the kubelet is not healthy after {timeout:.0f}s:\n{tail}")


@pytest.fixture(scope="session")
def local_node(node_name: str) -> LocalNode:
    state = os.environ.get("PYKATALYST_CLUSTER_DIR", "")
    endpoint = os.environ.get("CONTAINER_RUNTIME_ENDPOINT", "")
    if not state or not endpoint or not Path(state).is_dir():
        pytest.skip(
            "node-level check: the node is not local (needs the cluster of scripts/cluster.sh "
            "on this machine, with `cluster.sh env` in the environment)"
        )
    if os.geteuid() != 0:
        pytest.skip("node-level check: needs root to read the node's cgroups")
    return LocalNode(node_name, Path(state), _tool("crictl"), endpoint)


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"e2e-{secrets.token_hex(3)}"
    kubectl.run("create", "namespace", name)
    # Pods are refused until the controller manager has made the namespace's ServiceAccount.
    try:
        wait_until(
            f"the default ServiceAccount of {name}",
            lambda: has_default_service_account(kubectl, name),
            60,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{controller_manager_state()}") from None
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def has_default_service_account(kubectl: Kubectl, namespace: str) -> bool:
    done = kubectl.run("get", "serviceaccount", "default", "-n", namespace, check=False)
    return done.returncode == 0


def controller_manager_state() -> str:
    """Whether this machine's kube-controller-manager runs, and its log's end (for a failure)."""
    state = Path(os.environ.get("PYKATALYST_CLUSTER_DIR", "/var/lib/pykatalyst-cluster"))
    pid_file = state / "pids" / "kube-controller-manager.pid"
    try:
        pid = int(pid_file.read_text())
        running = Path(f"/proc/{pid}").exists()
    except (OSError, ValueError):
        running = False
    log = state / "logs" / "kube-controller-manager.log"
    tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
    return f"kube-controller-manager running: {running}\n" + "\n".join(tail)


def component_kubeconfig(component: str) -> str:
    path = os.environ.get(f"PYKATALYST_{component.upper()}_KUBECONFIG", "")
    if not path or not Path(path).is_file():
        pytest.skip(
            f"no kubeconfig for the {component}'s ServiceAccount "
            f"(PYKATALYST_{component.upper()}_KUBECONFIG; `cluster.sh env` sets it)"
        )
    return path


@dataclass
class Component:
    """One `katalyst <command>` process, with its log."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Component:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "katalyst"), *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def components(tmp_path: Path) -> Iterator[Callable[..., Component]]:
    """Start `katalyst` commands; at the end stop them and fail on any RBAC denial."""
    started: list[Component] = []

    def start(name: str, *args: str, env: dict[str, str] | None = None) -> Component:
        comp = Component(name, list(args), tmp_path / f"{name}-{len(started)}.log", env or {})
        started.append(comp.start())
        return comp

    yield start
    for comp in started:
        comp.stop()
    denied = [
        f"{c.name}: {line.strip()}"
        for c in started
        for line in c.log().splitlines()
        if RBAC_DENIED.search(line)
    ]
    assert not denied, "RBAC denied a component's call:\n" + "\n".join(denied[:10])


def wait_until(
    what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.5
) -> Any:
    """Poll `check` until it returns a truthy value; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            last = check()
            error = None
            if last:
                return last
        except (AssertionError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
            error = exc
        time.sleep(interval)
    detail = f" (last error: {error})" if error else f" (last value: {last!r})"
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
