"""The Helm chart against the real API server: everything `helm install` would create is
accepted by it (`kubectl apply --dry-run=server`: admission, schema validation and RBAC
escalation checks run, nothing is stored), with the CRDs, every component, both scheduler
modes and the webhook.

pykatalyst installed with Helm on the real node, as an operator installs it: the image
built by scripts/image.sh (reused from its cache when the sources did not change) and
imported into the node's containerd, then `helm install` of deploy/charts/pykatalyst into a
namespace of its own. The agent runs as the DaemonSet's pod and manages the node's cgroups,
so run this file under the node lock, with no agent of another test running:

    flock /work/node.lock .venv/bin/pytest -m e2e tests/e2e/test_e2e_helm.py

The cluster of scripts/cluster.sh has no kube-proxy and its API server listens on
127.0.0.1 only, so the release runs on the node's network (`hostNetwork`, `apiServer`),
on ports nothing else uses. It shares the cluster with other tests: its cluster-scoped
objects carry a suffix, its scheduler serves a profile of its own, its controller only
decides (`controller.dryRun`), and its webhook sees only the test's namespace.

The tests run in order on one release: the pods ready through their probes; the agent's
cpusets on the node; every daemon's /metrics; `helm upgrade` switching reclaim off and on;
`helm uninstall` leaving nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import RBAC_DENIED, REPO, Kubectl, LocalNode, wait_until
from tests.e2e.pykatalyst_e2e import AGENT_CONFIG, container_cpus, running_pods

CHART = REPO / "deploy" / "charts" / "pykatalyst"


def _helm() -> str:
    sys.path.insert(0, str(REPO / "scripts"))
    import render_manifests

    helm = render_manifests.find_helm()
    if helm is None:
        pytest.skip("helm is not on PATH nor in ~/.cache/pykatalyst (scripts/k8s-build.sh)")
    return helm


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("scheduler.mode=both", "webhook.enabled=true", "agent.privileged=false"),
    ],
    ids=["defaults", "everything"],
)
def test_the_rendered_chart_is_accepted_by_the_api_server(
    kubectl: Kubectl, namespace: str, sets: tuple[str, ...], tmp_path: Path
) -> None:
    args = [_helm(), "template", "pykatalyst", str(CHART), "--namespace", namespace]
    args += ["--include-crds", "--kube-version", _server_version(kubectl)]
    for s in sets:
        args += ["--set", s]
    rendered = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True)
    objs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert any(o["kind"] == "CustomResourceDefinition" for o in objs)
    done = kubectl.run(
        "apply", "--dry-run=server", "-f", "-", input=rendered.stdout, check=False, timeout=180
    )
    assert done.returncode == 0, done.stderr
    # One line per object: every object was judged, none skipped.
    lines = [x for x in done.stdout.splitlines() if "(server dry run)" in x]
    assert len(lines) == len(objs), done.stdout


def _server_version(kubectl: Kubectl) -> str:
    version = kubectl.json("version")["serverVersion"]
    return f"{version['major']}.{version['minor'].rstrip('+')}"


IMAGE_CACHE = Path(
    os.environ.get("PYKATALYST_IMAGE_CACHE", Path.home() / ".cache" / "pykatalyst-image")
)
# What goes into the image: a change to any of these builds a new one.
IMAGE_INPUTS = (
    "src/pykatalyst",
    "pyproject.toml",
    "constraints.txt",
    "scripts/image.sh",
    "scripts/oci_image.py",
)
pytestmark = pytest.mark.timeout(900)
PORTS = {"agent": 19316, "scheduler": 18888, "controller": 19090, "webhook": 19443}


def _image_key() -> str:
    digest = hashlib.sha256()
    for top in IMAGE_INPUTS:
        base = REPO / top
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for f in files:
            if "__pycache__" in f.parts:
                continue
            digest.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


def _build_image(key: str) -> Path:
    """The image archive for these sources: from the cache, or built by scripts/image.sh
    (the build time is printed: `pytest -s` shows it)."""
    out = IMAGE_CACHE / f"e2e-{key}"
    tar = out / "pykatalyst.tar"
    if tar.is_file():
        return tar
    start = time.monotonic()
    env = {**os.environ, "PYKATALYST_IMAGE": f"docker.io/library/pykatalyst:e2e-{key}"}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"scripts/image.sh failed:\n{done.stderr[-3000:]}"
    print(f"image built in {time.monotonic() - start:.0f}s: {tar}")
    for old in IMAGE_CACHE.glob("e2e-*"):  # images of earlier sources
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    return tar


def _import_image(node: LocalNode, tar: Path, key: str) -> None:
    """Into the node's containerd, replacing the images of earlier sources."""
    ctr = ["ctr", "--address", node.endpoint.removeprefix("unix://"), "-n", "k8s.io", "images"]
    listed = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, timeout=60)
    stale = [
        name
        for name in listed.stdout.split()
        if name.startswith("docker.io/library/pykatalyst:e2e-") and not name.endswith(key)
    ]
    if stale:
        subprocess.run([*ctr, "rm", *stale], capture_output=True, timeout=120)
    subprocess.run([*ctr, "import", str(tar)], check=True, capture_output=True, timeout=300)


