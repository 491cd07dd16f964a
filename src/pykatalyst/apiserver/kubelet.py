"""A stand-in for the kubelets a virtual cluster does not have.

On a real node the kubelet ends a pod's graceful deletion: once the containers stopped,
or the grace period ran out, it deletes the pod with a grace period of 0 and the API
server removes it. Without kubelets (the simulator's cluster, the embedded API server of
`katalyst apiserver` and of tests) nothing would ever remove a bound pod that was
deleted; `StandInKubelet` does that one part, through the `Cluster` protocol like any
other client."""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from pykatalyst.api.names import POD
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import JSON, Cluster, NotFound

_TERMINATING = "terminating"


def _terminating(pod: JSON) -> Iterable[str]:
    return (_TERMINATING,) if pod["metadata"].get("deletionTimestamp") else ()


class StandInKubelet:
    """Removes terminating pods whose grace period has ended. Pods with finalizers left
    stay until those are removed, as on a real cluster."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock
        self._pods = Informer(cluster, POD, indexers={_TERMINATING: _terminating})

    def finish_deletions(self, now: float | None = None) -> builtins.list[tuple[str, str]]:
        """Delete (grace 0) every terminating pod whose deletionTimestamp has come;
        returns the (namespace, name) of those that are gone."""
        t = self.clock.now() if now is None else now
        self._pods.sync()
        due = sorted(
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in self._pods.by_index(_TERMINATING, _TERMINATING)
            if parse_rfc3339(p["metadata"]["deletionTimestamp"]) <= t
        )
        done = []
        for ns, name in due:
            try:
                left = self.cluster.delete(POD, name, ns, grace_period_seconds=0)
            except NotFound:
                continue
            if left is None:
                done.append((ns, name))
        return done
