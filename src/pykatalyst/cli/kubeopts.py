"""The cluster options every command that talks to a cluster shares, and the calls that turn
them into a `Cluster`. A daemon takes the four (with `Annotated` parameters):

    def scheduler(
        kubeconfig: KubeconfigArg = None,
        in_cluster: InClusterArg = False,
        context: ContextArg = None,
        embedded: EmbeddedArg = False,
    ) -> None:
        cluster, source = daemon_cluster("scheduler", kubeconfig, in_cluster, context, embedded)

(or, in the `name: T = typer.Option(...)` style, `KUBECONFIG_OPTION`, `IN_CLUSTER_OPTION`,
`CONTEXT_OPTION`, `EMBEDDED_OPTION`). The cluster is found as kubectl finds it
(`cluster.connect.find_cluster`); the embedded in-memory cluster only with `--embedded`, and
the daemon's first line says which cluster it runs against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pykatalyst.cli.output import print_message
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.cluster.connect import ClusterSource, ConnectError, find_cluster, open_cluster
from pykatalyst.cluster.protocol import Cluster

_KUBECONFIG_HELP = (
    "The cluster of this kubeconfig file (its current context). Default, as kubectl: the "
    "first file of $KUBECONFIG, then this pod's service account, then ~/.kube/config."
)
_IN_CLUSTER_HELP = "The cluster this pod runs in, with its service account."
_CONTEXT_HELP = "The kubeconfig context to use instead of the current one."
_EMBEDDED_HELP = (
    "Run against an embedded in-memory cluster that starts empty (trying things out, "
    "tests), not a real one."
)

KubeconfigArg = Annotated[
    Path | None, typer.Option("--kubeconfig", metavar="PATH", help=_KUBECONFIG_HELP)
]
InClusterArg = Annotated[bool, typer.Option("--in-cluster", help=_IN_CLUSTER_HELP)]
ContextArg = Annotated[str | None, typer.Option("--context", help=_CONTEXT_HELP)]
EmbeddedArg = Annotated[bool, typer.Option("--embedded", help=_EMBEDDED_HELP)]


KUBECONFIG_OPTION: Any = typer.Option(None, "--kubeconfig", metavar="PATH", help=_KUBECONFIG_HELP)
IN_CLUSTER_OPTION: Any = typer.Option(False, "--in-cluster", help=_IN_CLUSTER_HELP)
CONTEXT_OPTION: Any = typer.Option(None, "--context", help=_CONTEXT_HELP)
EMBEDDED_OPTION: Any = typer.Option(False, "--embedded", help=_EMBEDDED_HELP)


def daemon_cluster(
    command: str,
    kubeconfig: Path | None,
    in_cluster: bool,
    context: str | None,
    embedded: bool,
    clock: Clock | None = None,
    *,
    qps: float | None = None,
    burst: int | None = None,
    stderr: bool = True,
    embeddable: bool = True,
) -> tuple[Cluster, ClusterSource]:
    """A daemon's cluster, found as kubectl finds it, announced in one line ("katalyst
    COMMAND: cluster: ..."); contradicting options or no cluster end the command (exit 2).
    `embeddable`: the command takes `--embedded` (the error then mentions it)."""
    try:
        source = find_cluster(kubeconfig, in_cluster, context=context, embedded=embedded)
        print_message(f"katalyst {command}: cluster: {source.describe()}", stderr=stderr)
        return _open(source, clock, qps, burst), source
    except ConnectError as exc:
        hint = (
            " (or --embedded: an empty in-memory cluster)"
            if embeddable and "--embedded" not in str(exc)
            else ""
        )
        print_message(f"error: {exc}{hint}", stderr=True)
        raise typer.Exit(2) from None


def cluster_from_options(
    kubeconfig: Path | None,
    in_cluster: bool,
    context: str | None = None,
    clock: Clock | None = None,
    qps: float | None = None,
    burst: int | None = None,
) -> Cluster:
    """The cluster of a command that reads or changes a real one (explain), found as kubectl
    finds it; contradicting options or no cluster end the command with a message (exit 2).
    `qps`/`burst`: the client's rate limit (default client-go's)."""
    try:
        source = find_cluster(kubeconfig, in_cluster, context=context)
        return _open(source, clock, qps, burst)
    except ConnectError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None


def _open(
    source: ClusterSource, clock: Clock | None, qps: float | None, burst: int | None
) -> Cluster:
    """The cluster `source` names: the embedded one starts here, empty and stamped by `clock`
    (default: the real clock); a real one is connected to with the client's rate limit."""
    if source.embedded:
        from pykatalyst.apiserver.memory import MemoryCluster

        return MemoryCluster(clock=clock if clock is not None else RealClock())
    return open_cluster(source, qps=qps, burst=burst)
