"""The Helm chart against the real API server: everything `helm install` would create is
accepted by it (`kubectl apply --dry-run=server`: admission, schema validation and RBAC
escalation checks run, nothing is stored), with the CRDs, every component, both scheduler
modes and the webhook."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import REPO, Kubectl

CHART = REPO / "deploy" / "charts" / "pykatalyst"


def _helm() -> str:
    import sys

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
