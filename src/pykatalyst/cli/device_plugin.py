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
from pykatalyst.agent.deviceplugin.plugin import GpuPlugin
from pykatalyst.agent.deviceplugin.proto import KUBELET_SOCKET
from pykatalyst.agent.deviceplugin.server import SOCKETS, PluginRunner
from pykatalyst.agent.gpu import device_source
from pykatalyst.agent.host.devices import DeviceUnavailable
from pykatalyst.agent.host.kubelet import PodResourcesClient
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.output import print_message, print_table
from pykatalyst.cluster.clock import RealClock
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
    scheduler chose for each pod (its gpu_selection_result), until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    node = node or socket.gethostname().lower()
    try:
        cfg = load_config(config)
        require("grpc", "node", "the device plugin")
    except (ConfigError, MissingExtra) as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
    devices = cfg.devices
    if devices.source == "none":
        print_message("error: devices.source is none: there are no cards to serve", stderr=True)
        raise typer.Exit(2)
    clock = RealClock()
    cluster, _ = daemon_cluster(
        "device-plugin", kubeconfig, in_cluster, context, False, clock, embeddable=False
    )
    plugin = GpuPlugin(
        node,
        cluster,
        device_source(devices, config),
        PodResourcesClient(cfg.kubelet.pod_resources_socket, cfg.kubelet.timeout_s),
        devices,
        clock,
        {g.id: g.device_node for g in devices.gpus if g.device_node},
    )
    if once:
        _report(plugin, Path(devices.device_plugin.socket_dir))
        return
    runner = PluginRunner(plugin, devices.device_plugin.socket_dir, devices.device_plugin.poll_s)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner.run(stop)


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
