"""The kubelet DRA plugin over its real gRPC sockets, called as the 1.34 kubelet calls it:
GetInfo and NotifyRegistrationStatus on the registration socket, then
NodePrepareResources / NodeUnprepareResources of `v1.DRAPlugin` on the endpoint it named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.agent.dra import proto
from pykatalyst.agent.dra.plugin import (
    Checkpoint,
    DraPluginServer,
    PreparedDevice,
    Preparer,
    allocated_devices,
)
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (pykatalyst[node])")
DRIVER = names.DRA_DRIVER


def _claim(name: str, results: list[dict[str, Any]] | None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
    }
    if results is not None:
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


PAIR = [
    {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-gpu-0-aaaa"},
    {"request": "nic", "driver": DRIVER, "pool": "n1", "device": "nic-eth0"},
    {"request": "other", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
]


def test_only_this_drivers_devices_on_this_node_are_prepared() -> None:
    claim = _claim("c", PAIR)
    claim["metadata"]["uid"] = "u1"
    got, error = allocated_devices(claim, "u1", DRIVER, "n1")
    assert error == ""
    assert got == [
        PreparedDevice("gpu", "n1", "gpu-gpu-0-aaaa"),
        PreparedDevice("nic", "n1", "nic-eth0"),
    ]
    assert allocated_devices(claim, "u2", DRIVER, "n1")[1].startswith("the claim now has uid")
    bare = _claim("c", None)
    bare["metadata"]["uid"] = "u1"
    assert allocated_devices(bare, "u1", DRIVER, "n1") == ([], "the claim is not allocated")
    bare["status"] = {"allocation": {"devices": {"results": "garbage"}}}
    assert allocated_devices(bare, "u1", DRIVER, "n1") == ([], "the claim is not allocated")
    bare["status"] = {"allocation": {"devices": {"results": ["garbage", {"driver": DRIVER}]}}}
    assert allocated_devices(bare, "u1", DRIVER, "n1") == ([], "")


def test_a_corrupt_checkpoint_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text("{not json")
    assert Checkpoint(path).claims == {}
    path.write_text(json.dumps({"version": 99, "claims": {"u": {}}}))
    assert Checkpoint(path).claims == {}


class Kubelet:
    """What the kubelet does with a DRA plugin's sockets."""

    def __init__(self, registration: Path) -> None:
        self.registration = registration

    def register(self) -> Any:
        r = proto.registration()
        with grpc.insecure_channel(f"unix://{self.registration}") as ch:
            info = ch.unary_unary(
                f"/{proto.REGISTRATION_SERVICE}/GetInfo",
                request_serializer=r["InfoRequest"].SerializeToString,
                response_deserializer=r["PluginInfo"].FromString,
            )(r["InfoRequest"](), timeout=5)
            ch.unary_unary(
                f"/{proto.REGISTRATION_SERVICE}/NotifyRegistrationStatus",
                request_serializer=r["RegistrationStatus"].SerializeToString,
                response_deserializer=r["RegistrationStatusResponse"].FromString,
            )(r["RegistrationStatus"](plugin_registered=True), timeout=5)
        return info

    def call(self, endpoint: str, method: str, claims: list[tuple[str, str, str]]) -> Any:
        d = proto.dra()
        req = d[f"{method}Request"]()
        for ns, name, uid in claims:
            req.claims.add(namespace=ns, name=name, uid=uid)
        with grpc.insecure_channel(f"unix://{endpoint}") as ch:
            return ch.unary_unary(
                f"/{proto.DRA_SERVICE}/{method}",
                request_serializer=d[f"{method}Request"].SerializeToString,
                response_deserializer=d[f"{method}Response"].FromString,
            )(req, timeout=5)


@pytest.fixture
def short_dir(tmp_path: Path) -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: keep them short
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dra") as d:
        yield Path(d)


def _server(root: Path, cluster: MemoryCluster) -> DraPluginServer:
    checkpoint = Checkpoint(root / "plugins" / DRIVER / "checkpoint.json")
    return DraPluginServer(
        Preparer("n1", cluster, checkpoint), str(root / "plugins"), str(root / "registry")
    )


def test_the_kubelet_registers_prepares_and_a_restart_keeps_what_was_prepared(
    short_dir: Path,
) -> None:
    cluster = MemoryCluster()
    claim = cluster.create(names.RESOURCE_CLAIM, _claim("pair", None), "default")
    claim["status"] = {"allocation": {"devices": {"results": PAIR}}}
    cluster.update_status(names.RESOURCE_CLAIM, claim)
    uid = claim["metadata"]["uid"]
    server = _server(short_dir, cluster)
    server.start()
    try:
        kubelet = Kubelet(server.registration)
        info = kubelet.register()
        assert (info.type, info.name, list(info.supported_versions)) == (
            "DRAPlugin",
            DRIVER,
            ["v1.DRAPlugin"],
        )
        assert server.registered is True
        resp = kubelet.call(info.endpoint, "NodePrepareResources", [("default", "pair", uid)])
        got = resp.claims[uid]
        assert got.error == ""
        assert [(list(d.request_names), d.pool_name, d.device_name) for d in got.devices] == [
            (["gpu"], "n1", "gpu-gpu-0-aaaa"),
            (["nic"], "n1", "nic-eth0"),
        ]
        missing = kubelet.call(info.endpoint, "NodePrepareResources", [("default", "no", "u9")])
        assert "not found" in missing.claims["u9"].error.lower()
    finally:
        server.stop()
    # the plugin restarts; the claim is gone from the API server meanwhile
    cluster.delete(names.RESOURCE_CLAIM, "pair", "default")
    again = _server(short_dir, cluster)
    again.start()
    try:
        kubelet = Kubelet(again.registration)
        endpoint = kubelet.register().endpoint
        resp = kubelet.call(endpoint, "NodePrepareResources", [("default", "pair", uid)])
        assert [d.device_name for d in resp.claims[uid].devices] == [
            "gpu-gpu-0-aaaa",
            "nic-eth0",
        ]
        done = kubelet.call(endpoint, "NodeUnprepareResources", [("default", "pair", uid)])
        assert done.claims[uid].error == ""
        assert again.preparer.checkpoint.get(uid) is None
    finally:
        again.stop()
    assert not again.registration.exists() and not again.endpoint.exists()


def test_once_shows_the_pool_and_a_disabled_config_is_refused(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from pykatalyst.cli.main import app

    devices: dict[str, Any] = {
        "source": "synthetic",
        "gpus": [{"id": "GPU-0", "numa": 0, "pcie_switch": "0000:81:00.0"}],
        "nic": {
            "source": "synthetic",
            "interfaces": [
                {"name": "eth1", "speed_mbps": 25000, "numa": 0, "pcie_switch": "0000:81:00.0"}
            ],
        },
    }
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump({"devices": devices}))
    off = CliRunner().invoke(app, ["dra-plugin", "--config", str(cfg), "--once"])
    assert off.exit_code == 2 and "devices.dra.enabled is false" in off.output
    cfg.write_text(yaml.safe_dump({"devices": {**devices, "dra": {"enabled": True}}}))
    got = CliRunner().invoke(app, ["dra-plugin", "--node", "n1", "--config", str(cfg), "--once"])
    assert got.exit_code == 0, got.output
    assert "nic-eth1" in got.output and got.output.count("pci0000:81") == 2
