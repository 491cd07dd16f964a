"""The GPU device plugin: which pod the kubelet admits and which cards it gets, against a
kubelet played here as the real one behaves (ids handed out once, the plugin's preference
taken when it is complete), and over gRPC with a kubelet's Registration service."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.config_sections import DevicesConfig
from pykatalyst.agent.deviceplugin import ledger as lg
from pykatalyst.agent.deviceplugin import proto
from pykatalyst.agent.deviceplugin.plugin import GpuPlugin
from pykatalyst.agent.deviceplugin.server import SOCKETS, PluginRunner
from pykatalyst.agent.gpu import card_of, card_use, holds_from
from pykatalyst.agent.host.devices import GpuDevice, SyntheticDevices
from pykatalyst.agent.host.kubelet import DeviceGrant, KubeletDevices
from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from tests.agent.inmemory_host import node_json

GPU = names.RESOURCE_NVIDIA_GPU
MEM = names.RESOURCE_GPU_MEMORY
SEL = names.GPU_SELECTION_RESULT_ANNOTATION


class Kubelet:
    """The kubelet's device manager as far as the plugin can tell: it hands each id out
    once, asks the plugin's preference and takes it when complete, calls Allocate per
    resource in no fixed order, and lists what containers hold in pod-resources."""

    def __init__(self, plugin: GpuPlugin, rng: random.Random) -> None:
        self.plugin = plugin
        self.rng = rng
        self.containers: list[DeviceGrant] = []
        self.envs: dict[tuple[str, str], dict[str, str]] = {}

    def device_assignments(self, resources: frozenset[str]) -> KubeletDevices:
        return KubeletDevices(tuple(self.containers))

    def _free(self, resource: str) -> list[str]:
        used = {d for g in self.containers if g.resource == resource for d in g.device_ids}
        return [a.id for a in self.plugin.advertised(resource) if a.healthy and a.id not in used]

    def admit(self, ns: str, name: str, asks: list[lg.GpuAsk]) -> bool:
        """Admit the pod; False (nothing held) when the plugin refused an Allocate."""
        got: list[DeviceGrant] = []
        for ask in asks:
            resources = sorted(ask.resources())
            self.rng.shuffle(resources)
            for r in resources:
                size = ask.size(r)
                free = self._free(r)
                pref = self.plugin.preferred(r, free, size)
                ids = pref if len(pref) == size else free[:size]
                try:
                    answer = self.plugin.allocate(r, ids)
                except lg.AllocationRefused:
                    return False
                self.envs[(f"{ns}/{name}", ask.container)] = answer.envs
                grant = DeviceGrant(r, tuple(ids), (), ns, name, ask.container)
                got.append(grant)
                self.containers.append(grant)
        return True


def pod(name: str, asks: list[lg.GpuAsk], selection: list[str] | None, t: float) -> dict[str, Any]:
    containers = []
    for a in asks:
        limits = {GPU: str(a.cards)}
        if a.units:
            limits[MEM] = str(a.units)
        containers.append({"name": a.container, "image": "x", "resources": {"limits": limits}})
    ann = {SEL: ",".join(selection)} if selection is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "annotations": ann},
        "spec": {"nodeName": "n1", "containers": containers},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(t)}
            ],
        },
    }


def setup(cards: list[GpuDevice], seed: int = 0) -> tuple[MemoryCluster, GpuPlugin, Kubelet]:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock)
    cluster.create(names.NODE, node_json("n1"))
    cluster.create(names.NAMESPACE, {"metadata": {"name": "ns"}})
    cfg = DevicesConfig.model_validate(
        {"source": "synthetic", "device_plugin": {"shares_per_gpu": 4}}
    )
    plugin = GpuPlugin("n1", cluster, SyntheticDevices(lambda: cards), None, cfg, clock)
    kubelet = Kubelet(plugin, random.Random(seed))
    plugin.kubelet = kubelet
    plugin.poll()
    return cluster, plugin, kubelet


CARDS = [
    GpuDevice(f"g{i}", i // 2, f"sw{i // 2}", "A100", minor=i, memory_mib=1000) for i in range(4)
]


def test_a_share_pod_gets_the_card_the_scheduler_chose_and_its_environment_says_so() -> None:
    cluster, plugin, kubelet = setup(CARDS)
    cluster.create(names.POD, pod("a", [lg.GpuAsk("main", 1, 30)], ["g2"], 1), "ns")
    assert kubelet.admit("ns", "a", [lg.GpuAsk("main", 1, 30)])
    env = kubelet.envs[("ns/a", "main")]
    assert env[names.ENV_NVIDIA_VISIBLE_DEVICES] == "g2"
    assert env[names.ENV_CUDA_DEVICE_MEMORY_LIMIT] == "300m"
    held = holds_from(kubelet.containers, 100)
    assert [(h.card, h.units) for h in held] == [("g2", 30)]
    answer = plugin._answer(plugin.ledger.grants[next(iter(plugin.ledger.grants))], GPU)
    assert answer.devices[0] == ("/dev/nvidia2", "/dev/nvidia2")


def test_a_pod_without_selection_gets_the_fullest_card_that_fits_and_the_annotation() -> None:
    cluster, _plugin, kubelet = setup(CARDS)
    cluster.create(names.POD, pod("a", [lg.GpuAsk("c", 1, 60)], ["g1"], 1), "ns")
    assert kubelet.admit("ns", "a", [lg.GpuAsk("c", 1, 60)])
    cluster.create(names.POD, pod("b", [lg.GpuAsk("c", 1, 40)], None, 2), "ns")
    assert kubelet.admit("ns", "b", [lg.GpuAsk("c", 1, 40)])
    assert cluster.get(names.POD, "b", "ns")["metadata"]["annotations"][SEL] == "g1"
    cluster.create(names.POD, pod("w", [lg.GpuAsk("c", 2)], None, 3), "ns")
    assert kubelet.admit("ns", "w", [lg.GpuAsk("c", 2)])
    assert cluster.get(names.POD, "w", "ns")["metadata"]["annotations"][SEL] == "g0,g2"


@pytest.mark.parametrize(
    ("selection", "why"),
    [(["g9"], "no such card"), (["g0"], "unhealthy"), (["g1"], "units taken")],
)
def test_a_selection_that_does_not_fit_is_refused_saying_why(
    selection: list[str], why: str
) -> None:
    cards = [GpuDevice("g0", 0, healthy=False), GpuDevice("g1", 0), GpuDevice("g2", 0)]
    cluster, plugin, kubelet = setup(cards)
    cluster.create(names.POD, pod("a", [lg.GpuAsk("c", 1, 80)], ["g1"], 1), "ns")
    assert kubelet.admit("ns", "a", [lg.GpuAsk("c", 1, 80)])
    cluster.create(names.POD, pod("b", [lg.GpuAsk("c", 1, 50)], selection, 2), "ns")
    with pytest.raises(lg.AllocationRefused, match=why):
        plugin.allocate(GPU, ["g1::s1"] if selection == ["g1"] else [f"{selection[0]}::s0"])


def test_pods_bound_back_to_back_never_get_each_others_cards() -> None:
    cluster, _plugin, kubelet = setup(CARDS)
    asks = [lg.GpuAsk("c", 1, 50)]
    cluster.create(names.POD, pod("first", asks, ["g3"], 10), "ns")
    cluster.create(names.POD, pod("second", asks, ["g0"], 11), "ns")
    assert kubelet.admit("ns", "first", asks)
    assert kubelet.admit("ns", "second", asks)
    assert kubelet.envs[("ns/first", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES] == "g3"
    assert kubelet.envs[("ns/second", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES] == "g0"


def test_an_init_container_asking_for_gpus_is_refused_and_takes_no_other_pods_turn() -> None:
    cluster, plugin, kubelet = setup(CARDS)
    asks = [lg.GpuAsk("c", 1, 50)]
    first = pod("first", asks, ["g3"], 10)
    first["spec"]["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {GPU: "1", MEM: "50"}}}
    ]
    cluster.create(names.POD, first, "ns")
    cluster.create(names.POD, pod("second", asks, ["g0"], 11), "ns")
    # the kubelet allocates the first pod's init container first, with the same ask as
    # the second pod's container: refused, naming it, not served with the second's cards
    with pytest.raises(lg.AllocationRefused, match="init container warm"):
        plugin.allocate(GPU, ["g0::s0"])
    failed = {"status": {"phase": "Failed"}}  # the kubelet fails the pod's admission
    cluster.patch(names.POD, "first", failed, "ns", subresource="status")
    assert kubelet.admit("ns", "second", asks)
    assert kubelet.envs[("ns/second", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES] == "g0"


def test_two_pods_bound_in_one_second_are_served_in_the_order_of_their_bindings() -> None:
    """A scheduler binds two pods at once and the second's binding lands first: the kubelet,
    fed by its watch, admits that one first. Both PodScheduled times read the same second,
    and the names sort the other way; the bindings' resourceVersions tell the order."""
    cluster, _plugin, kubelet = setup(CARDS)
    first_asks = [lg.GpuAsk("c", 1, 30)]
    second_asks = [lg.GpuAsk("c", 1, 50)]
    for name, asks, card in (("first", first_asks, "g1"), ("second", second_asks, "g0")):
        obj = pod(name, asks, [card], 10)
        del obj["spec"]["nodeName"]
        cluster.create(names.POD, obj, "ns")
    cluster.bind("ns", "second", "n1")
    cluster.bind("ns", "first", "n1")
    assert kubelet.admit("ns", "second", second_asks)
    assert kubelet.admit("ns", "first", first_asks)
    assert kubelet.envs[("ns/second", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES] == "g0"
    assert kubelet.envs[("ns/first", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES] == "g1"
    held = {(g.pod, g.resource): {card_of(d) for d in g.device_ids} for g in kubelet.containers}
    assert held[("second", GPU)] == held[("second", MEM)] == {"g0"}
    assert held[("first", GPU)] == held[("first", MEM)] == {"g1"}


def test_a_restarted_plugin_reads_who_holds_what_from_the_kubelet() -> None:
    cluster, plugin, kubelet = setup(CARDS)
    cluster.create(names.POD, pod("a", [lg.GpuAsk("c", 1)], ["g0"], 1), "ns")
    assert kubelet.admit("ns", "a", [lg.GpuAsk("c", 1)])
    obj = cluster.get(names.POD, "a", "ns")
    obj["status"] = {"phase": "Running", "containerStatuses": [{"name": "c"}]}
    cluster.update_status(names.POD, obj)
    # a new plugin process: an empty ledger; the kubelet still lists pod a on g0
    again = GpuPlugin("n1", cluster, plugin.source, kubelet, plugin.cfg, plugin.clock)
    again.poll()
    kubelet.plugin = again
    cluster.create(names.POD, pod("b", [lg.GpuAsk("c", 1, 10)], ["g0"], 2), "ns")
    with pytest.raises(lg.AllocationRefused, match="whole"):
        again.allocate(GPU, ["g0::s1"])


asks_st = st.lists(
    st.tuples(st.integers(1, 2), st.sampled_from([0, 10, 25, 50, 100]), st.booleans()),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(asks_st, st.integers(0, 2**16), st.frozensets(st.integers(0, 3), max_size=1))
def test_no_card_is_ever_over_committed(
    pods: list[tuple[int, int, bool]], seed: int, sick: frozenset[int]
) -> None:
    cards = [GpuDevice(f"g{i}", i // 2, healthy=i not in sick) for i in range(4)]
    cluster, _plugin, kubelet = setup(cards, seed)
    rng = random.Random(seed)
    for i, (n, per, selected) in enumerate(pods):
        ask = lg.GpuAsk("c", n, per * n)
        selection = rng.sample([c.id for c in cards], n) if selected else None
        cluster.create(names.POD, pod(f"p{i}", [ask], selection, i), "ns")
        ok = kubelet.admit("ns", f"p{i}", [ask])
        if not ok:  # the kubelet fails the pod's admission: it no longer waits
            obj = cluster.get(names.POD, f"p{i}", "ns")
            obj["status"]["phase"] = "Failed"
            cluster.update_status(names.POD, obj)
            continue
        env = kubelet.envs[(f"ns/p{i}", "c")][names.ENV_NVIDIA_VISIBLE_DEVICES].split(",")
        if selection is not None:
            assert env == selection
        assert all(cards[int(c[1:])].healthy for c in env)
        use = card_use(holds_from(kubelet.containers, 100))
        for c, u in use.items():
            assert u.units <= 100, (c, u)
            assert not u.whole or u.holders == 1, (c, u)


def test_allocations_stay_right_when_the_kubelets_calls_interleave() -> None:
    """Both resources of a pod arrive on two servers' threads at once, while health is
    polled: the lock keeps one view, and every pod gets its own selection."""
    cluster, plugin, kubelet = setup(CARDS)
    errors: list[BaseException] = []
    for i in range(12):
        card = f"g{i % 4}"
        ask = lg.GpuAsk("c", 1, 25)
        cluster.create(names.POD, pod(f"p{i}", [ask], [card], i), "ns")
        free = {r: kubelet._free(r) for r in (GPU, MEM)}
        out: dict[str, list[str]] = {}

        def one(
            r: str,
            ask: lg.GpuAsk = ask,
            free: dict[str, list[str]] = free,
            out: dict[str, list[str]] = out,
        ) -> None:
            try:
                ids = plugin.preferred(r, free[r], ask.size(r))
                plugin.allocate(r, ids)
                out[r] = ids
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(r,)) for r in (GPU, MEM)]
        threads.append(threading.Thread(target=plugin.poll))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for r, ids in out.items():
            kubelet.containers.append(DeviceGrant(r, tuple(ids), (), "ns", f"p{i}", "c"))
            assert {card_of(d) for d in ids} == {card}
    use = card_use(holds_from(kubelet.containers, 100))
    assert {c: u.units for c, u in use.items()} == {f"g{i}": 75 for i in range(4)}


# --- gRPC ---------------------------------------------------------------------------------

API_PROTO = Path("/root/go/pkg/mod/k8s.io/kubelet@v0.34.4/pkg/apis/deviceplugin/v1beta1/api.proto")


def test_field_numbers_are_those_of_the_kubelets_device_plugin_api() -> None:
    if not API_PROTO.exists():
        pytest.skip(f"{API_PROTO} is not on this machine (the Go module cache of k8s-build)")
    text = API_PROTO.read_text()
    field = r"^\s*(?:repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*(\d+);"
    for message, fields in proto.MESSAGES.items():
        body = re.search(rf"message {message} {{(.*?)\n}}", text, re.S)
        assert body is not None, message
        declared = {m.group(1): int(m.group(2)) for m in re.finditer(field, body[1], re.M)}
        assert declared == {name: number for name, number, *_ in fields}, message


grpc = pytest.importorskip("grpc", reason="grpcio is not installed (pykatalyst[node])")


def test_registers_serves_and_registers_again_after_a_kubelet_restart(
    kubelet_registry: tuple[Path, list[Any]],
) -> None:
    path, seen = kubelet_registry
    cluster, plugin, _kubelet = setup(CARDS[:2])
    runner = PluginRunner(plugin, str(path), 0.1)
    assert runner.step() == "registered"
    assert sorted((r.resource_name, r.endpoint, r.version) for r in seen) == sorted(
        (res, sock, "v1beta1") for res, sock in SOCKETS.items()
    )
    assert all(r.options.get_preferred_allocation_available for r in seen)
    m = proto.messages()
    with grpc.insecure_channel(f"unix://{path / SOCKETS[GPU]}") as ch:
        stream = ch.unary_stream(
            f"/{proto.DEVICE_PLUGIN}/ListAndWatch",
            request_serializer=m["Empty"].SerializeToString,
            response_deserializer=m["ListAndWatchResponse"].FromString,
        )(m["Empty"]())
        first = next(stream)
        assert len(first.devices) == 2 * 4
        assert {d.topology.nodes[0].ID for d in first.devices} == {0}
        cluster.create(names.POD, pod("a", [lg.GpuAsk("c", 1, 20)], ["g1"], 1), "ns")
        req = m["AllocateRequest"]()
        req.container_requests.add(devices_ids=["g1::s0"])
        allocate = ch.unary_unary(
            f"/{proto.DEVICE_PLUGIN}/Allocate",
            request_serializer=m["AllocateRequest"].SerializeToString,
            response_deserializer=m["AllocateResponse"].FromString,
        )
        resp = allocate(req)
        assert resp.container_responses[0].envs[names.ENV_NVIDIA_VISIBLE_DEVICES] == "g1"
        assert resp.container_responses[0].devices[0].container_path == "/dev/nvidia1"
        bad = m["AllocateRequest"]()
        bad.container_requests.add(devices_ids=["g0::s0", "g1::s1", "g1::s2"])
        with pytest.raises(grpc.RpcError) as err:
            allocate(bad)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        stream.cancel()
    assert runner.step() == "serving"
    (path / SOCKETS[GPU]).unlink()  # what a restarting kubelet does to the directory
    assert runner.step() == "registered"
    assert runner.registrations == 2 and len(seen) == 4
    stop = threading.Event()
    stop.set()
    runner.run(stop)
    assert not (path / SOCKETS[GPU]).exists()
