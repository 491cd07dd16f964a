"""The simulator's nodes and running pods as arrays: each node's fixed figures
(`NodeArrays`), every running pod as a row (`PodRows`), the cpu domains pods compete in,
their cpus as rows of booleans, and one step's cpu figures (`CpuStep`). `sim.machines`
steps the physics on them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pykatalyst.sim.host import PodKnobs
from pykatalyst.sim.pods import NodeSim, SimPod


def domains(nodes: list[int], masks: list[int]) -> tuple[np.ndarray, list[int], list[int]]:
    """Cpu domains: on each node, pods whose cpusets overlap compete in one domain (the
    union of their cpusets); disjoint cpusets (Katalyst's pools) are separate. From each
    pod's node and cpus (a mask): each pod's domain, and each domain's cpus and node."""
    by_node: dict[int, dict[int, list[int]]] = {}
    for i, node in enumerate(nodes):
        by_node.setdefault(node, {}).setdefault(masks[i], []).append(i)
    domain = np.empty(len(nodes), dtype=np.int64)
    dom_mask: list[int] = []
    dom_node: list[int] = []
    for nidx, by_mask in by_node.items():
        groups: list[tuple[int, list[int]]] = []
        for m, idxs in by_mask.items():
            union, members = m, list(idxs)
            rest = []
            for gm, gi in groups:
                if gm & union:
                    union |= gm
                    members.extend(gi)
                else:
                    rest.append((gm, gi))
            # merging can make the union touch groups it skipped: repeat until stable
            merged = True
            while merged:
                merged = False
                keep = []
                for gm, gi in rest:
                    if gm & union:
                        union |= gm
                        members.extend(gi)
                        merged = True
                    else:
                        keep.append((gm, gi))
                rest = keep
            groups = [*rest, (union, members)]
        for union, members in groups:
            domain[members] = len(dom_mask)
            dom_mask.append(union)
            dom_node.append(nidx)
    return domain, dom_mask, dom_node


def mask_rows(masks: list[int], cpus: int) -> np.ndarray:
    """The masks as rows of booleans, one column per cpu."""
    nbytes = (cpus + 7) // 8
    if not masks:
        return np.zeros((0, cpus), dtype=bool)
    raw = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in masks), np.uint8)
    rows = np.unpackbits(raw.reshape(len(masks), nbytes), axis=1, bitorder="little")[:, :cpus]
    return rows.astype(bool)


@dataclass(frozen=True, slots=True)
class CpuStep:
    """One step's cpu: per running pod its demand and grant and whether it is batch; per
    sharing domain the usage of normal, idle, normal batch and light batch pods, and its
    capacity (at least 1); per node and cpu the busy share of batch and of all pods."""

    demand: np.ndarray
    granted: np.ndarray
    batch: np.ndarray
    normal_use: np.ndarray
    idle_use: np.ndarray
    batch_normal: np.ndarray
    light_use: np.ndarray
    safe_cap: np.ndarray
    per_cpu_batch: np.ndarray
    per_cpu_all: np.ndarray


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """What the physics needs of every node, fixed for a run: per node and cpu (up to the
    largest node's, `valid` marking the node's own) its hyperthread sibling (`sib`, with
    `has_sib`) and socket; per node and socket the cpus in it; per node its cpus, memory
    and memory reserved for the system."""

    sib: np.ndarray
    has_sib: np.ndarray
    sock: np.ndarray
    valid: np.ndarray
    sock_cpus: np.ndarray
    cpus: np.ndarray
    memory: np.ndarray
    sys_memory: np.ndarray

    @property
    def max_cpus(self) -> int:
        return int(self.valid.shape[1])