@dataclass
class Release:
    kubectl: Kubectl
    helm: str
    node: LocalNode
    namespace: str
    workloads: str
    suffix: str
    profile: str
    values: Path
    state: Path
    before: dict[str, str] = field(default_factory=dict)
    uids: set[str] = field(default_factory=set)  # of the pods the tests made
    installed: bool = True

    def helm_run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [self.helm, "--kubeconfig", self.kubectl.kubeconfig, *args, "-n", self.namespace],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise AssertionError(f"helm {args[0]} failed: {done.stderr.strip()}\n{self.describe()}")
        return done.stdout

    def describe(self) -> str:
        """The release's pods and the last log lines of those not ready, for a failure."""
        ns = ["-n", self.namespace]
        out = [self.kubectl.run("get", "pods", "-o", "wide", *ns, check=False).stdout]
        for pod in self.kubectl.json("get", "pods", *ns)["items"]:
            if not _ready(pod):
                name = pod["metadata"]["name"]
                log = self.kubectl.run("logs", name, "--tail=5", *ns, check=False)
                out.append(f"{name}: {pod['status'].get('phase')}\n{log.stdout}{log.stderr}")
        return "\n".join(out)[-4000:]

    def pods(self, component: str) -> list[dict[str, Any]]:
        sel = f"app.kubernetes.io/name={component}"
        items: list[dict[str, Any]] = self.kubectl.json(
            "get", "pods", "-n", self.namespace, "-l", sel
        )["items"]
        return items

    def scrape(self, component: str) -> dict[str, Any]:
        """The metric families one ready pod of `component` serves, by name."""
        pod = next(p for p in self.pods(component) if _ready(p))
        scheme = "https" if component == "katalyst-webhook" else "http"
        port = PORTS[component.removeprefix("katalyst-")]
        url = f"{scheme}://{pod['status']['podIP']}:{port}/metrics"
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
            text = resp.read().decode()
        return {f.name: f for f in text_string_to_metric_families(text)}


def _ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _values(node: LocalNode, suffix: str, profile: str, workloads: str, state: Path) -> Any:
    chart = yaml.safe_load((CHART / "values.yaml").read_text())
    sched = chart["scheduler"]["config"]
    sched["profiles"][0]["schedulerName"] = profile
    agent_cfg = {**AGENT_CONFIG, "checkpoint_path": str(state / "agent-enforcer.json")}
    return {
        "hostNetwork": True,
        "apiServer": {"host": "127.0.0.1", "port": 6443},
        "clusterScopedSuffix": suffix,
        "image": {"repository": "pykatalyst", "tag": "", "pullPolicy": "Never"},
        "agent": {
            "port": PORTS["agent"],
            "stateDir": str(state),
            "podResourcesDir": str(node.state_dir / "kubelet" / "pod-resources"),
            # this machine's /sys/fs/cgroup is a private mount (no systemd)
            "cgroupMountPropagation": "None",
            # only the real node: other tests make fake Nodes with no kubelet
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "config": agent_cfg,
        },
        "scheduler": {"port": PORTS["scheduler"], "config": sched},
        "controller": {"replicas": 1, "port": PORTS["controller"], "dryRun": True},
        "webhook": {
            "enabled": True,
            "port": PORTS["webhook"],
            "mutateNodes": False,
            "namespaceSelector": {"pykatalyst-e2e-helm": workloads},
            "timeoutSeconds": 2,
        },
    }


