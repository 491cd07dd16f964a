"""Publishing what the agent found: the node's CustomNodeResource and Node status.

The CNR carries the reclaimed capacity (`status.resources.allocatable/capacity`), the
per-NUMA topology zones (Socket -> Numa, with allocatable cpu/memory/reclaimed figures and
the allocations of NUMA-bound pods), the AgentReady heartbeat condition and, in
annotations, the terms behind each figure and the cpu pools with the cpuset of each pod.
The Node's status gets the same reclaimed figures as extended resources, so that even the
default kube-scheduler can place reclaimed pods.

Writes happen only when the content changes, except the heartbeat, which is refreshed
every period: a controller that stops seeing it treats the agent as gone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.config import ReporterConfig
from pykatalyst.api import names
from pykatalyst.api.crds import new_cnr
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.protocol import ApiError, Cluster, NotFound
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

NODE_REPUBLISH_PERIOD_S = 300.0


@dataclass(frozen=True, slots=True)
class NumaAllocation:
    """A NUMA-bound pod's share of one NUMA node."""

    consumer: str  # namespace/name/uid
    numa: int
    cpus: int
    memory: int


@dataclass(frozen=True, slots=True)
class PodCpus:
    """Where one pod's containers run, as the agent set it: its pool and its cpus."""

    pod: str  # namespace/name
    uid: str
    pool: str
    cpuset: CPUSet
    ramping_up: bool = False
    note: str = ""


@dataclass(frozen=True, slots=True)
class ReportInput:
    topology: CPUTopology
    reserve: CPUSet
    cpu_cores: float | None  # None: nothing to publish yet (window filling)
    memory_bytes: float | None
    cpu_per_numa: Mapping[int, float] = field(default_factory=dict)
    memory_per_numa: Mapping[int, float] = field(default_factory=dict)
    allocations: Sequence[NumaAllocation] = ()
    terms: Mapping[str, Any] = field(default_factory=dict)
    pools: Mapping[str, CPUSet] = field(default_factory=dict)
    pod_cpus: Sequence[PodCpus] = ()


def pools_annotation(pools: Mapping[str, CPUSet], pods: Sequence[PodCpus]) -> str:
    """The CPU_POOLS_ANNOTATION value: each pool's cpuset and each pod's pool and cpus.

    Katalyst's CNR schema has no field for either (its allocations carry requests only, and
    only for NUMA-bound pods), so they travel in an annotation, which every API server
    keeps as written. Nothing time-dependent goes in: it is rewritten only on change."""
    entries = []
    for p in sorted(pods, key=lambda p: (p.pod, p.uid)):
        entry: dict[str, Any] = {
            "pod": p.pod,
            "uid": p.uid,
            "pool": p.pool,
            "cpuset": str(p.cpuset),
        }
        if p.ramping_up:
            entry["ramping_up"] = True
        if p.note:
            entry["note"] = p.note
        entries.append(entry)
    body = {"pools": {name: str(cpus) for name, cpus in sorted(pools.items())}, "pods": entries}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def milli_cpu(cores: float) -> int:
    return max(round(cores * 1000), 0)


def _cpu_q(cores: float) -> str:
    return str(Quantity.from_int(milli_cpu(cores)))


def _mem_q(value: float) -> str:
    return str(Quantity.from_bytes(max(int(value), 0)))


def build_status(inp: ReportInput, topology_policy: str) -> dict[str, Any]:
    """The CNR status the agent owns (without the heartbeat condition)."""
    status: dict[str, Any] = {"topologyPolicy": topology_policy}
    if inp.cpu_cores is not None and inp.memory_bytes is not None:
        reclaimed = {
            names.RECLAIMED_MILLICPU: _cpu_q(inp.cpu_cores),
            names.RECLAIMED_MEMORY: _mem_q(inp.memory_bytes),
        }
        status["resources"] = {"allocatable": dict(reclaimed), "capacity": dict(reclaimed)}
    topo = inp.topology
    by_numa: dict[int, list[NumaAllocation]] = {}
    for a in inp.allocations:
        by_numa.setdefault(a.numa, []).append(a)
    zones = []
    for socket in sorted(topo.sockets):
        children = []
        for numa in sorted(topo.numas_in_socket(socket)):
            cpus = topo.cpus_in_numa(numa)
            mem = topo.memory_of_numa(numa) if topo.memory_per_numa else 0
            alloc: dict[str, str] = {
                names.RESOURCE_CPU: str(len(cpus - inp.reserve)),
                names.RESOURCE_MEMORY: _mem_q(mem),
            }
            capacity: dict[str, str] = {
                names.RESOURCE_CPU: str(len(cpus)),
                names.RESOURCE_MEMORY: _mem_q(mem),
            }
            if inp.cpu_cores is not None and inp.memory_bytes is not None:
                # As Katalyst's agent: the NUMA's reclaimed figures in both lists.
                reclaimed_numa = {
                    names.RECLAIMED_MILLICPU: _cpu_q(inp.cpu_per_numa.get(numa, 0.0)),
                    names.RECLAIMED_MEMORY: _mem_q(inp.memory_per_numa.get(numa, 0.0)),
                }
                alloc.update(reclaimed_numa)
                capacity.update(reclaimed_numa)
            zone: dict[str, Any] = {
                "type": names.ZONE_NUMA,
                "name": str(numa),
                "resources": {"allocatable": alloc, "capacity": capacity},
            }
            allocs = sorted(by_numa.get(numa, []), key=lambda a: a.consumer)
            if allocs:
                zone["allocations"] = [
                    {
                        "consumer": a.consumer,
                        "requests": {
                            names.RESOURCE_CPU: str(a.cpus),
                            names.RESOURCE_MEMORY: _mem_q(a.memory),
                        },
                    }
                    for a in allocs
                ]
            children.append(zone)
        zones.append({"type": names.ZONE_SOCKET, "name": str(socket), "children": children})
    status["topologyZone"] = zones
    return status


