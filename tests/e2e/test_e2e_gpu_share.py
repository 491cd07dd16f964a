"""GPU sharing on the real kubelet, with synthetic cards: `katalyst device-plugin` registers
`nvidia.com/gpu` and `resource.katalyst.kubewharf.io/gpu_memory` with the node's kubelet,
and `katalyst agent` reports the cards as the CNR's GPU zones; then `katalyst scheduler`
chooses the cards from that CNR and the plugin gives them.

Pods are written as Katalyst writes them (`nvidia.com/gpu: 1` and `gpu_memory: M`), with
the `gpu_selection_result` annotation a GPU-aware scheduler writes before binding (here
the test writes it; the default kube-scheduler binds). Each container prints what the
plugin told it: its NVIDIA_VISIBLE_DEVICES, CUDA_DEVICE_MEMORY_LIMIT and /dev/nvidia*.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pykatalyst.api import names
from tests.e2e.conftest import (
    REPO,
    WORKLOAD_IMAGE,
    Component,
    Kubectl,
    LocalNode,
    component_kubeconfig,
    wait_until,
)
from tests.e2e.pykatalyst_e2e import (
    explain_pod_json,
    running_pods,
    start_agent,
    start_device_plugin,
)

GPU = names.RESOURCE_NVIDIA_GPU
MEM = names.RESOURCE_GPU_MEMORY
SEL = names.GPU_SELECTION_RESULT_ANNOTATION
SHARES = 4
PRINT = (
    'echo "cards=$NVIDIA_VISIBLE_DEVICES limit=$CUDA_DEVICE_MEMORY_LIMIT"; '
    "ls /dev | grep nvidia; sleep 36000"
)


def _cards(sick: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    return [
        {
            "id": f"GPU-e2e-{i}",
            "numa": 0,
            "pcie_switch": f"0000:0{i // 2 + 1}:00.0",
            "model": "Synthetic-16GB",
            "minor": i,
            "device_node": "/dev/null",
            "memory_mib": 16384,
            "healthy": f"GPU-e2e-{i}" not in sick,
        }
        for i in range(3)
    ]


def _config(local_node: LocalNode, sick: frozenset[str] = frozenset()) -> dict[str, Any]:
    kubelet = local_node.state_dir / "kubelet"
    return {
        "kubelet": {"pod_resources_socket": str(kubelet / "pod-resources" / "kubelet.sock")},
        "devices": {
            "source": "synthetic",
            "gpus": _cards(sick),
            # the kubelet's device-plugin directory is /var/lib/kubelet/device-plugins
            # whatever its --root-dir (the device manager's socket path is fixed)
            "device_plugin": {
                "shares_per_gpu": SHARES,
                "poll_s": 1,
            },
        },
    }


def _pod(
    name: str, namespace: str, limits: dict[str, str], selection: str | None
) -> dict[str, Any]:
    ann = {SEL: selection} if selection else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": ann},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", PRINT],
                    "resources": {"limits": {"memory": "32Mi", **limits}},
                }
            ],
        },
    }


def _printed(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    out = wait_until(
        f"{name}'s output", lambda: kubectl.run("logs", name, "-n", namespace).stdout, 30
    )
    first, *rest = out.splitlines()
    fields = dict(part.split("=", 1) for part in first.split())
    return {**fields, "dev": sorted(rest)}


def _allocatable(kubectl: Kubectl, node: str) -> dict[str, str]:
    return dict(kubectl.json("get", "node", node)["status"].get("allocatable", {}))


def _gpu_zones(kubectl: Kubectl, node: str) -> dict[str, Any]:
    cnr = kubectl.json("get", "kcnr", node)
    out = {}
    for socket in cnr.get("status", {}).get("topologyZone", []):
        for numa in socket.get("children", []):
            for z in numa.get("children", []):
                if z.get("type") == names.ZONE_GPU:
                    out[z["name"]] = z
    return out


def _failed(kubectl: Kubectl, namespace: str, name: str) -> str:
    st = kubectl.json("get", "pod", name, "-n", namespace)["status"]
    if st.get("phase") == "Failed":
        return f"{st.get('reason')}: {st.get('message')}"
    raise AssertionError(f"{name} is {st.get('phase')}")


def test_share_pods_get_their_selected_cards_and_the_cnr_shows_them(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    node = local_node.name
    agent = start_agent(components, tmp_path, node, config=_config(local_node))
    cfg = tmp_path / "agent.yaml"

    def start_plugin() -> Component:
        args = ["--node", node, "--config", str(cfg)]
        return components("device-plugin", "device-plugin", *args, "--kubeconfig", kc)

    kc = component_kubeconfig("agent")
    plugin = start_plugin()

    def advertised() -> bool:
        alloc = _allocatable(kubectl, node)
        if alloc.get(GPU) == str(3 * SHARES) and alloc.get(MEM) == "300":
            return True
        raise AssertionError(f"node allocatable {alloc}; the plugin says {plugin.log()[-800:]}")

    wait_until("the kubelet advertising the plugin's cards", advertised, 90)

    # Two share pods bound back to back, on the cards their annotation names, and a
    # whole-card pod without one beside them.
    def run(*pods: str) -> dict[str, Any]:
        try:
            return dict(
                wait_until(
                    f"{', '.join(pods)} Running",
                    lambda: running_pods(kubectl, namespace, list(pods)),
                    120,
                )
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe plugin's log ends:\n{plugin.log()[-3000:]}") from None

    kubectl.apply(_pod("first", namespace, {GPU: "1", MEM: "30"}, "GPU-e2e-1"))
    kubectl.apply(_pod("second", namespace, {GPU: "1", MEM: "50"}, "GPU-e2e-0"))
    pods = run("first", "second")
    kubectl.apply(_pod("whole", namespace, {GPU: "1"}, None))
    pods.update(run("whole"))
    first = _printed(kubectl, namespace, "first")
    second = _printed(kubectl, namespace, "second")
    whole = _printed(kubectl, namespace, "whole")
    assert first["cards"] == "GPU-e2e-1" and first["limit"] == f"{16384 * 30 // 100}m"
    assert second["cards"] == "GPU-e2e-0" and second["limit"] == f"{16384 * 50 // 100}m"
    assert (first["dev"], second["dev"], whole["dev"]) == (["nvidia1"], ["nvidia0"], ["nvidia2"])
    # the whole card went to the one card nobody shares, and the pod now says so
    assert whole["cards"] == "GPU-e2e-2" and whole["limit"] == "16384m"
    ann = kubectl.json("get", "pod", "whole", "-n", namespace)["metadata"]["annotations"]
    assert ann[SEL] == "GPU-e2e-2"

    uid = {n: p["metadata"]["uid"] for n, p in pods.items()}

    def zones_show_the_pods() -> dict[str, Any]:
        zones = _gpu_zones(kubectl, node)
        got = {
            name: sorted((a["consumer"], a["requests"][MEM]) for a in z.get("allocations", []))
            for name, z in zones.items()
        }
        want = {
            "GPU-e2e-0": [(f"{namespace}/second/{uid['second']}", "50")],
            "GPU-e2e-1": [(f"{namespace}/first/{uid['first']}", "30")],
            "GPU-e2e-2": [(f"{namespace}/whole/{uid['whole']}", "100")],
        }
        if got != want:
            raise AssertionError(f"CNR GPU zones {got}, expected {want}")
        return zones

    zones = wait_until("the CNR's GPU zones", zones_show_the_pods, 60, interval=1)
    z1 = zones["GPU-e2e-1"]
    assert z1["resources"]["capacity"] == {GPU: "1", MEM: "100"}
    attrs = {a["name"]: a["value"] for a in z1["attributes"]}
    assert attrs == {
        "numa": "0",
        "socket": "0",
        "pcie_switch": "0000:01:00.0",
        "gpu_model": "Synthetic-16GB",
    }
    cnr = kubectl.json("get", "kcnr", node)
    assert {
        "propertyName": names.GPU_TOPOLOGY_ATTRIBUTE_KEY,
        "propertyValues": ["pcie_switch", "numa", "socket"],
    } in cnr["spec"]["nodeResourceProperties"]
    table = kubectl.run("get", "kcnr", node).stdout
    assert node in table

    # GPU-e2e-1 turns unhealthy: the kubelet stops offering it, the CNR says so, a pod
    # that names it is refused at admission and one without a selection goes elsewhere.
    body = yaml.safe_load(cfg.read_text())
    body.update(_config(local_node, frozenset({"GPU-e2e-1"})))
    cfg.write_text(yaml.safe_dump(body))

    def sick() -> bool:
        alloc = _allocatable(kubectl, node)
        zone = _gpu_zones(kubectl, node)["GPU-e2e-1"]
        if alloc.get(MEM) == "200" and zone["resources"]["allocatable"][GPU] == "0":
            return True
        raise AssertionError(f"allocatable {alloc}, zone {zone['resources']}")

    wait_until("GPU-e2e-1 reported unhealthy", sick, 60, interval=1)
    kubectl.apply(_pod("on-sick", namespace, {GPU: "1", MEM: "10"}, "GPU-e2e-1"))
    reason = wait_until("on-sick refused", lambda: _failed(kubectl, namespace, "on-sick"), 60)
    assert "UnexpectedAdmissionError" in reason and "unhealthy" in reason, reason
    # An init container asking for a card of the plugin is refused at admission, saying so,
    # and takes no card from the pod admitted after it.
    with_init = _pod("with-init", namespace, {GPU: "1", MEM: "20"}, "GPU-e2e-0")
    init = {**with_init["spec"]["containers"][0], "name": "warm", "command": ["true"]}
    init["resources"] = {"limits": {"memory": "32Mi", GPU: "1"}}
    with_init["spec"]["initContainers"] = [init]
    kubectl.apply(with_init)
    reason = wait_until("with-init refused", lambda: _failed(kubectl, namespace, "with-init"), 60)
    assert "init container warm" in reason, reason
    kubectl.apply(_pod("later", namespace, {GPU: "1", MEM: "20"}, None))
    run("later")
    assert _printed(kubectl, namespace, "later")["cards"] == "GPU-e2e-0"

    # The plugin killed and started again: it registers again and, reading who holds
    # what from the kubelet, gives no card twice.
    plugin.kill()
    plugin2 = start_plugin()
    wait_until("the plugin registered again", lambda: "registered" in plugin2.log(), 60)
    kubectl.apply(_pod("too-big", namespace, {GPU: "1", MEM: "40"}, "GPU-e2e-0"))
    reason = wait_until("too-big refused", lambda: _failed(kubectl, namespace, "too-big"), 60)
    assert "units taken" in reason, reason
    kubectl.apply(_pod("fits", namespace, {GPU: "1", MEM: "30"}, "GPU-e2e-0"))
    run("fits")
    assert _printed(kubectl, namespace, "fits")["cards"] == "GPU-e2e-0"

    def card0_full() -> bool:
        z = _gpu_zones(kubectl, node)["GPU-e2e-0"]
        units = sorted(int(a["requests"][MEM]) for a in z.get("allocations", []))
        if units == [20, 30, 50]:
            return True
        raise AssertionError(f"GPU-e2e-0 allocations {z.get('allocations')}")

    wait_until("GPU-e2e-0 full in the CNR", card0_full, 60, interval=1)

    # The kubelet restarted: it empties its device-plugin directory, the plugin registers
    # again, the running pods keep their cards, and with every healthy card full a new
    # share pod is refused rather than given a card twice.
    local_node.kubelet_restart()
    local_node.kubelet_healthy()
    wait_until(
        "the plugin registered with the new kubelet",
        lambda: plugin2.log().count("registered nvidia.com/gpu") >= 2,
        90,
    )
    wait_until(
        "the kubelet advertising again", lambda: _allocatable(kubectl, node).get(MEM) == "200", 90
    )
    kubectl.apply(_pod("no-room", namespace, {GPU: "1", MEM: "10"}, None))
    reason = wait_until("no-room refused", lambda: _failed(kubectl, namespace, "no-room"), 60)
    assert "0 found" in reason, reason
    run("first", "second", "whole", "later", "fits")
    assert "Traceback" not in plugin.log() + plugin2.log() + agent.log()


def test_katalyst_scheduler_chooses_the_cards_and_the_plugin_gives_them(
    kubectl: Kubectl,
    local_node: LocalNode,
    namespace: str,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    """`katalyst scheduler` reads the cards from the agent's CNR, chooses them (Katalyst's
    rule: the fullest card the share fits on), and the Binding carries its choice onto the
    pod (the scheduler may not patch pods); the device plugin then gives those cards."""
    node = local_node.name
    agent = start_agent(components, tmp_path, node, config=_config(local_node))
    plugin = start_device_plugin(components, tmp_path, node)

    def free_cards() -> bool:
        alloc = _allocatable(kubectl, node)
        zones = _gpu_zones(kubectl, node)
        held = {n: z.get("allocations") for n, z in zones.items() if z.get("allocations")}
        if alloc.get(MEM) == "300" and len(zones) == 3 and not held:
            return True
        raise AssertionError(f"allocatable {alloc}; cards held {held}; {plugin.log()[-500:]}")

    # (the previous test's pods may still be going with their namespace)
    wait_until("three free cards advertised and in the CNR", free_cards, 120, interval=2)
    scheduler = components(
        "scheduler",
        "scheduler",
        "--config",
        str(REPO / "examples" / "scheduler" / "katalyst-scheduler-gpu.yaml"),
        "--kubeconfig",
        component_kubeconfig("scheduler"),
    )
    pods = {"a": "40", "b": "50", "c": "70"}
    for name, units in pods.items():
        obj = _pod(name, namespace, {GPU: "1", MEM: units}, None)
        obj["spec"]["schedulerName"] = "katalyst-scheduler"
        kubectl.apply(obj)
        # one at a time: each choice reads the previous pod's card as taken
        try:
            wait_until(f"{name} Running", lambda n=name: running_pods(kubectl, namespace, [n]), 120)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nscheduler:\n{scheduler.log()[-1500:]}\nplugin:\n{plugin.log()[-1500:]}"
            ) from None
    chosen = {}
    for name in pods:
        ann = kubectl.json("get", "pod", name, "-n", namespace)["metadata"]["annotations"]
        chosen[name] = ann[SEL]
        assert "policy katalyst" in ann[names.GPU_SELECTION_REASON_ANNOTATION]
        assert _printed(kubectl, namespace, name)["cards"] == chosen[name]
    # a (40) and b (50) share one card, the fullest that fits; c (70) needs another
    assert chosen["a"] == chosen["b"] != chosen["c"], chosen
    for name, units in pods.items():
        assert _printed(kubectl, namespace, name)["limit"] == f"{16384 * int(units) // 100}m"

    # `katalyst explain pod` says which card and why, and that the CNR reports the pod on it
    def explained() -> dict[str, Any]:
        gpu: dict[str, Any] = explain_pod_json(kubectl, namespace, "a")["gpu"]
        if [c["id"] for c in gpu["cards"] if c["reports_this_pod"]] == [chosen["a"]]:
            return gpu
        raise AssertionError(f"explain pod a: {gpu}")

    gpu = wait_until("explain pod a", explained, 60, interval=2)
    assert gpu["selection"] == [chosen["a"]] and "policy katalyst" in gpu["why"]

    # the spread profile (tenants apart): two share pods that katalyst packs go to two cards
    kubectl.run("delete", "pod", "-n", namespace, *pods, "--wait=true", timeout=120)
    wait_until("the cards free again", free_cards, 120, interval=2)
    for name in ("d", "e"):
        obj = _pod(name, namespace, {GPU: "1", MEM: "40"}, None)
        obj["spec"]["schedulerName"] = "katalyst-gpu-spread"
        kubectl.apply(obj)
        wait_until(f"{name} Running", lambda n=name: running_pods(kubectl, namespace, [n]), 120)
        ann = kubectl.json("get", "pod", name, "-n", namespace)["metadata"]["annotations"]
        chosen[name] = ann[SEL]
        assert "policy spread" in ann[names.GPU_SELECTION_REASON_ANNOTATION]
        assert _printed(kubectl, namespace, name)["cards"] == chosen[name]
    assert chosen["d"] != chosen["e"], chosen
    assert "Traceback" not in scheduler.log() + plugin.log() + agent.log()
