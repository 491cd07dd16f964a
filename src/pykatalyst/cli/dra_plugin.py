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
from pykatalyst.agent.dra.plugin import Checkpoint, DraPluginServer, Preparer
from pykatalyst.api import names
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.output import print_message
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


def register(app: typer.Typer) -> None:
    app.command("dra-plugin")(dra_plugin)
