"""Pick the cluster a command talks to: a real one through a kubeconfig or the pod's service
account, or the embedded in-memory one.

`find_cluster` resolves the command-line options the way kubectl and controller-runtime do
(`--kubeconfig`, then `$KUBECONFIG`, then the pod's service account, then
`~/.kube/config`); the embedded cluster only when asked for by name. `connect` opens a real
cluster; the embedded one is started by the command that runs it (`cli/kubeopts.py`), as
this door never imports the API server."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pykatalyst.cluster.protocol import Cluster
from pykatalyst.extras import MissingExtra, require


class ConnectError(ValueError):
    """The cluster connection options are contradictory or point at nothing usable."""


SourceKind = Literal["kubeconfig", "in-cluster", "embedded"]


@dataclass(frozen=True, slots=True)
class ClusterSource:
    """Where a command's cluster comes from: `kind`, the kubeconfig `path` (for
    "kubeconfig"), and `origin`, the option or rule that chose it."""

    kind: SourceKind
    origin: str
    path: Path | None = None
    context: str | None = None

    @property
    def embedded(self) -> bool:
        return self.kind == "embedded"

    def describe(self) -> str:
        """One line for a command's first line of output."""
        if self.kind == "embedded":
            return (
                "the embedded in-memory cluster (--embedded): it starts empty and nothing "
                "outside this process sees it"
            )
        if self.kind == "in-cluster":
            return f"this pod's cluster, with its service account ({self.origin})"
        ctx = f", context {self.context}" if self.context else ""
        return f"the cluster of {self.path} ({self.origin}{ctx})"


NO_CLUSTER = (
    "no cluster found: no --kubeconfig, $KUBECONFIG is not set, this is not a pod "
    "(no KUBERNETES_SERVICE_HOST) and there is no ~/.kube/config; give --kubeconfig PATH"
)


def find_cluster(
    kubeconfig: str | Path | None = None,
    in_cluster: bool = False,
    *,
    context: str | None = None,
    embedded: bool = False,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> ClusterSource:
    """The cluster the options name, resolved as kubectl does: `--kubeconfig`, then the
    first existing file of `$KUBECONFIG`, then the pod's service account
    (`KUBERNETES_SERVICE_HOST`), then `~/.kube/config`. `embedded` (`--embedded`) only by
    name. ConnectError when the options contradict each other or find nothing."""
    environ = os.environ if env is None else env
    given = [
        flag
        for flag, on in (("--kubeconfig", kubeconfig is not None), ("--in-cluster", in_cluster))
        if on
    ]
    if embedded:
        if given or context is not None:
            flags = ", ".join([*given, *(["--context"] if context is not None else [])])
            raise ConnectError(f"--embedded excludes {flags}: give one way to the cluster")
        return ClusterSource("embedded", "--embedded")
    if len(given) == 2:
        raise ConnectError("--kubeconfig and --in-cluster exclude each other: give one")
    if kubeconfig is not None:
        path = Path(str(kubeconfig)).expanduser()
        return ClusterSource("kubeconfig", "--kubeconfig", path, context)
    if in_cluster:
        if context is not None:
            raise ConnectError("--context needs a kubeconfig, not --in-cluster")
        return ClusterSource("in-cluster", "--in-cluster")
    return _default_source(environ, home, context)


def _default_source(
    environ: Mapping[str, str], home: Path | None, context: str | None
) -> ClusterSource:
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        for entry in listed:
            path = Path(entry).expanduser()
            if path.is_file():
                return ClusterSource("kubeconfig", "$KUBECONFIG", path, context)
        raise ConnectError(
            f"$KUBECONFIG={environ['KUBECONFIG']}: no such file; fix it, unset it, or give "
            "--kubeconfig PATH"
        )
    if environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        return ClusterSource("in-cluster", "KUBERNETES_SERVICE_HOST is set")
    path = (home if home is not None else Path.home()) / ".kube" / "config"
    if path.is_file():
        return ClusterSource("kubeconfig", "~/.kube/config", path, context)
    raise ConnectError(NO_CLUSTER)


def open_cluster(
    source: ClusterSource,
    *,
    qps: float | None = None,
    burst: int | None = None,
) -> Cluster:
    """The real cluster `find_cluster` found (an embedded source is the caller's to start)."""
    if source.embedded:
        raise ConnectError("the embedded cluster is started by the command, not connected to")
    if source.kind == "in-cluster":
        return connect(in_cluster=True, qps=qps, burst=burst)
    return connect(source.path, context=source.context, qps=qps, burst=burst)


def connect(
    kubeconfig: str | Path | None = None,
    in_cluster: bool = False,
    *,
    context: str | None = None,
    qps: float | None = None,
    burst: int | None = None,
) -> Cluster:
    """`kubeconfig`: a kubeconfig file (its current context, or `context`). `in_cluster`:
    the service account Kubernetes mounts into a pod. One of the two is needed. `qps`/`burst`
    set the client-side rate limit (default: client-go's 5/10)."""
    if kubeconfig is not None and in_cluster:
        raise ConnectError("--kubeconfig and --in-cluster exclude each other: give one")
    if context is not None and kubeconfig is None:
        raise ConnectError("--context needs --kubeconfig")
    if kubeconfig is None and not in_cluster:
        raise ConnectError("no cluster named: give --kubeconfig PATH or --in-cluster")
    try:
        require("kubernetes", "kube", "--kubeconfig/--in-cluster (a real cluster)")
    except MissingExtra as exc:
        raise ConnectError(str(exc)) from None
    from pykatalyst.cluster.kube import DEFAULT_BURST, DEFAULT_QPS, KubeCluster, KubeConfigError

    rate = DEFAULT_QPS if qps is None else qps
    limit = DEFAULT_BURST if burst is None else burst
    try:
        if in_cluster:
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise ConnectError(
                    "--in-cluster: KUBERNETES_SERVICE_HOST is not set; this process is not "
                    "running in a Kubernetes pod (use --kubeconfig PATH instead)"
                )
            return KubeCluster.in_cluster(qps=rate, burst=limit)
        path = Path(str(kubeconfig)).expanduser()
        if not path.is_file():
            raise ConnectError(f"--kubeconfig {path}: no such file")
        return KubeCluster.from_kubeconfig(str(path), context, qps=rate, burst=limit)
    except KubeConfigError as exc:
        raise ConnectError(str(exc)) from None
