"""Publishing what the agent found: the node's CustomNodeResource and Node status.

The CNR carries what Katalyst's agent writes there, so that Katalyst's scheduler and tools
read it unchanged: the reclaimed capacity (`status.resources.allocatable/capacity`), the
per-NUMA topology zones (Socket -> Numa, with cpu and memory net of the reserves, the
NUMA's reclaimed figures — adding up to the node's — and the pods' `allocations`), the
`topologyPolicy` of the kubelet's topology manager, the AgentReady heartbeat condition and,
in annotations, the terms behind each figure and the cpu pools with the cpuset of each pod.
On a node with GPUs, each Numa zone has its cards as `GPU` children (agent/gpu.py) and the
spec's `nodeResourceProperties` names their topology attributes.
The Node's status gets the same reclaimed figures as extended resources, so that even the
default kube-scheduler can place reclaimed pods.

Writes happen only when the content changes, except the heartbeat, which is refreshed
every period: a controller that stops seeing it treats the agent as gone.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent import overcommit
from pykatalyst.agent.config import OvercommitAdviceConfig, ReporterConfig
from pykatalyst.api import names
from pykatalyst.api.crds import new_cnr
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.clock import is_due
from pykatalyst.cluster.protocol import ApiError, Cluster, NotFound
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

NODE_REPUBLISH_PERIOD_S = 300.0


@dataclass(frozen=True, slots=True)
class NumaAllocation:
    """What one pod holds of one NUMA node, as the zone's `allocations` list it."""

    consumer: str  # namespace/name/uid
    numa: int
    cpus: float  # cores: a count of cpus, or an SNB pod's request ("1500m")
    memory: int | None  # bytes; None: no memory on this zone (pods not NUMA-bound)


