"""Fake Node objects for scheduling tests on the real API server, as kube's scheduler_perf
makes them: a Node with a status and no kubelet, a CNR beside it, both labelled and tainted
for one test, so that the real node and other tests' pods are untouched. Pods bound to a
fake node never run; the tests read `spec.nodeName`.

The node lifecycle controller marks a node without a kubelet unreachable after its grace
period (taints `node.kubernetes.io/unreachable`); the test pods tolerate that and the
`not-ready` taint, and carry a toleration for the test's own taint and a required node
affinity to its label."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.api import names
from tests.e2e.conftest import WORKLOAD_IMAGE, Kubectl
from tests.scheduler.sched_helpers import cnr, node

FAKE_KEY = "e2e.pykatalyst.io/fake-node"
KUBE_BIN = Path.home() / ".cache" / "pykatalyst" / "k8s-v1.34.4" / "bin"


@dataclass
class FakeNodes:
    kubectl: Kubectl
    run: str = field(default_factory=lambda: secrets.token_hex(3))
    names: list[str] = field(default_factory=list)

    @property
    def taint(self) -> dict[str, str]:
        return {"key": FAKE_KEY, "value": self.run, "effect": "NoSchedule"}

    def add(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "16Gi",
        pods: str = "110",
        extra: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        cnr_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """A fake node `<run>-<name>` with this allocatable, and its CNR when `cnr_kwargs`
        is given (the arguments of tests.scheduler.sched_helpers.cnr)."""
        full = f"fake-{self.run}-{name}"
        body = node(
            full,
            cpu,
            memory,
            pods,
            labels={FAKE_KEY: self.run, **(labels or {})},
            taints=[self.taint, *(taints or [])],
            extra=extra,
        )
        status = body.pop("status")
        self.names.append(full)
        self.kubectl.apply(body)
        self.patch_status("node", full, status)
        if cnr_kwargs is not None:
            obj = cnr(full, **cnr_kwargs)
            obj["metadata"]["labels"] = {FAKE_KEY: self.run}
            cstatus = obj.pop("status")
            self.kubectl.apply(obj)
            self.patch_status("kcnr", full, cstatus)
        return full

    def patch_status(self, kind: str, name: str, status: dict[str, Any]) -> None:
        self.kubectl.run(
            "patch",
            kind,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )

    def pod(
        self,
        name: str,
        namespace: str,
        requests: dict[str, str],
        *,
        scheduler: str,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        host_port: int | None = None,
        node_names: list[str] | None = None,
    ) -> dict[str, Any]:
        """A pod for the fake nodes only (tolerating their taint, required to their label,
        or to `node_names` among them)."""
        container: dict[str, Any] = {
            "name": "main",
            "image": WORKLOAD_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sleep", "3600"],
            "resources": {"requests": dict(requests), "limits": dict(requests)},
        }
        if host_port is not None:
            container["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
        term: dict[str, Any] = {
            "matchExpressions": [{"key": FAKE_KEY, "operator": "In", "values": [self.run]}]
        }
        if node_names is not None:
            term["matchExpressions"].append(
                {"key": "kubernetes.io/hostname", "operator": "In", "values": node_names}
            )
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
            },
            "spec": {
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "containers": [container],
                "tolerations": self.tolerations(),
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [term]
                        }
                    }
                },
            },
        }

    def tolerations(self) -> list[dict[str, Any]]:
        return [
            {"key": FAKE_KEY, "operator": "Equal", "value": self.run, "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        ]

    def placements(self, namespace: str) -> dict[str, str]:
        """Each pod of the namespace and the node it is bound to ('' while pending)."""
        pods = self.kubectl.json("get", "pods", "-n", namespace)["items"]
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}

    def cleanup(self) -> None:
        selector = f"{FAKE_KEY}={self.run}"
        self.kubectl.run("delete", "kcnr", "-l", selector, "--wait=false", check=False)
        self.kubectl.run("delete", "node", "-l", selector, "--wait=false", check=False)


@pytest.fixture
def fake_nodes(kubectl: Kubectl) -> Iterator[FakeNodes]:
    fakes = FakeNodes(kubectl)
    try:
        yield fakes
    finally:
        fakes.cleanup()


def kube_bin(name: str) -> str:
    path = KUBE_BIN / name
    if not path.is_file():
        pytest.skip(f"no upstream {name} binary at {path} (scripts/k8s-build.sh builds it)")
    return str(path)


@dataclass
class HostProcess:
    """A host process of this test (an upstream kube-scheduler), with its log."""

    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HostProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def host_processes(tmp_path: Path) -> Iterator[Any]:
    started: list[HostProcess] = []

    def start(name: str, *args: str) -> HostProcess:
        proc = HostProcess(list(args), tmp_path / f"{name}-{len(started)}.log")
        started.append(proc.start())
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PYTHON = sys.executable
RECLAIMED = {names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY}


def renamed_config(source: Path | None, scheduler_name: str, out: Path) -> Path:
    """A KubeSchedulerConfiguration (kube's default profile when `source` is None) whose
    every profile answers to `scheduler_name` only, so that no other scheduler of the
    cluster competes for the test's pods."""
    import yaml

    if source is None:
        raw: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{}],
        }
    else:
        docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
        raw = docs[0]
        if raw.get("kind") == "ConfigMap":
            raw = yaml.safe_load(next(iter(raw["data"].values())))
    profiles = raw.setdefault("profiles", [{}])
    if len(profiles) != 1:
        raise AssertionError(f"{source}: expected one profile, found {len(profiles)}")
    profiles[0]["schedulerName"] = scheduler_name
    out.write_text(yaml.safe_dump(raw))
    return out
