"""What a pod asks of a node's NUMA zones, container by container, as Katalyst's
NodeResourceTopology reads it.

Katalyst does not judge a pod's total against a zone. Under its `dynamic` policy only
the *main* container of a dedicated pod holds zone cpus (the container named by
`kubernetes.io/main-container-name`, else the first): its sidecars run on the main
container's cpus, and init containers get none. Under `native`, the kubelet's topology
manager places each app container on a zone of its own at container scope, and the
pod's effective request (the app containers' sum, or an init container's request when
larger) at pod scope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.quantity import QuantityError
from pykatalyst.scheduler.podinfo import amount

Request = tuple[int, int]  # cpu (milli-cores), memory (bytes)


@dataclass(frozen=True, slots=True)
class ZoneDemand:
    apps: tuple[Request, ...]  # spec.containers, in order
    inits: tuple[Request, ...]  # spec.initContainers, in order
    main: int  # index into apps of the main container (-1: no app container)
    whole_cpus: bool  # every container asks for whole cpus (Katalyst's IsRequestFullCPU)

    @property
    def main_request(self) -> Request:
        return self.apps[self.main] if self.main >= 0 else (0, 0)

    @property
    def effective(self) -> Request:
        """Katalyst's effective pod request: per resource, the larger of the app
        containers' sum and each init container's request (no overhead, sidecar init
        containers counted as init containers)."""
        cpu = sum(c for c, _ in self.apps)
        mem = sum(m for _, m in self.apps)
        for c, m in self.inits:
            cpu, mem = max(cpu, c), max(mem, m)
        return cpu, mem


def _request(container: Mapping[str, Any]) -> Request:
    reqs = (container.get("resources") or {}).get("requests") or {}
    out = []
    for res in (names.RESOURCE_CPU, names.RESOURCE_MEMORY):
        q = reqs.get(res) if isinstance(reqs, Mapping) else None
        try:
            out.append(amount(res, q) if q is not None else 0)
        except (QuantityError, ValueError, TypeError):
            out.append(0)  # the pod's problem is reported where its requests are read
    return out[0], out[1]


def _listed(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key) or []
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, Sequence) else []


def zone_demand(pod: Mapping[str, Any]) -> ZoneDemand:
    spec = pod.get("spec") or {}
    apps = _listed(spec, "containers")
    inits = _listed(spec, "initContainers")
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    wanted = ann.get(names.MAIN_CONTAINER_ANNOTATION) if isinstance(ann, Mapping) else None
    app_names = [c.get("name") for c in apps]
    # a name that matches no container falls back to the first one
    main = app_names.index(wanted) if wanted in app_names else (0 if apps else -1)
    app_req = tuple(_request(c) for c in apps)
    init_req = tuple(_request(c) for c in inits)
    whole = all(c % 1000 == 0 for c, _ in app_req + init_req)
    return ZoneDemand(app_req, init_req, main, whole)