@dataclass(frozen=True, slots=True)
class PodCpus:
    """Where one pod's containers run, as the agent set it: its pool and its cpus."""

    pod: str  # namespace/name
    uid: str
    pool: str
    cpuset: CPUSet
    ramping_up: bool = False
    note: str = ""
    reclaim_off: str = ""


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
    # memory kept for the system on each NUMA node: the zone's allocatable is net of it
    memory_reserved_per_numa: Mapping[int, int] = field(default_factory=dict)
    topology_policy: str | None = None  # None: the reporter's own
    cpu_grain_milli: int = 1000  # per-NUMA reclaimed cpu in whole cores (Katalyst)
    provision: Mapping[str, Any] = field(default_factory=dict)  # pool -> last sizing step
    # the GPU zones under each Numa zone (agent/gpu.py), and spec.nodeResourceProperties
    # (None: the spec is left as it is)
    gpu_zones: Mapping[int, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    resource_properties: Sequence[Mapping[str, Any]] | None = None
    # the NIC zones under each Socket zone (agent/nic.py)
    nic_zones: Mapping[int, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # Katalyst's CNR annotations on the kubelet's cpu and memory managers and the cpus
    # they pin (publish.manager_annotations; empty: the kubelet's config is unknown)
    manager_annotations: Mapping[str, str] = field(default_factory=dict)


def pools_annotation(
    pools: Mapping[str, CPUSet],
    pods: Sequence[PodCpus],
    provision: Mapping[str, Any] | None = None,
) -> str:
    """The CPU_POOLS_ANNOTATION value: each pool's cpuset and each pod's pool and cpus.

    Katalyst's CNR schema has no field for either (its allocations carry requests only, and
    only for NUMA-bound pods), so they travel in an annotation, which every API server
    keeps as written. So does `provision`: the step that last changed each share pool's
    size (policy, indicators, targets, P/I/D terms). It is rewritten only on change."""
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
        if p.reclaim_off:
            entry["reclaim_off"] = p.reclaim_off
        entries.append(entry)
    body: dict[str, Any] = {
        "pools": {name: str(cpus) for name, cpus in sorted(pools.items())},
        "pods": entries,
    }
    if provision:
        body["provision"] = dict(provision)
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def milli_cpu(cores: float) -> int:
    return max(round(cores * 1000), 0)


# A status is rebuilt every period from figures that mostly repeat (each NUMA node's
# memory, the pods' requests): their text is remembered, by exact value and type.
@functools.lru_cache(maxsize=4096, typed=True)
def _int_text(n: int) -> str:
    return str(Quantity.from_int(n))


@functools.lru_cache(maxsize=4096, typed=True)
def _bytes_text(n: int) -> str:
    return str(Quantity.from_bytes(n))


@functools.lru_cache(maxsize=4096, typed=True)
def _milli_text(n: int) -> str:
    return str(Quantity.from_milli(n))


def _cpu_q(cores: float) -> str:
    return _int_text(milli_cpu(cores))


def _mem_q(value: float) -> str:
    return _bytes_text(max(int(value), 0))


def apportion(
    total: int, weights: Mapping[int, float], zones: Sequence[int], grain: int
) -> dict[int, int]:
    """Split `total` units over `zones` in proportion to `weights`, in multiples of `grain`
    (the largest remainders get the spare grains), the last part of a grain to the zone
    with the largest remainder left: the parts always add up to `total`. Without positive
    weights the zones share evenly."""
    if not zones:
        return {}
    total = max(total, 0)
    grain = max(grain, 1)
    w = {z: max(float(weights.get(z, 0.0)), 0.0) for z in zones}
    s = sum(w.values())
    if s <= 0:
        w = dict.fromkeys(zones, 1.0)
        s = float(len(zones))
    grains, rest = divmod(total, grain)
    exact = {z: grains * w[z] / s for z in zones}
    out = {z: math.floor(exact[z]) for z in zones}
    order = sorted(zones, key=lambda z: (-(exact[z] - out[z]), z))
    for z in order[: grains - sum(out.values())]:
        out[z] += 1
    parts = {z: out[z] * grain for z in zones}
    if rest:
        parts[order[0]] += rest
    return parts


def _numa_reclaimed(inp: ReportInput, numas: Sequence[int]) -> dict[int, dict[str, str]]:
    """Each NUMA node's reclaimed figures, adding up to the node's (as Katalyst rescales its
    per-NUMA figures to the reported total); cpu in whole cores where the total allows."""
    if inp.cpu_cores is None or inp.memory_bytes is None:
        return {}
    milli = apportion(milli_cpu(inp.cpu_cores), inp.cpu_per_numa, numas, inp.cpu_grain_milli)
    mem = apportion(max(int(inp.memory_bytes), 0), inp.memory_per_numa, numas, 1)
    return {
        n: {
            names.RECLAIMED_MILLICPU: _int_text(milli[n]),
            names.RECLAIMED_MEMORY: _bytes_text(mem[n]),
        }
        for n in numas
    }


def _allocation_json(a: NumaAllocation) -> dict[str, Any]:
    requests = {names.RESOURCE_CPU: _milli_text(milli_cpu(a.cpus))}
    if a.memory is not None:
        requests[names.RESOURCE_MEMORY] = _mem_q(a.memory)
    return {"consumer": a.consumer, "requests": requests}


def build_status(inp: ReportInput, topology_policy: str) -> dict[str, Any]:
    """The CNR status the agent owns (without the heartbeat condition)."""
    status: dict[str, Any] = {"topologyPolicy": inp.topology_policy or topology_policy}
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
    per_numa = _numa_reclaimed(inp, sorted(topo.numa_nodes))
    zones = []
    for socket in sorted(topo.sockets):
        children = []
        for numa in sorted(topo.numas_in_socket(socket)):
            cpus = topo.cpus_in_numa(numa)
            mem = topo.memory_of_numa(numa) if topo.memory_per_numa else 0
            net = max(mem - inp.memory_reserved_per_numa.get(numa, 0), 0)
            # As Katalyst's cpu and memory plugins: allocatable is net of the reserve pool
            # and of the memory reserved for the system; capacity is the whole node.
            alloc: dict[str, str] = {
                names.RESOURCE_CPU: str(len(cpus - inp.reserve)),
                names.RESOURCE_MEMORY: _mem_q(net),
            }
            capacity: dict[str, str] = {
                names.RESOURCE_CPU: str(len(cpus)),
                names.RESOURCE_MEMORY: _mem_q(mem),
            }
            # As Katalyst's agent: the NUMA's reclaimed figures in both lists.
            alloc.update(per_numa.get(numa, {}))
            capacity.update(per_numa.get(numa, {}))
            zone: dict[str, Any] = {
                "type": names.ZONE_NUMA,
                "name": str(numa),
                "resources": {"allocatable": alloc, "capacity": capacity},
            }
            allocs = sorted(by_numa.get(numa, []), key=lambda a: a.consumer)
            if allocs:
                zone["allocations"] = [_allocation_json(a) for a in allocs]
            gpus = inp.gpu_zones.get(numa)
            if gpus:
                zone["children"] = [dict(g) for g in gpus]
            children.append(zone)
        children.extend(dict(z) for z in inp.nic_zones.get(socket, ()))
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
        self._overcommit_at: float | None = None
        self._last_overcommit: dict[str, str | None] | None = None
        self._cnr_exists = False
        self._last_properties: list[dict[str, Any]] | None = None
        self._last_managers: dict[str, str] | None = None

    def report(self, inp: ReportInput, now: float) -> dict[str, Any]:
        """Publish if needed; returns what was written (for the plan)."""
        out: dict[str, Any] = {"cnr": "unchanged"}
        status = build_status(inp, self.topology_policy)
        heartbeat_due = is_due(self._last_heartbeat, now, self.cfg.period_s)
        changed = status != self._last_status
        node_due = (
            self.cfg.publish_node_extended_resources
            and inp.cpu_cores is not None
            and inp.memory_bytes is not None
        )
        # The pools and terms annotations go in one write (they change together).
        pending: dict[str, str] = {}
        try:
            self._ensure_cnr()
            # Reclaimed capacity that grows goes on the Node first, then the CNR: the kubelet
            # admits by the Node, a scheduler places by the CNR, and a pod placed on capacity
            # the Node does not show yet is refused (OutOfreclaimed_millicpu). Capacity that
            # shrinks leaves the CNR first, for the same reason.
            grows = node_due and self._node_grows(inp.cpu_cores or 0.0, inp.memory_bytes or 0.0)
            if grows:
                out["node"] = self._publish_node(inp.cpu_cores or 0.0, inp.memory_bytes or 0.0, now)
            if changed or heartbeat_due:
                self._publish_status(status, now)
                out["cnr"] = "status written" if changed else "heartbeat"
            if inp.pools:
                out["pools"] = self._pools_pending(inp, pending)
            if inp.resource_properties is not None:
                out["properties"] = self._publish_properties(inp.resource_properties)
            if inp.manager_annotations:
                out["managers"] = self._publish_managers(inp.manager_annotations)
            figures = inp.cpu_cores is not None and inp.memory_bytes is not None
            key = (milli_cpu(inp.cpu_cores or 0.0), int(inp.memory_bytes or 0)) if figures else None
            if key is not None and key != self._last_terms_key:
                terms = json.dumps(inp.terms, sort_keys=True)
                pending[names.RECLAIMED_TERMS_ANNOTATION] = terms
                out["terms"] = "written"
            self._write_annotations(pending, key)
            if node_due and not grows:
                out["node"] = self._publish_node(inp.cpu_cores or 0.0, inp.memory_bytes or 0.0, now)
        except ApiError as exc:
            if pending:  # not written: say so
                for what in ("pools", "terms"):
                    if out.get(what) == "written":
                        del out[what]
            self._forget()
            out["error"] = str(exc)
        return out

    def _publish_status(self, status: dict[str, Any], now: float) -> None:
        """The CNR's status with the AgentReady heartbeat."""
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
            names.CUSTOM_NODE_RESOURCE, self.node_name, {"status": body}, subresource="status"
        )
        self._last_status = status
        self._last_heartbeat = now

    def _forget(self) -> None:
        """Try again next tick from scratch: the next write must not be skipped as
        "unchanged" because this one failed."""
        self._last_status = None
        self._last_terms_key = None
        self._last_node_figures = None
        self._last_pools = None
        self._last_properties = None
        self._last_managers = None
        self._cnr_exists = False

    def publish_overcommit(
        self,
        used: Mapping[str, tuple[float, float]],
        cfg: OvercommitAdviceConfig,
        now: float,
    ) -> dict[str, Any]:
        """Work out and publish the realtime overcommit ratio per resource. `used` maps
        cpu / memory to (Σ native request, Σ usage) of the node's pods with requests."""
        if not cfg.enabled:
            return {"state": "off (overcommit.enabled=false)"}
        if self._overcommit_at is not None and now - self._overcommit_at < cfg.period_s:
            return {"state": "not due"}
        try:
            node = self.cluster.get(names.NODE, self.node_name)
        except ApiError as exc:
            return {"error": f"cannot read the Node: {exc}"}
        self._overcommit_at = now
        meta = node.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        ann = ann if isinstance(ann, dict) else {}
        loads = {
            names.RESOURCE_CPU: (cfg.cpu_target_load, cfg.cpu_estimated_pod_load),
            names.RESOURCE_MEMORY: (cfg.memory_target_load, cfg.memory_estimated_pod_load),
        }
        ratios: dict[str, float] = {}
        out: dict[str, Any] = {}
        for resource, (target, estimated) in loads.items():
            request, usage = used.get(resource, (0.0, 0.0))
            alloc = _original_allocatable(node, ann, resource)
            ratio, terms = overcommit.realtime_ratio(
                overcommit.Demand(alloc, request, usage), target, estimated
            )
            ratios[resource] = ratio
            out[resource] = terms
        wanted = overcommit.cnr_annotations(ratios, ann)
        if wanted != self._last_overcommit:
            try:
                self.cluster.patch(
                    names.CUSTOM_NODE_RESOURCE,
                    self.node_name,
                    {"metadata": {"annotations": wanted}},
                )
            except ApiError as exc:
                return {**out, "error": f"cannot annotate the CNR: {exc}"}
            self._last_overcommit = wanted
            out["state"] = "written"
        else:
            out["state"] = "unchanged"
        out["annotations"] = wanted
        return out

    def _pools_pending(self, inp: ReportInput, pending: dict[str, str]) -> str:
        """The pools annotation, added to `pending` when it changed."""
        value = pools_annotation(inp.pools, inp.pod_cpus, inp.provision)
        if value == self._last_pools:
            return "unchanged"
        pending[names.CPU_POOLS_ANNOTATION] = value
        return "written"

    def _write_annotations(
        self, pending: dict[str, str], terms_key: tuple[int, int] | None
    ) -> None:
        """One write of the changed pools and terms annotations (`terms_key`: the figures
        the terms are of), remembered once written."""
        if not pending:
            return
        self.cluster.patch(
            names.CUSTOM_NODE_RESOURCE,
            self.node_name,
            {"metadata": {"annotations": dict(pending)}},
        )
        if names.CPU_POOLS_ANNOTATION in pending:
            self._last_pools = pending[names.CPU_POOLS_ANNOTATION]
        if names.RECLAIMED_TERMS_ANNOTATION in pending:
            self._last_terms_key = terms_key
        pending.clear()

    def _publish_managers(self, annotations: Mapping[str, str]) -> str:
        value = dict(annotations)
        if value == self._last_managers:
            return "unchanged"
        self.cluster.patch(
            names.CUSTOM_NODE_RESOURCE,
            self.node_name,
            {"metadata": {"annotations": value}},
        )
        self._last_managers = value
        return "written"

    def _publish_properties(self, properties: Sequence[Mapping[str, Any]]) -> str:
        value = [dict(p) for p in properties]
        if value == self._last_properties:
            return "unchanged"
        self.cluster.patch(
            names.CUSTOM_NODE_RESOURCE,
            self.node_name,
            {"spec": {"nodeResourceProperties": value}},
        )
        self._last_properties = value
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

    def _node_grows(self, cpu_cores: float, memory_bytes: float) -> bool:
        """Whether either figure is above what the Node was last given (or nothing was)."""
        last = self._last_node_figures
        if last is None:
            return True
        try:
            was_cpu = Quantity.parse(last[names.RECLAIMED_MILLICPU]).value()
            was_mem = Quantity.parse(last[names.RECLAIMED_MEMORY]).value()
        except (KeyError, ValueError):
            return True
        return milli_cpu(cpu_cores) > was_cpu or max(int(memory_bytes), 0) > was_mem

    def _publish_node(self, cpu_cores: float, memory_bytes: float, now: float) -> str:
        figures = {
            names.RECLAIMED_MILLICPU: _cpu_q(cpu_cores),
            names.RECLAIMED_MEMORY: _mem_q(memory_bytes),
        }
        # Re-sent now and then even unchanged: other writers of the Node's status (an
        # admission webhook, a node problem detector) must not erase it for good.
        fresh = not is_due(self._last_node_write, now, NODE_REPUBLISH_PERIOD_S)
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


def _original_allocatable(node: Mapping[str, Any], ann: Mapping[str, Any], resource: str) -> float:
    """The kubelet's allocatable before any overcommit: the webhook's `original_*`
    annotation when the Node has one, else its status. Cores or bytes; 0 when unknown."""
    key = (
        names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION
        if resource == names.RESOURCE_CPU
        else names.ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION
    )
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, dict) else None
    raw = ann.get(key)
    if raw is None and isinstance(alloc, dict):
        raw = alloc.get(resource)
    try:
        q = Quantity.parse(str(raw)) if raw is not None else None
    except ValueError:
        return 0.0
    if q is None:
        return 0.0
    return q.milli_value() / 1000.0 if resource == names.RESOURCE_CPU else float(q.value())
