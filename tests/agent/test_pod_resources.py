"""The pod-resources client against a gRPC server on a unix socket, as the kubelet serves it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.agent.host.kubelet import (
    MESSAGES,
    SERVICE,
    ContainerCpus,
    KubeletUnavailable,
    PodResourcesClient,
    messages,
)
from pykatalyst.topology.cpuset import CPUSet

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (pykatalyst[node])")

API_PROTO = Path("/root/go/pkg/mod/k8s.io/kubelet@v0.34.4/pkg/apis/podresources/v1/api.proto")


def test_field_numbers_are_those_of_the_kubelets_api_proto() -> None:
    if not API_PROTO.exists():
        pytest.skip(f"{API_PROTO} is not on this machine")
    text = API_PROTO.read_text()
    for message, fields in MESSAGES.items():
        body = re.search(rf"message {message} {{(.*?)\n}}", text, re.S)
        assert body is not None, message
        declared = dict(
            (m.group(2), int(m.group(3)))
            for m in re.finditer(r"^\s*(repeated\s+)?[\w.]+\s+(\w+)\s*=\s*(\d+);", body[1], re.M)
        )
        for name, number, *_ in fields:
            assert declared.get(name) == number, (message, name)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A PodResourcesLister on `<tmp>/kubelet.sock` answering with `reply`."""
    msgs = messages()
    reply: dict[str, Any] = {"pods": [], "allocatable": [0, 1]}

    def list_(request: Any, context: Any) -> Any:
        resp = msgs["ListPodResourcesResponse"]()
        for ns, name, containers in reply["pods"]:
            pod = resp.pod_resources.add(name=name, namespace=ns)
            for cname, ids in containers:
                pod.containers.add(name=cname, cpu_ids=ids)
        return resp

    def alloc(request: Any, context: Any) -> Any:
        return msgs["AllocatableResourcesResponse"](cpu_ids=reply["allocatable"])

    def handler(fn: Any, req: str, resp: str) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=msgs[req].FromString,
            response_serializer=msgs[resp].SerializeToString,
        )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "List": handler(list_, "ListPodResourcesRequest", "ListPodResourcesResponse"),
                    "GetAllocatableResources": handler(
                        alloc, "AllocatableResourcesRequest", "AllocatableResourcesResponse"
                    ),
                },
            ),
        )
    )
    sock = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield str(sock), reply
    finally:
        server.stop(None)


def test_the_client_reads_exclusive_cpus_and_allocatable_cpus(
    kubelet: tuple[str, dict[str, Any]],
) -> None:
    sock, reply = kubelet
    reply["pods"] = [
        ("default", "pinned", [("app", [3, 1]), ("sidecar", [])]),
        ("kube-system", "dns", [("coredns", [])]),
    ]
    reply["allocatable"] = [1, 2, 3]
    client = PodResourcesClient(sock, timeout_s=5)
    try:
        got = client.cpu_assignments()
    finally:
        client.close()
    assert got.containers == (ContainerCpus("default", "pinned", "app", CPUSet.of([1, 3])),)
    assert got.exclusive == CPUSet.of([1, 3]) and got.allocatable == CPUSet.of([1, 2, 3])


def test_fields_the_agent_does_not_read_are_skipped() -> None:
    # A reply with a device on the container (field 2), as a kubelet with device plugins
    # sends it: ContainerResources{name=1: "app", devices=2: {...}, cpu_ids=3: [5]}.
    devices = b"\x0a\x03gpu"  # ContainerDevices.resource_name = "gpu"
    container = b"\x0a\x03app" + b"\x12" + bytes([len(devices)]) + devices + b"\x1a\x01\x05"
    got = messages()["ContainerResources"].FromString(container)
    assert got.name == "app" and list(got.cpu_ids) == [5]


def test_no_socket_is_unavailable_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(KubeletUnavailable, match=r"no pod-resources socket at .*none\.sock"):
        PodResourcesClient(str(tmp_path / "none.sock")).cpu_assignments()


def test_a_dead_socket_is_unavailable(tmp_path: Path) -> None:
    sock = tmp_path / "dead.sock"
    sock.write_text("")
    with pytest.raises(KubeletUnavailable, match="pod-resources List"):
        PodResourcesClient(str(sock), timeout_s=0.5).cpu_assignments()


def test_without_grpc_the_client_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, kubelet: tuple[str, dict[str, Any]]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "grpc", None)
    with pytest.raises(KubeletUnavailable, match=r"pip install 'pykatalyst\[node\]'"):
        PodResourcesClient(kubelet[0]).cpu_assignments()
