"""`katalyst dra-plugin`: the kubelet DRA plugin of the devices the agent publishes as
ResourceSlices (docs/devices.md "DRA")."""

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
from pykatalyst.agent.dra.plugin import Checkpoint, DraPluginServer, Preparer
from pykatalyst.agent.dra.slices import inventory
from pykatalyst.agent.gpu import device_source
from pykatalyst.agent.host.devices import DeviceUnavailable
from pykatalyst.agent.nic import nic_source
from pykatalyst.api import names
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.output import print_message, print_table
from pykatalyst.cluster.clock import RealClock
from pykatalyst.extras import MissingExtra, require


def dra_plugin(
    node: Annotated[
        str | None, typer.Option("--node", help="This node's name (default: the host name).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="The agent's configuration (YAML): devices.dra."),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Read the devices once, print those the agent publishes as ResourceSlices "
            "and where the plugin would register, and exit: serves nothing.",
        ),
    ] = False,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Register with the kubelet as the DRA driver dra.katalyst.kubewharf.io and prepare
    the claims the scheduler allocated on this node's devices, until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    node = node or socket.gethostname().lower()
    try:
        cfg = load_config(config)
        require("grpc", "node", "the DRA plugin")
    except (ConfigError, MissingExtra) as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
    dra = cfg.devices.dra
    if not dra.enabled:
        print_message(
            "error: devices.dra.enabled is false: the agent publishes no ResourceSlices, "
            "so there is nothing to prepare",
            stderr=True,
        )
        raise typer.Exit(2)
    if once:
        _report(node, cfg.devices, config)
        return
    cluster, _ = daemon_cluster(
        "dra-plugin", kubeconfig, in_cluster, context, False, RealClock(), embeddable=False
    )
    checkpoint = Checkpoint(Path(dra.plugin_dir) / names.DRA_DRIVER / "checkpoint.json")
    server = DraPluginServer(Preparer(node, cluster, checkpoint), dra.plugin_dir, dra.registry_dir)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.run(stop, dra.poll_s)


def _report(node: str, devices: DevicesConfig, config: Path | None) -> None:
    """`--once`: the pool the agent publishes for this node, and the plugin's sockets."""
    gpus = None if devices.source == "none" else device_source(devices, config)
    nics = None if devices.nic.source == "none" else nic_source(devices, config)
    try:
        cards = () if gpus is None else gpus.gpus()
        ifaces = () if nics is None else nics.nics()
    except DeviceUnavailable as exc:
        print_message(f"error: the devices cannot be read: {exc}", stderr=True)
        raise typer.Exit(1) from None
    dra = devices.dra
    pool = inventory(cards, ifaces, dra.pcie_roots, vfs=dra.vfs)
    rows = [
        [
            d.name,
            d.type,
            d.id,
            str(d.attributes.get("numa", "-")),
            str(d.attributes.get(names.DRA_ATTR_PCIE_ROOT, "-")),
        ]
        for d in pool
    ]
    print_table(
        f"pool {node} of {names.DRA_DRIVER}", ["device", "type", "id", "NUMA", "pcieRoot"], rows
    )
    registry = Path(dra.registry_dir)
    where = (
        "is there" if registry.is_dir() else "is missing: is the kubelet's --root-dir elsewhere?"
    )
    print_message(
        f"the kubelet's plugin registration directory {registry} {where}; --once served nothing"
    )


def register(app: typer.Typer) -> None:
    app.command("dra-plugin")(dra_plugin)
