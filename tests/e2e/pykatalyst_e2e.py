"""What the end-to-end tests share: Katalyst's example pods fitted to the test node,
pykatalyst's components as host processes, and reading a container's cpus on the node."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.topology.cpuset import CPUSet
from tests.e2e.conftest import EXAMPLES, REPO, WORKLOAD_IMAGE, Component, Kubectl, LocalNode

BURN = "while :; do :; done"
SLEEP = "sleep 36000"
MEMORY_ENHANCEMENT = names.MEMORY_ENHANCEMENT_ANNOTATION

# The agent's settings for a small node (examples/agent/small-node.yaml: one-cpu pools, no
# ramp-up, capacity published within seconds in fractions of a core). Its eviction plugins
# only log here: how much the node's other processes leave reclaimable varies from run to
# run, and these tests are about placement (the eviction path is the backstop's test).
AGENT_CONFIG: dict[str, Any] = {
    **yaml.safe_load((REPO / "examples" / "agent" / "small-node.yaml").read_text()),
    "eviction": {"dry_run": ["*"]},
}


def example(name: str) -> list[dict[str, Any]]:
    """Katalyst's example manifest `name`, its pods as written there."""
    path = EXAMPLES / name
    if not path.is_file():
        pytest.skip(f"Katalyst's examples are not beside the checkout ({path} is missing)")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _cpu(value: str) -> str:
    return str(Quantity.from_milli(max(Quantity.parse(value).milli_value() // 10, 100)))


def _memory(value: str) -> str:
    return str(Quantity.from_bytes(max(Quantity.parse(value).value() // 8, 64 * 2**20)))


def _count(value: str) -> str:
    return str(Quantity.from_int(max(Quantity.parse(value).value() // 10, 100)))


def fit_to_node(pod: dict[str, Any], namespace: str, command: str = SLEEP) -> dict[str, Any]:
    """The example pod for this node: the workload image built from busybox (no registry
    is reachable), its cpu burner or sleeper instead of `stress`, and its requests scaled
    down (cpu / 10, memory / 8) except a dedicated pod's whole cpus."""
    out = copy.deepcopy(pod)
    out["metadata"]["namespace"] = namespace
    ann = out["metadata"].setdefault("annotations", {})
    dedicated = ann.get(names.QOS_LEVEL_ANNOTATION) == names.QOS_DEDICATED_CORES
    if dedicated and MEMORY_ENHANCEMENT in ann:
        # One NUMA node: an exclusive NUMA binding would take every cpu of the machine.
        mem = json.loads(ann[MEMORY_ENHANCEMENT])
        mem.pop("numa_exclusive", None)
        ann[MEMORY_ENHANCEMENT] = json.dumps(mem)
    for c in out["spec"]["containers"]:
        c["image"] = WORKLOAD_IMAGE
        c["imagePullPolicy"] = "Never"
        c["command"] = ["sh", "-c", command]
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            for key, value in list(res.get(part, {}).items()):
                if key == "cpu" and not dedicated:
                    res[part][key] = _cpu(str(value))
                elif key in ("memory", names.RECLAIMED_MEMORY):
                    res[part][key] = _memory(str(value))
                elif key == names.RECLAIMED_MILLICPU:
                    res[part][key] = _count(str(value))
    return out


def katalyst_pod(
    name: str, namespace: str, limits: dict[str, str], command: str = SLEEP
) -> dict[str, Any]:
    """A one-container pod for `katalyst scheduler` on the workload image, with 32Mi of
    memory and these limits beside it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "katalyst-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "resources": {"limits": {"memory": "32Mi", **limits}},
                }
            ],
        },
    }


def start_device_plugin(
    components: Callable[..., Component], tmp_path: Path, node: str
) -> Component:
    """`katalyst device-plugin` for `node` with the agent's ServiceAccount, reading the
    agent.yaml `start_agent` wrote in `tmp_path`."""
    from tests.e2e.conftest import component_kubeconfig

    return components(
        "device-plugin",
        "device-plugin",
        "--node",
        node,
        "--config",
        str(tmp_path / "agent.yaml"),
        "--kubeconfig",
        component_kubeconfig("agent"),
    )


def start_agent(
    components: Callable[..., Component],
    tmp_path: Path,
    node: str,
    *args: str,
    config: dict[str, Any] | None = None,
) -> Component:
    """`katalyst agent` for `node` with its ServiceAccount, on the test node's settings
    (`config` overlays them; `args` are more command-line options)."""
    from tests.e2e.conftest import component_kubeconfig

    cfg = tmp_path / "agent.yaml"
    body = dict(AGENT_CONFIG, checkpoint_path=str(tmp_path / "agent-enforcer.json"))
    body.update(config or {})
    cfg.write_text(yaml.safe_dump(body))
    return components(
        "agent",
        "agent",
        "--node",
        node,
        "--config",
        str(cfg),
        "--kubeconfig",
        component_kubeconfig("agent"),
        *args,
    )


def start_scheduler(components: Callable[..., Component]) -> Component:
    """`katalyst scheduler` (schedulerName katalyst-scheduler, Katalyst's NUMA profile)
    against the cluster, with its ServiceAccount."""
    from tests.e2e.conftest import component_kubeconfig

    return components(
        "scheduler",
        "scheduler",
        "--config",
        str(REPO / "examples" / "scheduler" / "katalyst-scheduler-numa.yaml"),
        "--kubeconfig",
        component_kubeconfig("scheduler"),
    )


def start_components(
    components: Callable[..., Component], tmp_path: Path, node: str
) -> tuple[Component, Component, Component]:
    """`katalyst agent`, `katalyst scheduler` and `katalyst controller` against the cluster,
    each with its own ServiceAccount. The controller runs the node controllers for this node
    only: the tests beside it keep their fake Nodes, workloads and autoscalers to themselves."""
    from tests.e2e.conftest import component_kubeconfig

    agent = start_agent(components, tmp_path, node)
    scheduler = start_scheduler(components)
    controller = components(
        "controller",
        "controller",
        "--kubeconfig",
        component_kubeconfig("controller"),
        *node_controllers(node),
    )
    return agent, scheduler, controller


def node_controllers(
    node: str, controllers: str = "lifecycle,overcommit,kcc,backstop"
) -> list[str]:
    """`katalyst controller` options for `controllers` over the one Node `node`."""
    return [f"--controllers={controllers}", "--node-selector", f"kubernetes.io/hostname={node}"]


def running_pods(kubectl: Kubectl, namespace: str, names: list[str]) -> dict[str, Any]:
    """The pods, once every one is Running and ready; until then an AssertionError that
    says where each one is (its phase and its latest Event)."""
    pods = {p["metadata"]["name"]: p for p in kubectl.json("get", "pods", "-n", namespace)["items"]}
    waiting = [
        n
        for n in names
        if n not in pods
        or pods[n]["status"].get("phase") != "Running"
        or not all(cs.get("ready") for cs in pods[n]["status"].get("containerStatuses", []))
    ]
    if not waiting:
        return pods
    events = kubectl.json("get", "events", "-n", namespace)["items"]
    latest: dict[str, str] = {}
    for ev in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime"))):
        latest[ev["involvedObject"].get("name", "")] = f"{ev.get('reason')}: {ev.get('message')}"
    detail = "; ".join(
        f"{n} {pods[n]['status'].get('phase') if n in pods else 'missing'} ({latest.get(n, '')})"
        for n in waiting
    )
    raise AssertionError(f"not running yet: {detail}")


def container_cpus(node: LocalNode, pod: dict[str, Any]) -> dict[str, tuple[CPUSet, CPUSet]]:
    """Each container's cpus as Katalyst's get_cpuset.sh reads them (crictl inspect ->
    cgroupsPath -> cpuset.cpus), with the cpus its main process may run on
    (/proc/<pid>/status), keyed by container name."""
    uid = pod["metadata"]["uid"]
    out: dict[str, tuple[CPUSet, CPUSet]] = {}
    listed = node.crictl_json("ps", "--pod", _sandbox_id(node, uid))["containers"]
    for c in listed:
        info = node.crictl_json("inspect", c["id"])
        path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
        cpus = CPUSet.parse(
            (Path("/sys/fs/cgroup/cpuset") / path.lstrip("/") / "cpuset.cpus").read_text()
        )
        pid = info["info"]["pid"]
        allowed = ""
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                allowed = line.split(":", 1)[1].strip()
        out[c["metadata"]["name"]] = (cpus, CPUSet.parse(allowed))
    return out


def _sandbox_id(node: LocalNode, uid: str) -> str:
    pods = node.crictl_json("pods", "--label", f"io.kubernetes.pod.uid={uid}", "--state", "ready")
    items = pods.get("items", [])
    if not items:
        raise AssertionError(f"no ready sandbox for pod {uid}")
    return str(items[0]["id"])


def pod_cgroup_knob(pod: dict[str, Any], controller: str, knob: str) -> str:
    """A knob of the pod's cgroup under the kubelet's cgroupfs layout."""
    uid = pod["metadata"]["uid"]
    qos = pod["status"].get("qosClass", "BestEffort").lower()
    base = Path("/sys/fs/cgroup") / controller / "kubepods"
    candidates = [base / f"pod{uid}", base / qos / f"pod{uid}"]
    for path in candidates:
        if (path / knob).exists():
            return (path / knob).read_text().strip()
    raise AssertionError(f"no {knob} for pod {uid} under {base}")


def reclaimed_millicpu(kubectl: Kubectl, node: str) -> int:
    return _reclaimed(kubectl, node, names.RECLAIMED_MILLICPU)


def reclaimed_memory(kubectl: Kubectl, node: str) -> int:
    return _reclaimed(kubectl, node, names.RECLAIMED_MEMORY)


def _reclaimed(kubectl: Kubectl, node: str, resource: str) -> int:
    """The CNR's published figure; ValueError until it has one."""
    cnr = kubectl.json("get", "kcnr", node)
    alloc = cnr.get("status", {}).get("resources", {}).get("allocatable", {})
    value = alloc.get(resource)
    if value is None:
        raise ValueError(f"the CNR has no {resource.rsplit('/', 1)[-1]} yet")
    return Quantity.parse(str(value)).value()


def start_webhook(
    components: Callable[..., Component], certs: Path, *args: str
) -> tuple[Component, str, Path]:
    """`katalyst webhook` on a free loopback port with a self-signed pair written into
    `certs`, once its /readyz answers over TLS: (the process, its https URL, the CA file
    that is the caBundle). `args` are more options (e.g. `--client-ca-file`)."""
    import ssl
    import urllib.request

    from tests.e2e.conftest import wait_until
    from tests.e2e.fake_nodes import free_port

    port = free_port()
    comp = components(
        "webhook", "webhook", "--self-signed", str(certs), "--listen", f"127.0.0.1:{port}", *args
    )
    ca = certs / "ca.crt"
    url = f"https://127.0.0.1:{port}"

    def ready() -> bool:
        assert comp.alive(), comp.log()
        if not ca.exists():
            return False
        trust = ssl.create_default_context(cafile=str(ca))
        try:
            with urllib.request.urlopen(f"{url}/readyz", context=trust, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    wait_until("the webhook's /readyz", ready, 60)
    return comp, url, ca


def explain_pod_json(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    """`katalyst explain pod NS/NAME -o json`, run as a user runs it."""
    katalyst = str(Path(sys.executable).parent / "katalyst")
    key = f"{namespace}/{name}"
    done = subprocess.run(
        [katalyst, "explain", "pod", key, "--kubeconfig", kubectl.kubeconfig, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data