def node_arrays(nodes: Sequence[NodeSim], max_cpus: int, sockets: int) -> NodeArrays:
    """The nodes' static arrays, `max_cpus` columns per node and `sockets` per node."""
    n = len(nodes)
    sib = np.tile(np.arange(max_cpus), (n, 1))
    has_sib = np.zeros((n, max_cpus), dtype=bool)
    sock = np.zeros((n, max_cpus), dtype=np.int64)
    valid = np.zeros((n, max_cpus), dtype=bool)
    sock_cpus = np.ones((n, sockets))
    for i, node in enumerate(nodes):
        topo = node.host.topology()
        for info in topo.cpu_infos:
            valid[i, info.cpu] = True
            sock[i, info.cpu] = info.socket
            others = [x for x in topo.siblings(info.cpu) if x != info.cpu]
            if others:
                sib[i, info.cpu] = others[0]
                has_sib[i, info.cpu] = True
        for s in topo.sockets:
            sock_cpus[i, s] = len(topo.cpus_in_socket(s))
    return NodeArrays(
        sib,
        has_sib,
        sock,
        valid,
        sock_cpus,
        np.array([n_.cpus for n_ in nodes], dtype=np.float64),
        np.array([n_.memory for n_ in nodes], dtype=np.float64),
        np.array([n_.group.system_reserved_memory for n_ in nodes], dtype=np.float64),
    )


@dataclass(frozen=True, slots=True)
class PodRows:
    """Every running pod as one row of arrays, in the order of `running`: its node,
    whether it is a service (and which: `svc_idx`, -1 for batch) and its replica, the
    knobs the kernel applies (cpus-and-quota `limit`, cfs `weight`, SCHED_IDLE `idle`,
    `mem_limit`), its cpu domain, its batch cores, memory used and OOM score adjustment;
    per cpu domain its node (`dom_node`), cpus (`dm`, rows of booleans) and size (`cap`)."""

    running: list[SimPod]
    node: np.ndarray
    is_svc: np.ndarray
    svc_idx: np.ndarray
    replica: np.ndarray
    limit: np.ndarray
    weight: np.ndarray
    idle: np.ndarray
    domain: np.ndarray
    dom_node: np.ndarray
    dm: np.ndarray
    cap: np.ndarray
    cores: np.ndarray
    mem_used: np.ndarray
    mem_limit: np.ndarray
    adj: np.ndarray


def pod_rows(running: list[SimPod], knobs: list[PodKnobs], max_cpus: int) -> PodRows:
    """The rows of the running pods, each with the knobs its host applies."""
    n = len(running)
    masks = [k.cpus for k in knobs]
    ncpu = np.fromiter((m.bit_count() for m in masks), np.float64, n)
    quota = np.fromiter(
        (math.inf if k.quota_cores is None else k.quota_cores for k in knobs), np.float64, n
    )
    domain, dom_mask, dom_node = domains([p.node for p in running], masks)
    dm = mask_rows(dom_mask, max_cpus)
    return PodRows(
        running=running,
        node=np.fromiter((p.node for p in running), np.int64, n),
        is_svc=np.fromiter((p.kind == "service" for p in running), bool, n),
        svc_idx=np.fromiter((p.index if p.kind == "service" else -1 for p in running), np.int64, n),
        replica=np.fromiter((p.replica for p in running), np.int64, n),
        limit=np.minimum(ncpu, quota),
        weight=np.fromiter((k.shares for k in knobs), np.float64, n),
        idle=np.fromiter((k.idle for k in knobs), bool, n),
        domain=domain,
        dom_node=np.asarray(dom_node, dtype=np.int64),
        dm=dm,
        cap=dm.sum(axis=1).astype(np.float64),
        cores=np.fromiter((p.cores for p in running), np.float64, n),
        mem_used=np.fromiter((p.memory_used for p in running), np.float64, n),
        mem_limit=np.fromiter(
            (math.inf if k.memory_limit is None else k.memory_limit for k in knobs), np.float64, n
        ),
        adj=np.fromiter((p.oom_adj for p in running), np.int64, n),
    )


def no_rows(max_cpus: int) -> PodRows:
    """The rows before the first step: no pod running."""
    return pod_rows([], [], max_cpus)