class Reporter:
    """Writes the CNR and the Node's reclaimed extended resources for one node."""

    def __init__(
        self,
        node_name: str,
        cluster: Cluster,
        cfg: ReporterConfig,
        topology_policy: str = names.TOPOLOGY_POLICY_NUMERIC_CONTAINER,
    ) -> None:
        self.node_name = node_name
        self.cluster = cluster
        self.cfg = cfg
        self.topology_policy = topology_policy
        self._last_status: dict[str, Any] | None = None
        self._last_heartbeat: float | None = None
        self._ready_since: str | None = None
        self._last_terms_key: tuple[int, int] | None = None
        self._last_node_figures: dict[str, str] | None = None
        self._last_node_write: float | None = None
        self._last_pools: str | None = None
        self._cnr_exists = False

    def report(self, inp: ReportInput, now: float) -> dict[str, Any]:
        """Publish if needed; returns what was written (for the plan)."""
        out: dict[str, Any] = {"cnr": "unchanged"}
        status = build_status(inp, self.topology_policy)
        heartbeat_due = (
            self._last_heartbeat is None or now - self._last_heartbeat >= self.cfg.period_s
        )
        changed = status != self._last_status
        try:
            self._ensure_cnr()
            if changed or heartbeat_due:
                if self._ready_since is None:
                    self._ready_since = rfc3339(now)
                body = dict(status)
                body["conditions"] = [
                    {
                        "type": names.CNR_CONDITION_AGENT_READY,
                        "status": "True",
                        "reason": "AgentReporting",
                        "message": f"{names.AGENT_COMPONENT} is reporting",
                        "lastHeartbeatTime": rfc3339(now),
                        "lastTransitionTime": self._ready_since,
                    }
                ]
                self.cluster.patch(
                    names.CUSTOM_NODE_RESOURCE,
                    self.node_name,
                    {"status": body},
                    subresource="status",
                )
                self._last_status = status
                self._last_heartbeat = now
                out["cnr"] = "status written" if changed else "heartbeat"
            if inp.pools:
                out["pools"] = self._publish_pools(inp)
            if inp.cpu_cores is not None and inp.memory_bytes is not None:
                key = (milli_cpu(inp.cpu_cores), int(inp.memory_bytes))
                if key != self._last_terms_key:
                    ann = {names.RECLAIMED_TERMS_ANNOTATION: json.dumps(inp.terms, sort_keys=True)}
                    self.cluster.patch(
                        names.CUSTOM_NODE_RESOURCE,
                        self.node_name,
                        {"metadata": {"annotations": ann}},
                    )
                    self._last_terms_key = key
                    out["terms"] = "written"
                if self.cfg.publish_node_extended_resources:
                    out["node"] = self._publish_node(inp.cpu_cores, inp.memory_bytes, now)
        except ApiError as exc:
            # Try again next tick from scratch: the next write must not be skipped as
            # "unchanged" because this one failed.
            self._last_status = None
            self._last_terms_key = None
            self._last_node_figures = None
            self._last_pools = None
            self._cnr_exists = False
            out["error"] = str(exc)
        return out

    def _publish_pools(self, inp: ReportInput) -> str:
        value = pools_annotation(inp.pools, inp.pod_cpus)
        if value == self._last_pools:
            return "unchanged"
        self.cluster.patch(
            names.CUSTOM_NODE_RESOURCE,
            self.node_name,
            {"metadata": {"annotations": {names.CPU_POOLS_ANNOTATION: value}}},
        )
        self._last_pools = value
        return "written"

    def _ensure_cnr(self) -> None:
        if self._cnr_exists:
            return
        try:
            self.cluster.get(names.CUSTOM_NODE_RESOURCE, self.node_name)
        except NotFound:
            uid: str | None = None
            try:
                node = self.cluster.get(names.NODE, self.node_name)
                uid = node.get("metadata", {}).get("uid")
            except NotFound:
                uid = None
            self.cluster.create(
                names.CUSTOM_NODE_RESOURCE, new_cnr(self.node_name, uid=uid).to_json()
            )
        self._cnr_exists = True

    def _publish_node(self, cpu_cores: float, memory_bytes: float, now: float) -> str:
        figures = {
            names.RECLAIMED_MILLICPU: _cpu_q(cpu_cores),
            names.RECLAIMED_MEMORY: _mem_q(memory_bytes),
        }
        # Re-sent now and then even unchanged: other writers of the Node's status (an
        # admission webhook, a node problem detector) must not erase it for good.
        fresh = (
            self._last_node_write is not None
            and now - self._last_node_write < NODE_REPUBLISH_PERIOD_S
        )
        if figures == self._last_node_figures and fresh:
            return "unchanged"
        try:
            self.cluster.patch(
                names.NODE,
                self.node_name,
                {"status": {"capacity": figures, "allocatable": figures}},
                subresource="status",
            )
        except NotFound:
            return "node not found"
        self._last_node_figures = figures
        self._last_node_write = now
        return "written"
