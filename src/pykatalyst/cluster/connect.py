"""Pick the cluster a long-running command talks to: a real one through a kubeconfig or the
pod's service account, or the embedded in-memory one when neither is given."""

from __future__ import annotations

import os
from pathlib import Path

from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.extras import MissingExtra, require


class ConnectError(ValueError):
    """The cluster connection options are contradictory or point at nothing usable."""


def connect(
    kubeconfig: str | Path | None = None,
    in_cluster: bool = False,
    *,
    context: str | None = None,
    clock: Clock | None = None,
    qps: float | None = None,
    burst: int | None = None,
) -> Cluster:
    """`kubeconfig`: a kubeconfig file (its current context, or `context`). `in_cluster`:
    the service account Kubernetes mounts into a pod. Neither: a fresh embedded
    `MemoryCluster` stamped by `clock` (default: the real clock). `qps`/`burst` set the
    client-side rate limit of a real connection (default: client-go's 5/10)."""
    if kubeconfig is not None and in_cluster:
        raise ConnectError("--kubeconfig and --in-cluster exclude each other: give one")
    if context is not None and kubeconfig is None:
        raise ConnectError("--context needs --kubeconfig")
    if kubeconfig is None and not in_cluster:
        from pykatalyst.cluster.memory import MemoryCluster

        return MemoryCluster(clock=clock if clock is not None else RealClock())
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