def _node_knobs() -> dict[str, str]:
    """The QoS-level cgroup knobs the agent may write (the kubelet owns their cpu.shares),
    in the kubelet's cgroupfs layout on cgroup v1."""
    out: dict[str, str] = {}
    root = Path("/sys/fs/cgroup")
    for rel in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
        for ctl, knob in (("cpuset", "cpuset.cpus"), ("cpu", "cpu.idle")):
            path = root / ctl / rel / knob
            if path.exists():
                out[f"{ctl}/{rel}/{knob}"] = path.read_text().strip()
    return out


@pytest.fixture(scope="module")
def release(local_node: LocalNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    from tests.e2e.conftest import _kubeconfig, _tool

    kubectl = Kubectl(_tool("kubectl"), _kubeconfig())
    helm = _helm()
    key = _image_key()
    tar = _build_image(key)
    _import_image(local_node, tar, key)
    suffix = f"e2e-{secrets.token_hex(3)}"
    ns, workloads = f"pyk-helm-{suffix}", f"pyk-helm-{suffix}-pods"
    kubectl.run("create", "namespace", workloads)
    kubectl.run("label", "namespace", workloads, f"pykatalyst-e2e-helm={workloads}")
    wait_until(
        f"the default ServiceAccount of {workloads}",
        lambda: kubectl.run("get", "sa", "default", "-n", workloads, check=False).returncode == 0,
        60,
    )
    state = tmp_path_factory.mktemp("agent-state")
    values_file = state.parent / f"values-{suffix}.yaml"
    values = _values(local_node, suffix, f"katalyst-scheduler-{suffix}", workloads, state)
    values["image"]["tag"] = f"e2e-{key}"
    values_file.write_text(yaml.safe_dump(values))
    rel = Release(
        kubectl,
        helm,
        local_node,
        ns,
        workloads,
        suffix,
        f"katalyst-scheduler-{suffix}",
        values_file,
        state,
    )
    rel.before = _node_knobs()
    try:
        rel.helm_run(
            "install",
            "pykatalyst",
            str(CHART),
            "--create-namespace",
            "-f",
            str(values_file),
            "--wait",
            "--timeout",
            "4m",
            timeout=300,
        )
        # `helm install --wait` holds a DaemonSet ready while no more than its maxUnavailable
        # (1) pods are unready, so on a one-node cluster it returns before the agent pod's
        # first readiness probe: wait for every component's pods as a user would.
        try:
            wait_until(
                "every component's pods Ready",
                lambda: all(
                    rel.pods(c) and all(_ready(p) for p in rel.pods(c)) for c in COMPONENTS
                ),
                120,
                interval=2,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{rel.describe()}") from None
        yield rel
    finally:
        kubectl.run("delete", "namespace", workloads, "--wait=true", check=False, timeout=180)
        if rel.installed:
            subprocess.run(
                [
                    helm,
                    "--kubeconfig",
                    kubectl.kubeconfig,
                    "uninstall",
                    "pykatalyst",
                    "-n",
                    ns,
                    "--wait",
                ],
                capture_output=True,
                timeout=300,
            )
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


COMPONENTS = ("katalyst-agent", "katalyst-scheduler", "katalyst-controller", "katalyst-webhook")


def test_every_component_runs_and_is_ready_through_its_probes(release: Release) -> None:
    for component in COMPONENTS:
        pods = release.pods(component)
        assert pods, f"no {component} pod"
        for pod in pods:
            assert _ready(pod), f"{pod['metadata']['name']} is not Ready: {pod['status']}"
            spec = pod["spec"]["containers"][0]
            assert spec["readinessProbe"] and spec["livenessProbe"], component
            assert all(s["restartCount"] == 0 for s in pod["status"]["containerStatuses"])
    agent = release.pods("katalyst-agent")[0]
    assert agent["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    assert agent["spec"]["nodeName"] == release.node.name
    # Each component's ServiceAccount, bound by the chart's RBAC, is allowed what it calls.
    denied = [
        f"{c}: {line.strip()}"
        for c in COMPONENTS
        for line in release.kubectl.run(
            "logs", "-n", release.namespace, "-l", f"app.kubernetes.io/name={c}", "--tail=-1"
        ).stdout.splitlines()
        if RBAC_DENIED.search(line)
    ]
    assert not denied, "\n".join(denied[:10])


COLOCATION = REPO / "examples" / "pods" / "colocation-small-node.yaml"


def _workloads(release: Release, *wanted: str) -> list[dict[str, Any]]:
    """The pods of the colocation walk-through for a 2-cpu node (examples/pods), in the
    test's namespace and for the release's scheduler profile."""
    pods = {d["metadata"]["name"]: d for d in yaml.safe_load_all(COLOCATION.read_text()) if d}
    out = []
    for name in wanted:
        pod = pods[name]
        pod["metadata"]["namespace"] = release.workloads
        pod["spec"]["schedulerName"] = release.profile
        out.append(pod)
    return out


def test_the_agent_pod_gives_a_dedicated_pod_its_own_cpu_and_shared_pods_the_pool(
    release: Release,
) -> None:
    pods = _workloads(release, "dedicated-normal", "shared-a", "shared-b")
    for p in pods:
        release.kubectl.apply(p)
    wanted = [p["metadata"]["name"] for p in pods]
    live = wait_until(
        "the pods Running", lambda: running_pods(release.kubectl, release.workloads, wanted), 120
    )

    def placed() -> dict[str, CPUSet] | None:
        cpus = {n: container_cpus(release.node, live[n])["app"] for n in wanted}
        # The cgroup's cpuset and what the kernel lets the process run on agree.
        if any(cg != proc for cg, proc in cpus.values()):
            return None
        got = {n: c[0] for n, c in cpus.items()}
        dedicated, shared = got["dedicated-normal"], got["shared-a"]
        if len(dedicated) != 1 or dedicated & shared or shared != got["shared-b"]:
            return None
        return got

    got = wait_until("the agent pod's cpusets on the node", placed, 90, interval=1)
    release.uids |= {live[n]["metadata"]["uid"] for n in wanted}
    assert len(got["dedicated-normal"]) == 1
    # What the agent reports about it on /metrics: the share pool without the dedicated cpu.
    pools = release.scrape("katalyst-agent")["cpu_advisor_pool_size"].samples
    share = [s.value for s in pools if s.labels["name"] == names.POOL_SHARE]
    assert share == [float(len(got["shared-a"]))]
    scheduler = release.scrape("katalyst-scheduler")["scheduler_schedule_attempts"]
    scheduled = [
        s.value
        for s in scheduler.samples
        if s.labels.get("result") == "scheduled" and s.labels.get("profile") == release.profile
    ]
    assert scheduled and scheduled[0] >= len(pods)
    for p in wanted:
        release.kubectl.run("delete", "pod", p, "-n", release.workloads, "--grace-period=1")


def test_every_daemon_serves_its_metrics(release: Release) -> None:
    """Each daemon's /metrics, scraped from the node at the pod's address as Prometheus
    would, parses and carries the names docs/deploy.md lists."""
    want = {
        "katalyst-agent": [
            "cpu_advisor_pool_size",
            "headroom_report_result",
            "katalyst_agent_reclaimed_term",
            "katalyst_agent_cgroup_writes",
            "katalyst_agent_reconcile_duration_seconds",
            "katalyst_eviction_victims",
        ],
        "katalyst-scheduler": [
            "scheduler_schedule_attempts",
            "scheduler_scheduling_attempt_duration_seconds",
            "scheduler_pending_pods",
            "katalyst_scheduler_reconcile_duration_seconds",
        ],
        "katalyst-controller": [
            "katalyst_controller_reconciles",
            "katalyst_controller_reconcile_duration_seconds",
        ],
        "katalyst-webhook": ["katalyst_webhook_admission_duration_seconds"],
    }
    for component, metric_names in want.items():
        got = release.scrape(component)
        missing = [n for n in metric_names if n not in got]
        assert not missing, f"{component} lacks {missing}; has {sorted(got)}"
    writes = release.scrape("katalyst-agent")["katalyst_agent_cgroup_writes"].samples
    assert any(s.labels.get("result") == "applied" and s.value > 0 for s in writes)


def _cnr_reclaimed(release: Release) -> dict[str, int]:
    cnr = release.kubectl.json("get", "kcnr", release.node.name)
    alloc = cnr.get("status", {}).get("resources", {}).get("allocatable", {})
    return {
        k: Quantity.parse(str(alloc[k])).value()
        for k in (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY)
        if k in alloc
    }


def _agent_switch(release: Release, uid_before: str) -> tuple[str, float] | None:
    """The new agent pod's uid and its reclaim switch on /metrics, once it replaced the
    pod `uid_before` and is ready."""
    pods = [p for p in release.pods("katalyst-agent") if _ready(p)]
    if len(pods) != 1 or pods[0]["metadata"]["uid"] == uid_before:
        return None
    enabled = release.scrape("katalyst-agent")["katalyst_agent_reclaim_enabled"]
    return pods[0]["metadata"]["uid"], enabled.samples[0].value


def test_helm_upgrade_switches_reclaim_off_and_on(release: Release) -> None:
    """`helm upgrade --reuse-values --set agent.config.advisor.enable_reclaim=...` rolls the
    agent with the new config: off, the CNR publishes no reclaimed capacity; on again, the
    agent publishes its formula's figure, the one its /metrics shows. (How much that is
    depends on how busy this shared 2-cpu node is: a busy reclaim pool publishes 0.)"""
    before = wait_until("reclaimed figures on the CNR", lambda: _cnr_reclaimed(release), 90)
    uid = release.pods("katalyst-agent")[0]["metadata"]["uid"]
    for enabled in (False, True):
        release.helm_run(
            "upgrade", "pykatalyst", str(CHART), "--reuse-values",
            "--set", f"agent.config.advisor.enable_reclaim={str(enabled).lower()}",
            "--wait", "--timeout", "3m",
        )  # fmt: skip
        uid, switch = wait_until(
            "the agent pod rolled with the new config",
            lambda old=uid: _agent_switch(release, old),  # type: ignore[misc]
            120,
            interval=1,
        )
        assert switch == (1 if enabled else 0)
        if not enabled:
            wait_until(
                "no reclaimed capacity on the CNR",
                lambda: set(_cnr_reclaimed(release).values()) == {0},
                60,
                interval=1,
            )

    def agrees() -> bool:
        published = release.scrape("katalyst-agent")["headroom_report_result"].samples
        metrics = {s.labels["resourceName"]: int(s.value) for s in published}
        return bool(metrics) and metrics == _cnr_reclaimed(release)

    wait_until("the CNR publishing the agent's figures again", agrees, 60, interval=2)
    if any(before.values()):
        # the node had room before: it gets it back
        wait_until(
            "reclaimed capacity back on the CNR",
            lambda: any(_cnr_reclaimed(release).values()),
            90,
            interval=2,
        )


def test_helm_uninstall_leaves_nothing_behind(release: Release) -> None:
    release.uids |= {p["metadata"]["uid"] for c in COMPONENTS for p in release.pods(c)}
    release.kubectl.run("delete", "namespace", release.workloads, "--wait=true", timeout=180)
    release.helm_run("uninstall", "pykatalyst", "--wait", "--timeout", "3m")
    release.installed = False
    k = release.kubectl
    wait_until(
        "the release's pods gone",
        lambda: not k.json("get", "pods", "-n", release.namespace)["items"],
        120,
    )
    for kind in (
        "clusterrole",
        "clusterrolebinding",
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ):
        left = [o["metadata"]["name"] for o in k.json("get", kind)["items"]]
        assert not [n for n in left if n.endswith(release.suffix)], (kind, left)
    left = k.json(
        "get", "all,configmap,secret,serviceaccount,role,rolebinding,lease", "-n", release.namespace
    )["items"]
    # The Lease an electing daemon took stays, as kube-scheduler's does; nothing else.
    kept = ("kube-root-ca.crt", "default")
    assert [o for o in left if o["metadata"]["name"] not in kept and o["kind"] != "Lease"] == []
    node = k.json("get", "node", release.node.name)
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    assert not [t for t in taints if "katalyst" in t], taints
    # The CRDs stay (Helm never deletes crds/), and with them the node's CNR.
    assert k.json("get", "crd", f"customnoderesources.{names.NODE_GROUP}")
    after = _node_knobs()
    assert after == release.before, json.dumps({"before": release.before, "after": after})
    # The cgroups of this test's pods, which the agent set knobs on, went with the pods.
    checkpoint = json.loads((release.state / "agent-enforcer.json").read_text())
    cgroups = Path("/sys/fs/cgroup")
    ours = [cg for cg in checkpoint["desired"] if any(f"pod{u}" in cg for u in release.uids)]
    left = [
        cg for cg in ours if any((cgroups / c / cg).exists() for c in ("cpuset", "cpu", "memory"))
    ]
    assert not left, left
