"""`katalyst device-plugin`: serve this node's cards to the kubelet as Katalyst's GPU-share
resources (docs/devices.md)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from pykatalyst.agent.config import ConfigError, load_config
from pykatalyst.agent.config_sections import DevicesConfig
from pykatalyst.agent.deviceplugin.plugin import GpuPlugin
from pykatalyst.agent.deviceplugin.proto import KUBELET_SOCKET
from pykatalyst.agent.deviceplugin.server import SOCKETS, SRIOV_SOCKETS, PluginRunner, Served
from pykatalyst.agent.deviceplugin.sriov import SriovPlugin
from pykatalyst.agent.gpu import device_source
from pykatalyst.agent.host.devices import DeviceUnavailable
from pykatalyst.agent.host.kubelet import PodResourcesClient
from pykatalyst.agent.nic import nic_source
from pykatalyst.api.names import RESOURCE_SRIOV_NIC as SRIOV_NIC
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.output import print_message, print_table
from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.extras import MissingExtra, require


def device_plugin(
    node: Annotated[
        str | None, typer.Option("--node", help="This node's name (default: the host name).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="The agent's configuration (YAML): its devices section."),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Read the cards once, print what would be advertised to the kubelet, and "
            "exit: registers and serves nothing.",
        ),
    ] = False,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Serve the node's cards to the kubelet: nvidia.com/gpu and gpu_memory, the cards the
    scheduler chose for each pod (its gpu_selection_result); and its SR-IOV VFs as sriov_nic
    (the VF in each pod's sriov_vf_result), until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    node = node or socket.gethostname().lower()
    try:
        cfg = load_config(config)
        require("grpc", "node", "the device plugin")
    except (ConfigError, MissingExtra) as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
    devices = cfg.devices
    if devices.source == "none" and devices.nic.source == "none":
        print_message(
            "error: devices.source and devices.nic.source are none: there are no cards and "
            "no SR-IOV VFs to serve",
            stderr=True,
        )
        raise typer.Exit(2)
    clock = RealClock()
    cluster, _ = daemon_cluster(
        "device-plugin", kubeconfig, in_cluster, context, False, clock, embeddable=False
    )
    kubelet = PodResourcesClient(cfg.kubelet.pod_resources_socket, cfg.kubelet.timeout_s)
    gpus, vfs = _plugins(node, cluster, kubelet, devices, config, clock)
    if once:
        if gpus is not None:
            _report(gpus, Path(devices.device_plugin.socket_dir))
        if vfs is not None:
            _report_vfs(vfs)
        return
    runners = [] if gpus is None else [_runner(gpus, devices, SOCKETS)]
    if vfs is not None:
        runners.append(_runner(vfs, devices, SRIOV_SOCKETS))
    _serve(runners)


def _plugins(
    node: str,
    cluster: Cluster,
    kubelet: PodResourcesClient,
    devices: DevicesConfig,
    config: Path | None,
    clock: RealClock,
) -> tuple[GpuPlugin | None, SriovPlugin | None]:
    """The cards' plugin (devices.source set) and the VFs' (devices.nic.source set)."""
    gpus = vfs = None
    if devices.source != "none":
        gpus = GpuPlugin(
            node,
            cluster,
            device_source(devices, config),
            kubelet,
            devices,
            clock,
            {g.id: g.device_node for g in devices.gpus if g.device_node},
        )
    if devices.nic.source != "none":
        vfs = SriovPlugin(
            node,
            cluster,
            nic_source(devices, config),
            kubelet,
            devices.nic,
            clock,
            devices.device_plugin.pending_timeout_s,
        )
    return gpus, vfs


def _runner(plugin: Served, devices: DevicesConfig, sockets: dict[str, str]) -> PluginRunner:
    dp = devices.device_plugin
    return PluginRunner(plugin, dp.socket_dir, dp.poll_s, sockets)


def _serve(runners: list[PluginRunner]) -> None:
    """Run every runner until SIGTERM/SIGINT (the first in this thread)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in runners[1:]]
    for t in threads:
        t.start()
    runners[0].run(stop)
    for t in threads:
        t.join(10)


def _report_vfs(plugin: SriovPlugin) -> None:
    """`--once`: the VFs as read now and how many the kubelet would be offered."""
    try:
        plugin.load()
    except DeviceUnavailable as exc:
        print_message(f"error: the NICs cannot be read: {exc}", stderr=True)
        raise typer.Exit(1) from None
    rows = [
        [
            vf.rep_name,
            nic.name,
            str(vf.index),
            vf.pci_address,
            "yes" if vf.rdma else "no",
            "-" if vf.queue_count < 0 else str(vf.queue_count),
        ]
        for nic in plugin.nics
        for vf in nic.vfs
    ]
    print_table(
        f"SR-IOV VFs of {plugin.node}", ["VF", "PF", "index", "PCI", "RDMA", "queues"], rows
    )
    ads = plugin.advertised(SRIOV_NIC)
    healthy = sum(a.healthy for a in ads)
    print_message(f"{SRIOV_NIC}: {len(ads)} ids ({healthy} healthy)")


def _report(plugin: GpuPlugin, socket_dir: Path) -> None:
    """`--once`: the cards as read now, the ids each resource would advertise, and whether
    the kubelet is there to register with."""
    try:
        plugin.load()
    except DeviceUnavailable as exc:
        print_message(f"error: the cards cannot be read: {exc}", stderr=True)
        raise typer.Exit(1) from None
    ids = {r: plugin.advertised(r) for r in SOCKETS}
    rows = [
        [
            card.id,
            "yes" if card.healthy else "no",
            "-" if card.numa < 0 else str(card.numa),
            card.model or "-",
            "-" if card.memory_mib is None else f"{card.memory_mib} MiB",
        ]
        for card in plugin.cards
    ]
    print_table(f"cards of {plugin.node}", ["card", "healthy", "NUMA", "model", "memory"], rows)
    for resource, advertised in ids.items():
        healthy = sum(a.healthy for a in advertised)
        print_message(f"{resource}: {len(advertised)} ids ({healthy} healthy)")
    kubelet = socket_dir / KUBELET_SOCKET
    where = (
        f"the kubelet's {kubelet} is there: serving would register with it"
        if kubelet.exists()
        else f"no {kubelet}: serving would wait for the kubelet"
    )
    print_message(f"{where}; --once registered and served nothing")


def register(app: typer.Typer) -> None:
    app.command("device-plugin")(device_plugin)
