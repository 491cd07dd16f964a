"""The cluster options every long-running command shares, and the one call that turns them
into a `Cluster`. With `Annotated` parameters:

    def scheduler(
        kubeconfig: KubeconfigArg = None,
        in_cluster: InClusterArg = False,
        context: ContextArg = None,
    ) -> None:
        cluster = cluster_from_options(kubeconfig, in_cluster, context)

or, in the `name: T = typer.Option(...)` style, `kubeconfig: Path | None = KUBECONFIG_OPTION`
(and `IN_CLUSTER_OPTION`, `CONTEXT_OPTION`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pykatalyst.cli.output import print_message
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.connect import ConnectError, connect
from pykatalyst.cluster.protocol import Cluster

_KUBECONFIG_HELP = (
    "Run against the cluster of this kubeconfig file (its current context) instead of the "
    "embedded in-memory cluster."
)
_IN_CLUSTER_HELP = "Run against the cluster this pod runs in, with its service account."
_CONTEXT_HELP = "The kubeconfig context to use instead of the current one."

KubeconfigArg = Annotated[
    Path | None, typer.Option("--kubeconfig", metavar="PATH", help=_KUBECONFIG_HELP)
]
InClusterArg = Annotated[bool, typer.Option("--in-cluster", help=_IN_CLUSTER_HELP)]
ContextArg = Annotated[str | None, typer.Option("--context", help=_CONTEXT_HELP)]


KUBECONFIG_OPTION: Any = typer.Option(None, "--kubeconfig", metavar="PATH", help=_KUBECONFIG_HELP)
IN_CLUSTER_OPTION: Any = typer.Option(False, "--in-cluster", help=_IN_CLUSTER_HELP)
CONTEXT_OPTION: Any = typer.Option(None, "--context", help=_CONTEXT_HELP)


def cluster_from_options(
    kubeconfig: Path | None,
    in_cluster: bool,
    context: str | None = None,
    clock: Clock | None = None,
    qps: float | None = None,
    burst: int | None = None,
) -> Cluster:
    """The command's cluster; a bad option combination or kubeconfig ends the command with a
    message and exit code 2. `qps`/`burst`: the client's rate limit (default client-go's)."""
    try:
        return connect(kubeconfig, in_cluster, context=context, clock=clock, qps=qps, burst=burst)
    except ConnectError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
