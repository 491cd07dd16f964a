"""The README's "Try it on a real cluster" block, run as a reader would run it: its lines,
as written, in one root shell at the checkout's root, on the e2e cluster.

Two lines are not run: the first, `sudo -s` (this test already runs as root: the block
says everything runs as root), and the last, `bash scripts/cluster.sh down`, which would
take the cluster from the tests that follow; `scripts/e2e.sh` runs that same command when
the suite ends. `bash scripts/cluster.sh up` is run: on a running cluster it only checks it
and reinstalls pykatalyst's CRDs and RBAC.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
import yaml

from tests.e2e.conftest import REPO, Kubectl

PODS = REPO / "examples" / "pods" / "colocation-small-node.yaml"
EVICTED = "reason=EvictCreated"


def readme_block() -> list[str]:
    """The block's commands, continuation lines joined."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Try it on a real cluster", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines: list[str] = []
    for raw in block.splitlines():
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + raw.strip()
        elif raw.strip():
            lines.append(raw.strip())
    return lines


def test_the_block_starts_as_root_and_ends_by_taking_the_cluster_down() -> None:
    lines = readme_block()
    assert lines[0].startswith("sudo -s")
    assert lines[-1].startswith("bash scripts/cluster.sh down")
    assert any(line.startswith("katalyst agent ") for line in lines)


@pytest.mark.skipif(os.geteuid() != 0, reason="the README's block runs as root")
def test_the_readme_block_runs_as_written(kubectl: Kubectl, node_name: str) -> None:
    if not os.environ.get("PYKATALYST_CLUSTER_DIR"):
        pytest.skip("needs the cluster of scripts/cluster.sh (PYKATALYST_CLUSTER_DIR unset)")
    body = readme_block()[1:-1]
    script = "set -euo pipefail\n" + "\n".join(body) + "\n"
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )
    evictions: list[dict[str, object]] = []
    try:
        out, _ = proc.communicate(timeout=540)
        found = kubectl.json("get", "events", "-n", "default", "--field-selector", EVICTED)
        evictions = found["items"]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the README's block did not finish in 9 minutes:\n{out[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        kubectl.run("delete", "-f", str(PODS), "--wait=true", "--timeout=120s", check=False)
    assert proc.returncode == 0, out[-4000:]
    # the agent found the cluster it was given and runs with reclaim on: colocation, not
    # a batch pod evicted
    assert "katalyst agent: cluster: the cluster of" in out
    assert "reclaim on" in out
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(PODS.read_text()) if d]
    running = [line for line in out.splitlines() if " Running " in line]
    for name in names:
        assert any(line.startswith(name + " ") and node_name in line for line in running), name
    assert "cgroupsPath" in out
    # each eviction's Event says which pod, which plugin and which figures
    evicted = [
        f"{(e.get('involvedObject') or {}).get('name')}: {e.get('message', '')}" for e in evictions
    ]
    assert evicted == [], "a pod of the README's example was evicted"
