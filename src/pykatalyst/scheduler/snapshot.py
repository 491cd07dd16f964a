"""The scheduler's view of every node, held as numpy arrays so plugins judge all nodes at once.

Each node owns one slot (the last axis of every array). Resource amounts are int64 in the
units kube-scheduler counts (milli-cores for cpu, bytes, counts). Requested amounts are
kept up to date incrementally: from bound pods the informer reports, and from pods this
scheduler assumed on a node before the binding is seen, so a pod in flight counts at once.

Node labels, taints and the unschedulable flag change rarely; `static_gen` changes with
them, so per-pod-spec results over them can be cached until it moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from pykatalyst.api import names
from pykatalyst.api.digest import canonical_resource
from pykatalyst.api.gpu import MILLI, WHOLE, parse_selection
from pykatalyst.api.objects import CustomNodeResource, Node, TopologyZone, numa_zones_of
from pykatalyst.api.quantity import QuantityError
from pykatalyst.cluster.patch import copy_json
from pykatalyst.scheduler.podinfo import PodInfo, amount
from pykatalyst.topology.vf import VfSlot

log = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]

# Fixed resource rows; extended resources get rows as they are first seen.
CPU: Final = 0
MEMORY: Final = 1
EPHEMERAL: Final = 2
PODS: Final = 3
RECLAIMED_CPU: Final = 4
RECLAIMED_MEMORY: Final = 5
# kube-scheduler's "non-zero" cpu/memory sums (used only by scores) live in `req` too, so
# one gather fetches every requested row a score needs.
NONZERO_CPU: Final = 6
NONZERO_MEMORY: Final = 7
FIXED_RESOURCES: Final = (
    names.RESOURCE_CPU,
    names.RESOURCE_MEMORY,
    names.RESOURCE_EPHEMERAL_STORAGE,
    names.RESOURCE_PODS,
    names.RECLAIMED_MILLICPU,
    names.RECLAIMED_MEMORY,
    "(non-zero cpu)",
    "(non-zero memory)",
)

POLICY_NONE: Final = 0
POLICY_SINGLE_NUMA: Final = 1
POLICY_NUMERIC: Final = 2
POLICY_SINGLE_NUMA_POD: Final = 3
_POLICY_CODES: Final = {
    names.TOPOLOGY_POLICY_NONE: POLICY_NONE,
    names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER: POLICY_SINGLE_NUMA,
    names.TOPOLOGY_POLICY_SINGLE_NUMA_POD: POLICY_SINGLE_NUMA_POD,
    names.TOPOLOGY_POLICY_NUMERIC_CONTAINER: POLICY_NUMERIC,
}

Taint = tuple[str, str, str]  # key, value, effect
CNRTaint = tuple[str, str, str, str]  # key, value, effect, qosLevel (the pods it applies to)
_FILTERING_EFFECTS: Final = ("NoSchedule", "NoExecute")  # PreferNoSchedule only scores


@dataclass(frozen=True, slots=True)
class NUMAReservation:
    """Cpu (milli) and memory taken from each NUMA zone of a node by one pod."""

    numa_ids: tuple[int, ...]
    cpu: tuple[int, ...]
    memory: tuple[int, ...]
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class GPUReservation:
    """The cards one pod holds on its node, in allocation order, and the milli-units it
    holds on each (`WHOLE`: each card whole)."""

    ids: tuple[str, ...]
    share: int


@dataclass(frozen=True, slots=True)
class NICReservation:
    """The NIC one pod holds bandwidth on (its resource identifier) and the Mbps held."""

    nic: str
    mbps: int


@dataclass(slots=True)
class PodRecord:
    uid: str
    key: str
    namespace: str
    labels: Mapping[str, str]
    node: str
    entries: tuple[tuple[int, int], ...]
    nonzero_cpu: int
    nonzero_mem: int
    dedicated_numa: bool
    assumed: bool = False
    numa: NUMAReservation | None = None
    # required pod anti-affinity terms: they keep other pods out of this pod's domains
    anti_affinity: tuple[Mapping[str, Any], ...] = ()
    gpu: GPUReservation | None = None
    nic: NICReservation | None = None
    vf: str | None = None  # the SR-IOV VF it holds (its representor name)


@dataclass(slots=True)
class _CNRVfs:
    """A node's SR-IOV VF zones (children of its NIC zones): each VF, the VFs the CNR's
    allocations hold and the consumers (uids) it lists."""

    vfs: list[VfSlot] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _CNRNuma:
    """What a node's CNR says about its NUMA zones: per zone what the dedicated pods'
    (and unknown consumers') allocations hold, and what every allocation holds."""

    ids: list[int] = field(default_factory=list)
    sockets: list[int] = field(default_factory=list)
    cpu_alloc: list[int] = field(default_factory=list)
    mem_alloc: list[int] = field(default_factory=list)
    cpu_used: list[int] = field(default_factory=list)
    mem_used: list[int] = field(default_factory=list)
    # every allocation, shared pods' included (what Katalyst's native policy counts), and
    # every consumer the CNR lists
    cpu_used_all: list[int] = field(default_factory=list)
    mem_used_all: list[int] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _CNRGpu:
    """What a node's CNR says about its GPU zones (cards), in the CNR's order, with the
    milli-units its allocations hold on each and its consumers' uids."""

    ids: list[str] = field(default_factory=list)
    cap: list[int] = field(default_factory=list)  # milli-units a new pod may use; 0: unhealthy
    full: list[int] = field(default_factory=list)  # the card's size in milli-units
    numa: list[int] = field(default_factory=list)
    socket: list[int] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    pcie: list[str] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    consumers: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _CNRNic:
    """What a node's CNR says about its NIC zones, in the CNR's order: the bandwidth a new
    pod may use of each (Mbps; 0 when unhealthy), its socket, whether it sits in the
    host's network namespace, what its allocations hold and its consumers' uids."""

    ids: list[str] = field(default_factory=list)
    cap: list[int] = field(default_factory=list)
    socket: list[int] = field(default_factory=list)
    host: list[bool] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    consumers: set[str] = field(default_factory=set)


_NUMA_ROWS: Final = (
    "numa_id",
    "numa_socket",
    "numa_cpu_alloc",
    "numa_mem_alloc",
    "numa_cpu_used",
    "numa_mem_used",
    "numa_cpu_used_all",
    "numa_mem_used_all",
    "numa_socket_bits",
)
_GPU_ROWS: Final = ("gpu_cap", "gpu_used", "gpu_free", "gpu_numa", "gpu_socket", "gpu_model")
_NIC_ROWS: Final = ("nic_cap", "nic_used", "nic_free", "nic_socket", "nic_host")


def _device_use(
    used: Sequence[int],
    ids: Sequence[str],
    consumers: set[str],
    records: Iterable[PodRecord],
    held: Callable[[PodRecord], Iterable[tuple[str, int]]],
) -> list[int]:
    """Per device of a node (its CNR's order): what the CNR's allocations hold (`used`)
    plus what `held` says each pod the CNR does not list yet holds, as (device id,
    amount) pairs; ids the node does not have are ignored."""
    out = list(used)
    pos = {did: i for i, did in enumerate(ids)}
    for rec in records:
        if rec.uid in consumers:
            continue
        for did, value in held(rec):
            i = pos.get(did)
            if i is not None:
                out[i] += value
    return out


class NodeSnapshot:
    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        self._cap = max(capacity, 1)
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.resources: list[str] = list(FIXED_RESOURCES)
        self.resource_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        cap = self._cap
        nr = len(self.resources)
        self.alloc: I64 = np.zeros((nr, cap), np.int64)
        self.req: I64 = np.zeros((nr, cap), np.int64)
        # alloc - req, kept current with every change so a fit check is one comparison
        self.free: I64 = np.zeros((nr, cap), np.int64)
        self.rc_alloc: I64 = np.zeros((2, cap), np.int64)
        self.has_cnr: BOOL = np.zeros(cap, np.bool_)
        self.unschedulable: BOOL = np.zeros(cap, np.bool_)
        # labels: key -> per-slot value code (-1: no such label)
        self.label_codes: dict[str, I32] = {}
        self.label_values: dict[str, dict[str, int]] = {}
        self.label_value_list: dict[str, list[str]] = {}
        self.node_labels: list[dict[str, str]] = []
        # taints: distinct (key, value, effect) -> row of taint_mat
        self.taints: list[Taint] = []
        self.taint_index: dict[Taint, int] = {}
        self.taint_mat: BOOL = np.zeros((0, cap), np.bool_)
        self.node_taints: list[list[Taint]] = []
        # CNR taints (NoSchedule / NoExecute): distinct taint -> row of cnr_taint_mat
        self.cnr_taints: list[CNRTaint] = []
        self.cnr_taint_index: dict[CNRTaint, int] = {}
        self.cnr_taint_mat: BOOL = np.zeros((0, cap), np.bool_)
        self._cnr_taints_of: dict[str, tuple[CNRTaint, ...]] = {}
        self._init_numa(cap)
        self._init_gpus(cap)
        self._init_nics(cap)
        # each CNR's topology zones as last read, with the raw list they were read from
        self._cnr_zones: dict[str, tuple[Any, list[TopologyZone]]] = {}
        # each CNR's parts read by `upsert_cnr` as last read (a copy), with what the NUMA
        # figures took from the pod records: equal both, an update changes nothing
        self._cnr_seen: dict[str, tuple[tuple[Any, ...], tuple[bool, ...]]] = {}
        self.cnr_problems: dict[str, str] = {}
        # pod accounting
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_node: dict[str, dict[str, PodRecord]] = {}
        self.pods_by_namespace: dict[str, dict[str, PodRecord]] = {}
        self.anti_affinity_pods: dict[str, PodRecord] = {}
        self.static_gen = 0

    def _init_numa(self, cap: int) -> None:
        # NUMA zones: row z of each array is the node's z-th zone by NUMA id
        self.numa_z = 0
        self.numa_count: I32 = np.zeros(cap, np.int32)
        self.numa_id: I32 = np.zeros((0, cap), np.int32)
        self.numa_socket: I32 = np.zeros((0, cap), np.int32)
        self.numa_cpu_alloc: I64 = np.zeros((0, cap), np.int64)
        self.numa_mem_alloc: I64 = np.zeros((0, cap), np.int64)
        self.numa_cpu_used: I64 = np.zeros((0, cap), np.int64)
        self.numa_mem_used: I64 = np.zeros((0, cap), np.int64)
        # the same with every CNR allocation counted, shared pods' included (`native`)
        self.numa_cpu_used_all: I64 = np.zeros((0, cap), np.int64)
        self.numa_mem_used_all: I64 = np.zeros((0, cap), np.int64)
        self.numa_socket_bits: I64 = np.zeros((0, cap), np.int64)
        self.numa_per_socket: I32 = np.zeros(cap, np.int32)
        self.policy: npt.NDArray[np.int8] = np.zeros(cap, np.int8)
        self._cnr_numa: dict[str, _CNRNuma] = {}
        self._cnr_raw_alloc: dict[str, tuple[int, int]] = {}
        self._cnr_policy: dict[str, int] = {}

    def _init_gpus(self, cap: int) -> None:
        # GPU cards (the per-card cache): row k of each array is the node's k-th card in
        # its CNR's order; `gpu_free` = cap - used, kept current; -1 codes: none/unknown
        self.gpu_z = 0
        self.gpu_count: I32 = np.zeros(cap, np.int32)
        self.gpu_cap: I64 = np.zeros((0, cap), np.int64)
        self.gpu_used: I64 = np.zeros((0, cap), np.int64)
        self.gpu_free: I64 = np.zeros((0, cap), np.int64)
        self.gpu_numa: I32 = np.zeros((0, cap), np.int32)
        self.gpu_socket: I32 = np.zeros((0, cap), np.int32)
        self.gpu_model: I32 = np.zeros((0, cap), np.int32)
        self.gpu_models: dict[str, int] = {}
        self.gpu_model_list: list[str] = []
        self._cnr_gpu: dict[str, _CNRGpu] = {}
        # bumped at every change of some card's free amount or of the cards themselves
        self.gpu_gen = 0

    def _init_nics(self, cap: int) -> None:
        # NICs (the per-NIC cache, as the cards'): row k is the node's k-th NIC zone
        self.nic_z = 0
        self.nic_count: I32 = np.zeros(cap, np.int32)
        self.nic_cap: I64 = np.zeros((0, cap), np.int64)
        self.nic_used: I64 = np.zeros((0, cap), np.int64)
        self.nic_free: I64 = np.zeros((0, cap), np.int64)
        self.nic_socket: I32 = np.zeros((0, cap), np.int32)
        self.nic_host: BOOL = np.zeros((0, cap), np.bool_)
        self._cnr_nic: dict[str, _CNRNic] = {}
        # SR-IOV VFs: per node, how many RDMA VFs are free (kept current); the VFs by node
        self.vf_free: I32 = np.zeros(cap, np.int32)
        self._cnr_vf: dict[str, _CNRVfs] = {}

    # --- storage helpers ------------------------------------------------------------------

    def _arrays(self) -> list[str]:
        return [
            "alloc",
            "req",
            "free",
            "rc_alloc",
            "has_cnr",
            "unschedulable",
            "taint_mat",
            "cnr_taint_mat",
            "numa_count",
            *_NUMA_ROWS,
            "numa_per_socket",
            "policy",
            "gpu_count",
            *_GPU_ROWS,
            "nic_count",
            *_NIC_ROWS,
            "vf_free",
        ]

    def _grow(self) -> None:
        new_cap = self._cap * 2
        for name in self._arrays():
            arr = getattr(self, name)
            shape = (*arr.shape[:-1], new_cap)
            grown = np.zeros(shape, arr.dtype)
            grown[..., : self._cap] = arr
            setattr(self, name, grown)
        for key, codes in self.label_codes.items():
            grown_codes = np.full(new_cap, -1, np.int32)
            grown_codes[: self._cap] = codes
            self.label_codes[key] = grown_codes
        self._cap = new_cap

    def resource_row(self, resource: str) -> int:
        """The row of a resource, adding one for an extended resource seen the first time."""
        row = self.resource_index.get(resource)
        if row is None:
            row = len(self.resources)
            self.resources.append(resource)
            self.resource_index[resource] = row
            self.alloc = np.vstack([self.alloc, np.zeros((1, self._cap), np.int64)])
            self.req = np.vstack([self.req, np.zeros((1, self._cap), np.int64)])
            self.free = np.vstack([self.free, np.zeros((1, self._cap), np.int64)])
        return row

    def _taint_row(self, taint: Taint) -> int:
        row = self.taint_index.get(taint)
        if row is None:
            row = len(self.taints)
            self.taints.append(taint)
            self.taint_index[taint] = row
            self.taint_mat = np.vstack([self.taint_mat, np.zeros((1, self._cap), np.bool_)])
        return row

    def _cnr_taint_row(self, taint: CNRTaint) -> int:
        row = self.cnr_taint_index.get(taint)
        if row is None:
            row = len(self.cnr_taints)
            self.cnr_taints.append(taint)
            self.cnr_taint_index[taint] = row
            grown = np.zeros((1, self._cap), np.bool_)
            self.cnr_taint_mat = np.vstack([self.cnr_taint_mat, grown])
        return row

    def cnr_taints_on(self, slot: int) -> tuple[CNRTaint, ...]:
        return self._cnr_taints_of.get(self.names[slot], ())

    def _add_rows(self, arrays: tuple[str, ...], have: int, want: int) -> None:
        """Grow the per-zone (or per-device) arrays `arrays` from `have` rows to `want`."""
        if want <= have:
            return
        for name in arrays:
            arr = getattr(self, name)
            more = np.zeros((want - have, self._cap), arr.dtype)
            setattr(self, name, np.vstack([arr, more]))

    def _ensure_numa_rows(self, z: int) -> None:
        if z <= self.numa_z:
            return
        self._add_rows(_NUMA_ROWS, self.numa_z, z)
        self.numa_id[self.numa_z : z, :] = -1
        self.numa_z = z

    def _ensure_gpu_rows(self, z: int) -> None:
        if z <= self.gpu_z:
            return
        self._add_rows(_GPU_ROWS, self.gpu_z, z)
        self.gpu_numa[self.gpu_z : z, :] = -1
        self.gpu_model[self.gpu_z : z, :] = -1
        self.gpu_z = z

    def _ensure_nic_rows(self, z: int) -> None:
        if z > self.nic_z:
            self._add_rows(_NIC_ROWS, self.nic_z, z)
            self.nic_z = z

    def gpu_model_code(self, model: str) -> int:
        code = self.gpu_models.get(model)
        if code is None:
            code = len(self.gpu_model_list)
            self.gpu_models[model] = code
            self.gpu_model_list.append(model)
        return code

    def _set_label(self, key: str, slot: int, value: str | None) -> None:
        codes = self.label_codes.get(key)
        if codes is None:
            if value is None:
                return
            codes = np.full(self._cap, -1, np.int32)
            self.label_codes[key] = codes
            self.label_values[key] = {}
            self.label_value_list[key] = []
        if value is None:
            codes[slot] = -1
            return
        table = self.label_values[key]
        code = table.get(value)
        if code is None:
            code = len(table)
            table[value] = code
            self.label_value_list[key].append(value)
        codes[slot] = code

    # --- nodes ----------------------------------------------------------------------------

    def upsert_node(self, raw: Mapping[str, Any]) -> bool:
        """Add or refresh a node; returns whether anything a pending pod may care about
        changed (so unschedulable pods get another try)."""
        name = str((raw.get("metadata") or {}).get("name", ""))
        if not name:
            return False
        view = Node(dict(raw))
        alloc = _allocatable(name, view)
        labels = {str(k): str(v) for k, v in (view.labels or {}).items()}
        taints = [
            (t.key, t.value, t.effect) for t in view.taints() if t.effect in names.TAINT_EFFECTS
        ]
        unschedulable = view.unschedulable
        slot = self.index.get(name)
        new = slot is None
        if slot is None:
            if self.n == self._cap:
                self._grow()
            slot = self.n
            self.n += 1
            self.names.append(name)
            self.index[name] = slot
            self.node_labels.append({})
            self.node_taints.append([])
            self._clear_slot(slot)
            static_changed = True
        else:
            static_changed = (
                self.node_labels[slot] != labels
                or self.node_taints[slot] != taints
                or bool(self.unschedulable[slot]) != unschedulable
            )
        old_alloc = self.alloc[:, slot].copy()
        self.alloc[:, slot] = 0
        for res, value in alloc.items():
            row = self.resource_row(res)  # may grow self.alloc: look it up afterwards
            self.alloc[row, slot] = value
        if static_changed:
            self._set_static(slot, labels, taints, unschedulable)
        if new:
            self._apply_cnr_to_slot(name, slot)
            self._reaccount_node(name, slot)
        self.free[:, slot] = self.alloc[:, slot] - self.req[:, slot]
        resized = old_alloc.shape != self.alloc[:, slot].shape
        return static_changed or resized or bool(np.any(old_alloc != self.alloc[:, slot]))

    def _set_static(
        self,
        slot: int,
        labels: dict[str, str],
        taints: list[tuple[str, str, str]],
        unschedulable: bool,
    ) -> None:
        """A node's labels, taints and schedulability, in the arrays the filters read."""
        for key in self.node_labels[slot]:
            if key not in labels:
                self._set_label(key, slot, None)
        for key, label in labels.items():
            self._set_label(key, slot, label)
        self.node_labels[slot] = labels
        self.taint_mat[:, slot] = False
        for t in taints:
            row = self._taint_row(t)  # may grow self.taint_mat
            self.taint_mat[row, slot] = True
        self.node_taints[slot] = taints
        self.unschedulable[slot] = unschedulable
        self.static_gen += 1

    def _clear_slot(self, slot: int) -> None:
        for name in self._arrays():
            getattr(self, name)[..., slot] = 0
        self.numa_id[:, slot] = -1
        self.gpu_numa[:, slot] = -1
        self.gpu_model[:, slot] = -1
        for codes in self.label_codes.values():
            codes[slot] = -1

    def remove_node(self, name: str) -> bool:
        slot = self.index.pop(name, None)
        if slot is None:
            return False
        last = self.n - 1
        if slot != last:
            moved = self.names[last]
            for arr_name in self._arrays():
                arr = getattr(self, arr_name)
                arr[..., slot] = arr[..., last]
            for codes in self.label_codes.values():
                codes[slot] = codes[last]
            self.names[slot] = moved
            self.node_labels[slot] = self.node_labels[last]
            self.node_taints[slot] = self.node_taints[last]
            self.index[moved] = slot
        self.names.pop()
        self.node_labels.pop()
        self.node_taints.pop()
        self._clear_slot(last)
        self.n -= 1
        self.static_gen += 1
        return True

    def _reaccount_node(self, name: str, slot: int) -> None:
        """Recompute requested amounts of one node from the pods recorded on it."""
        self.req[:, slot] = 0
        for rec in self.pods_by_node.get(name, {}).values():
            self._charge(rec, slot, 1)
        self.free[:, slot] = self.alloc[:, slot] - self.req[:, slot]
        self._refresh_numa(name, slot)
        self._refresh_gpu(name, slot)
        self._refresh_nics(name, slot)
        self._refresh_vfs(name, slot)

    # --- CNRs -----------------------------------------------------------------------------

    def upsert_cnr(self, raw: Mapping[str, Any]) -> bool:
        name = str((raw.get("metadata") or {}).get("name", ""))
        if not name:
            return False
        seen = self._cnr_seen.get(name)
        if seen is not None and seen[0] == _cnr_read(raw) and seen[1] == self._numa_deps(name):
            return False  # the heartbeat alone, or annotations: nothing read here changed
        view = CustomNodeResource(dict(raw))
        old_policy = self._cnr_policy.get(name)
        try:
            alloc = view.allocatable()
            rc_cpu = rc_mem = 0
            for res, q in alloc.items():
                canon = canonical_resource(res)
                if canon == names.RECLAIMED_MILLICPU:
                    rc_cpu = amount(canon, q)
                elif canon == names.RECLAIMED_MEMORY:
                    rc_mem = amount(canon, q)
            if rc_cpu < 0 or rc_mem < 0:
                raise ValueError("negative reclaimed allocatable")
            zones = self._zones_of(name, view)
            numa = _read_numa(view, zones, self)
            gpus = _read_gpus(zones)
            nics = _read_nics(zones)
            vfs = _read_vfs(zones)
        except (QuantityError, ValueError, TypeError, KeyError, AttributeError) as exc:
            problem = f"CNR {name} ignored: {exc}"
            if self.cnr_problems.get(name) != problem:
                log.warning("%s", problem)
            self.cnr_problems[name] = problem
            self.remove_cnr(name)
            return True
        self.cnr_problems.pop(name, None)
        before = (self._cnr_raw_alloc.get(name), self._cnr_numa.get(name), old_policy)
        changed = before != ((rc_cpu, rc_mem), numa, self._cnr_policy.get(name))
        changed = changed or self._cnr_gpu.get(name) != gpus or self._cnr_nic.get(name) != nics
        changed = changed or self._cnr_vf.get(name) != vfs
        self._cnr_vf[name] = vfs
        self._cnr_raw_alloc[name] = (rc_cpu, rc_mem)
        self._cnr_numa[name] = numa
        self._cnr_gpu[name] = gpus
        self._cnr_nic[name] = nics
        taints = tuple(
            (t.key, t.value, t.effect, t.qos_level)
            for t in view.taints()
            if t.effect in _FILTERING_EFFECTS
        )
        if taints != self._cnr_taints_of.get(name, ()):
            # taints are scheduling constraints of the node: cached verdicts go stale
            self._cnr_taints_of[name] = taints
            self.static_gen += 1
            changed = True
        slot = self.index.get(name)
        if slot is not None and changed:
            self._apply_cnr_to_slot(name, slot)
        self._cnr_seen[name] = (copy_json(_cnr_read(raw)), self._numa_deps(name))
        return changed

    def _numa_deps(self, name: str) -> tuple[bool, ...]:
        """What `_read_numa` took from the pod records for the pods the CNR's NUMA zones
        list: whether each is a shared (not NUMA-bound) pod this snapshot holds."""
        numa = self._cnr_numa.get(name)
        if numa is None:
            return ()
        pods = self.pods
        return tuple(
            (rec := pods.get(uid)) is not None and not rec.dedicated_numa
            for uid in ("", *numa.listed)
        )

    def _zones_of(self, name: str, view: CustomNodeResource) -> list[TopologyZone]:
        """The CNR's topology zones, read again only when they changed: an agent rewrites
        its CNR every period for the heartbeat, mostly with the zones it wrote before."""
        raw = view.status.get("topologyZone")
        known = self._cnr_zones.get(name)
        if known is not None and known[0] == raw:
            return known[1]
        zones = view.zones()
        self._cnr_zones[name] = (copy_json(raw), zones)
        return zones

    def remove_cnr(self, name: str) -> bool:
        self._cnr_seen.pop(name, None)
        self._cnr_zones.pop(name, None)
        self._cnr_raw_alloc.pop(name, None)
        self._cnr_numa.pop(name, None)
        self._cnr_gpu.pop(name, None)
        self._cnr_nic.pop(name, None)
        self._cnr_vf.pop(name, None)
        if self._cnr_taints_of.pop(name, ()):
            self.static_gen += 1
        slot = self.index.get(name)
        if slot is not None:
            self._apply_cnr_to_slot(name, slot)
        return True

    def _apply_cnr_to_slot(self, name: str, slot: int) -> None:
        rc = self._cnr_raw_alloc.get(name)
        self.has_cnr[slot] = rc is not None
        self.cnr_taint_mat[:, slot] = False
        for taint in self._cnr_taints_of.get(name, ()):
            row = self._cnr_taint_row(taint)  # may grow cnr_taint_mat
            self.cnr_taint_mat[row, slot] = True
        self.rc_alloc[:, slot] = rc if rc is not None else (0, 0)
        numa = self._cnr_numa.get(name)
        self.numa_id[:, slot] = -1
        self.numa_socket[:, slot] = 0
        self.numa_cpu_alloc[:, slot] = 0
        self.numa_mem_alloc[:, slot] = 0
        self.numa_count[slot] = 0
        self.numa_socket_bits[:, slot] = 0
        self.numa_per_socket[slot] = 0
        self.policy[slot] = POLICY_NONE
        if numa is not None and numa.ids:
            z = len(numa.ids)
            self._ensure_numa_rows(z)
            self.numa_count[slot] = z
            self.numa_id[:z, slot] = numa.ids
            self.numa_socket[:z, slot] = numa.sockets
            self.numa_cpu_alloc[:z, slot] = numa.cpu_alloc
            self.numa_mem_alloc[:z, slot] = numa.mem_alloc
            # bit j of row i: zone j sits on the same socket as zone i
            for i, si in enumerate(numa.sockets):
                self.numa_socket_bits[i, slot] = sum(
                    1 << j for j, sj in enumerate(numa.sockets) if sj == si
                )
            self.numa_per_socket[slot] = max(numa.sockets.count(s) for s in set(numa.sockets))
            self.policy[slot] = self._cnr_policy.get(name, POLICY_NONE)
        self._refresh_numa(name, slot)
        self._apply_gpus(name, slot)
        self._apply_nics(name, slot)
        self._refresh_vfs(name, slot)

    def _apply_gpus(self, name: str, slot: int) -> None:
        gpus = self._cnr_gpu.get(name)
        k = len(gpus.ids) if gpus is not None else 0
        self._ensure_gpu_rows(k)
        self.gpu_count[slot] = k
        self.gpu_cap[:, slot] = 0
        self.gpu_numa[:, slot] = -1
        self.gpu_socket[:, slot] = 0
        self.gpu_model[:, slot] = -1
        if gpus is not None and k:
            self.gpu_cap[:k, slot] = gpus.cap
            self.gpu_numa[:k, slot] = gpus.numa
            self.gpu_socket[:k, slot] = gpus.socket
            self.gpu_model[:k, slot] = [self.gpu_model_code(m) if m else -1 for m in gpus.model]
        self._refresh_gpu(name, slot)

    def _set_use(self, kind: str, slot: int, used: Sequence[int]) -> None:
        """The `<kind>_used` and `<kind>_free` rows of a node's devices (none: nothing free)."""
        use, free, cap = (getattr(self, f"{kind}_{part}") for part in ("used", "free", "cap"))
        use[:, slot] = 0
        use[: len(used), slot] = used
        free[:, slot] = cap[:, slot] - use[:, slot] if used else 0

    def _refresh_gpu(self, name: str, slot: int) -> None:
        """Card use = what the CNR reports + what this scheduler reserved (or read off a
        pod's selection annotation) for pods the CNR does not list yet."""
        self.gpu_gen += 1
        gpus = self._cnr_gpu.get(name)
        if gpus is None or not gpus.ids:
            self._set_use("gpu", slot, ())
            return
        full = dict(zip(gpus.ids, gpus.full, strict=True))

        def held(rec: PodRecord) -> list[tuple[str, int]]:
            res = rec.gpu
            if res is None:
                return []
            return [(c, full.get(c, 0) if res.share == WHOLE else res.share) for c in res.ids]

        used = _device_use(gpus.used, gpus.ids, gpus.consumers, self.pods_on(name), held)
        self._set_use("gpu", slot, used)

    def _apply_nics(self, name: str, slot: int) -> None:
        nics = self._cnr_nic.get(name)
        k = len(nics.ids) if nics is not None else 0
        self._ensure_nic_rows(k)
        self.nic_count[slot] = k
        self.nic_cap[:, slot] = 0
        self.nic_socket[:, slot] = 0
        self.nic_host[:, slot] = False
        if nics is not None and k:
            self.nic_cap[:k, slot] = nics.cap
            self.nic_socket[:k, slot] = nics.socket
            self.nic_host[:k, slot] = nics.host
        self._refresh_nics(name, slot)

    def _refresh_nics(self, name: str, slot: int) -> None:
        """NIC use = what the CNR's allocations hold + what this scheduler reserved (or
        read off a pod's nic_selection_result) for pods the CNR does not list yet."""
        nics = self._cnr_nic.get(name)
        if nics is None or not nics.ids:
            self._set_use("nic", slot, ())
            return
        used = _device_use(
            nics.used,
            nics.ids,
            nics.consumers,
            self.pods_on(name),
            lambda rec: [] if rec.nic is None else [(rec.nic.nic, rec.nic.mbps)],
        )
        self._set_use("nic", slot, used)

    def _refresh_vfs(self, name: str, slot: int) -> None:
        """Free VFs = the node's RDMA VFs given out, less those the CNR's allocations hold
        and those this scheduler reserved (or read off a pod's sriov_vf_result) for pods
        the CNR does not list yet."""
        vfs = self._cnr_vf.get(name)
        if vfs is None or not vfs.vfs:
            self.vf_free[slot] = 0
            return
        taken = self.vf_taken(name)
        self.vf_free[slot] = sum(
            1 for v in vfs.vfs if v.rdma and v.allocatable and v.id not in taken
        )

    def vf_taken(self, node: str) -> set[str]:
        """The VFs of `node` held by a pod (the CNR's, or this scheduler's view)."""
        vfs = self._cnr_vf.get(node)
        if vfs is None:
            return set()
        mine = {r.vf for r in self.pods_on(node) if r.vf and r.uid not in vfs.consumers}
        return vfs.held | {v for v in mine if v is not None}

    def vf_slots(self, node: str) -> list[VfSlot]:
        vfs = self._cnr_vf.get(node)
        return list(vfs.vfs) if vfs is not None else []

    def nic_ids(self, node: str) -> list[str]:
        nics = self._cnr_nic.get(node)
        return list(nics.ids) if nics is not None else []

    def gpu_card_ids(self, node: str) -> list[str]:
        gpus = self._cnr_gpu.get(node)
        return list(gpus.ids) if gpus is not None else []

    def gpu_card_info(self, node: str) -> _CNRGpu | None:
        return self._cnr_gpu.get(node)

    def _refresh_numa(self, name: str, slot: int) -> None:
        """NUMA use = what the CNR reports + what this scheduler reserved for pods the CNR
        does not list yet (`numa_*_used`: dedicated pods' and unknown consumers'
        allocations; `numa_*_used_all`: every allocation)."""
        for arr in (
            self.numa_cpu_used,
            self.numa_mem_used,
            self.numa_cpu_used_all,
            self.numa_mem_used_all,
        ):
            arr[:, slot] = 0
        numa = self._cnr_numa.get(name)
        if numa is None or not numa.ids:
            return
        z = len(numa.ids)
        cpu, mem = np.array(numa.cpu_used, np.int64), np.array(numa.mem_used, np.int64)
        held_c, held_m = np.zeros(z, np.int64), np.zeros(z, np.int64)
        pos = {nid: i for i, nid in enumerate(numa.ids)}
        for rec in self.pods_by_node.get(name, {}).values():
            res = rec.numa
            if res is None or rec.uid in numa.listed:
                continue
            for nid, c, m in zip(res.numa_ids, res.cpu, res.memory, strict=True):
                i = pos.get(nid)
                if i is not None:
                    held_c[i] += c
                    held_m[i] += m
        self.numa_cpu_used[:z, slot] = cpu + held_c
        self.numa_mem_used[:z, slot] = mem + held_m
        self.numa_cpu_used_all[:z, slot] = np.array(numa.cpu_used_all, np.int64) + held_c
        self.numa_mem_used_all[:z, slot] = np.array(numa.mem_used_all, np.int64) + held_m

    # --- pods -----------------------------------------------------------------------------

    def _charge(self, rec: PodRecord, slot: int, sign: int) -> None:
        req, free = self.req, self.free
        for row, value in rec.entries:
            req[row, slot] += sign * value
            free[row, slot] -= sign * value

    def _record(self, info: PodInfo, node: str, assumed: bool) -> PodRecord:
        entries = [(self.resource_row(r), v) for r, v in info.requests.items() if v]
        entries.append((PODS, 1))
        entries.append((NONZERO_CPU, info.nonzero_cpu))
        entries.append((NONZERO_MEMORY, info.nonzero_mem))
        return PodRecord(
            uid=info.uid,
            key=info.key,
            namespace=info.namespace,
            labels=info.labels,
            node=node,
            entries=tuple(entries),
            nonzero_cpu=info.nonzero_cpu,
            nonzero_mem=info.nonzero_mem,
            dedicated_numa=info.is_dedicated_numa,
            assumed=assumed,
            anti_affinity=tuple(required_pod_terms(info.raw, "podAntiAffinity")),
        )

    def _attach(self, rec: PodRecord) -> None:
        self.pods[rec.uid] = rec
        self.pods_by_node.setdefault(rec.node, {})[rec.uid] = rec
        self.pods_by_namespace.setdefault(rec.namespace, {})[rec.uid] = rec
        if rec.anti_affinity:
            self.anti_affinity_pods[rec.uid] = rec
        slot = self.index.get(rec.node)
        if slot is not None:
            self._charge(rec, slot, 1)
            if rec.numa is not None:
                self._refresh_numa(rec.node, slot)
            if rec.gpu is not None:
                self._refresh_gpu(rec.node, slot)
            if rec.nic is not None:
                self._refresh_nics(rec.node, slot)
            if rec.vf is not None:
                self._refresh_vfs(rec.node, slot)

    def _detach(self, uid: str) -> PodRecord | None:
        rec = self.pods.pop(uid, None)
        if rec is None:
            return None
        self.anti_affinity_pods.pop(uid, None)
        for index, key in ((self.pods_by_node, rec.node), (self.pods_by_namespace, rec.namespace)):
            bucket = index.get(key)
            if bucket is not None:
                bucket.pop(uid, None)
                if not bucket:
                    del index[key]
        slot = self.index.get(rec.node)
        if slot is not None:
            self._charge(rec, slot, -1)
            if rec.numa is not None:
                self._refresh_numa(rec.node, slot)
            if rec.gpu is not None:
                self._refresh_gpu(rec.node, slot)
            if rec.nic is not None:
                self._refresh_nics(rec.node, slot)
            if rec.vf is not None:
                self._refresh_vfs(rec.node, slot)
        return rec

    def observe_pod(self, info: PodInfo) -> bool:
        """The informer's view of a pod: count it on its node while it holds resources. A
        pod this scheduler assumed keeps its NUMA reservation once the binding shows up.
        Returns whether the pod, still on its node, now holds less of some resource (it
        was resized in place to smaller requests)."""
        current = self.pods.get(info.uid)
        if not info.counts_on_node:
            if current is not None:
                self._detach(info.uid)
            return False
        rec = self._record(info, info.node_name, assumed=False)
        rec.gpu = gpu_from_annotation(info)
        rec.nic = nic_from_annotation(info)
        rec.vf = vf_from_annotation(info)
        shrunk = False
        if current is not None:
            if current.node == info.node_name:
                current.assumed = False
                if (
                    (current.entries, current.labels) == (rec.entries, rec.labels)
                    and (rec.gpu is None or rec.gpu == current.gpu)
                    and (rec.nic is None or rec.nic == current.nic)
                    and (rec.vf is None or rec.vf == current.vf)
                ):
                    return False
                # resized in place or relabelled: recount it, keeping its NUMA placement
                rec.numa = current.numa
                rec.gpu = rec.gpu or current.gpu
                rec.nic = rec.nic or current.nic
                rec.vf = rec.vf or current.vf
                now = dict(rec.entries)
                shrunk = any(now.get(row, 0) < value for row, value in current.entries)
            self._detach(info.uid)
        self._attach(rec)
        return shrunk

    def forget_pod(self, uid: str) -> PodRecord | None:
        return self._detach(uid)

    def assume(
        self,
        info: PodInfo,
        node: str,
        numa: NUMAReservation | None = None,
        gpu: GPUReservation | None = None,
        nic: NICReservation | None = None,
        vf: str | None = None,
    ) -> None:
        """Count a pod on `node` before its binding is seen."""
        self._detach(info.uid)
        rec = self._record(info, node, assumed=True)
        rec.numa = numa
        rec.gpu = gpu
        rec.nic = nic
        rec.vf = vf
        self._attach(rec)

    def is_assumed(self, uid: str) -> bool:
        rec = self.pods.get(uid)
        return rec is not None and rec.assumed

    def pods_on(self, node: str) -> Iterable[PodRecord]:
        return self.pods_by_node.get(node, {}).values()

    # --- views ----------------------------------------------------------------------------

    def free_numa_ids(self, slot: int) -> list[int]:
        z = int(self.numa_count[slot])
        return [
            int(self.numa_id[i, slot])
            for i in range(z)
            if self.numa_cpu_used[i, slot] == 0 and self.numa_mem_used[i, slot] == 0
        ]

    def allocatable(self, node: str, resource: str) -> int:
        return int(self.alloc[self.resource_index[resource], self.index[node]])

    def requested(self, node: str, resource: str) -> int:
        row = self.resource_index.get(resource)
        return 0 if row is None else int(self.req[row, self.index[node]])


def required_pod_terms(pod: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """A pod's required podAffinity / podAntiAffinity terms (`kind` names which)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return [t for t in terms if isinstance(t, Mapping)]


def _cnr_read(raw: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a CNR `upsert_cnr` reads: its taints, reclaimed resources, topology
    policy and zones (not its conditions, whose heartbeat changes on every write)."""
    spec = raw.get("spec")
    status = raw.get("status")
    taints = spec.get("taints") if isinstance(spec, Mapping) else spec
    if not isinstance(status, Mapping):
        return (taints, status)
    return (
        taints,
        status.get("resources"),
        status.get("topologyPolicy"),
        status.get("topologyZone"),
    )


def _read_numa(
    view: CustomNodeResource, all_zones: list[TopologyZone], snap: NodeSnapshot
) -> _CNRNuma:
    out = _CNRNuma()
    zones = numa_zones_of(all_zones)
    sockets: dict[str, int] = {}
    for zone in zones:
        if not zone.name.isdigit():
            raise ValueError(f"NUMA zone name {zone.name!r} is not a number")
        socket = sockets.setdefault(zone.parent, len(sockets))
        if zone.parent.isdigit():
            socket = int(zone.parent)
        out.ids.append(int(zone.name))
        out.sockets.append(socket)
        cpu = zone.allocatable.get(names.RESOURCE_CPU)
        mem = zone.allocatable.get(names.RESOURCE_MEMORY)
        out.cpu_alloc.append(cpu.milli_value() if cpu is not None else 0)
        out.mem_alloc.append(mem.value() if mem is not None else 0)
        used_cpu = used_mem = all_cpu = all_mem = 0
        for consumer, reqs in zone.allocations:
            uid = consumer.rsplit("/", 1)[-1] if consumer else ""
            c = reqs.get(names.RESOURCE_CPU)
            m = reqs.get(names.RESOURCE_MEMORY)
            c_milli = c.milli_value() if c is not None else 0
            m_bytes = m.value() if m is not None else 0
            all_cpu, all_mem = all_cpu + c_milli, all_mem + m_bytes
            if uid:
                out.listed.add(uid)
            rec = snap.pods.get(uid)
            # Only NUMA-bound dedicated pods hold cpus of a zone; shared pods are elastic.
            if rec is not None and not rec.dedicated_numa:
                continue
            used_cpu, used_mem = used_cpu + c_milli, used_mem + m_bytes
        out.cpu_used.append(used_cpu)
        out.mem_used.append(used_mem)
        out.cpu_used_all.append(all_cpu)
        out.mem_used_all.append(all_mem)
    if len(set(out.ids)) != len(out.ids):
        raise ValueError("duplicate NUMA zone ids")
    policy = view.topology_policy
    snap._cnr_policy[view.name] = _POLICY_CODES.get(policy, POLICY_NONE)
    return out


def gpu_from_annotation(info: PodInfo) -> GPUReservation | None:
    """The cards a bound pod holds, read off its selection annotation (what this scheduler
    wrote before binding it, so its cards stay counted across restarts)."""
    req = info.gpu
    if req.cards <= 0 or req.problem:
        return None
    value = info.digest.annotations.get(names.GPU_SELECTION_RESULT_ANNOTATION)
    ids = parse_selection(value) if isinstance(value, str) else ()
    if not ids:
        return None
    return GPUReservation(ids, req.share)


def nic_from_annotation(info: PodInfo) -> NICReservation | None:
    """The NIC a bound pod holds bandwidth on, read off its nic_selection_result."""
    mbps = info.request(names.RESOURCE_NET_BANDWIDTH)
    value = info.digest.annotations.get(names.NIC_SELECTION_RESULT_ANNOTATION)
    if mbps <= 0 or not isinstance(value, str) or not value.strip():
        return None
    return NICReservation(value.strip(), mbps)


def vf_from_annotation(info: PodInfo) -> str | None:
    """The SR-IOV VF a bound pod holds, read off its sriov_vf_result."""
    value = info.digest.annotations.get(names.SRIOV_VF_RESULT_ANNOTATION)
    if info.request(names.RESOURCE_SRIOV_NIC) <= 0 or not isinstance(value, str):
        return None
    return value.strip() or None


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _read_vfs(zones: list[TopologyZone]) -> _CNRVfs:
    """The SR-IOV VF zones of a CNR (NIC zones with `sriov_nic` capacity, children of
    their PF's NIC zone): each VF, which of them the CNR's allocations hold, and who."""
    out = _CNRVfs()
    for zone in zones:
        if zone.type != names.ZONE_NIC or names.RESOURCE_SRIOV_NIC not in zone.capacity:
            continue
        if not zone.name:
            raise ValueError("a VF zone has no name (the representor)")
        a = zone.attributes
        alloc = zone.allocatable.get(names.RESOURCE_SRIOV_NIC)
        out.vfs.append(
            VfSlot(
                zone.name,
                a.get(names.VF_ATTR_PF, zone.parent),
                _int(a.get(names.VF_ATTR_INDEX, ""), 0),
                _int(a.get(names.GPU_ATTR_NUMA, ""), -1),
                _int(a.get(names.GPU_ATTR_SOCKET, ""), 0),
                a.get(names.VF_ATTR_RDMA, "true") == "true",
                _int(a.get(names.VF_ATTR_QUEUE_COUNT, ""), -1),
                alloc is not None and alloc.value() > 0,
                a.get(names.GPU_ATTR_PCIE_SWITCH, ""),
            )
        )
        for consumer, _ in zone.allocations:
            out.held.add(zone.name)
            uid = consumer.rsplit("/", 1)[-1] if consumer else ""
            if uid:
                out.consumers.add(uid)
    if len({v.id for v in out.vfs}) != len(out.vfs):
        raise ValueError("duplicate VF zone names (representors)")
    return out


def _read_nics(zones: list[TopologyZone]) -> _CNRNic:
    """The NIC zones (children of Socket zones) of a CNR: what a new pod may use of each
    (`net_bandwidth` allocatable, Mbps), its socket, its network namespace and what the
    CNR's allocations hold on it."""
    out = _CNRNic()
    for zone in zones:
        if zone.type != names.ZONE_NIC or names.RESOURCE_SRIOV_NIC in zone.capacity:
            continue  # a VF zone is not a NIC of its own (_read_vfs)
        if not zone.name:
            raise ValueError("a NIC zone has no name (the resource identifier)")
        alloc = zone.allocatable.get(names.RESOURCE_NET_BANDWIDTH)
        socket = zone.attributes.get(names.GPU_ATTR_SOCKET, zone.parent)
        used = 0
        for consumer, reqs in zone.allocations:
            uid = consumer.rsplit("/", 1)[-1] if consumer else ""
            if uid:
                out.consumers.add(uid)
            q = reqs.get(names.RESOURCE_NET_BANDWIDTH)
            used += q.value() if q is not None else 0
        out.ids.append(zone.name)
        out.cap.append(max(alloc.value(), 0) if alloc is not None else 0)
        out.socket.append(int(socket) if socket.isdigit() else 0)
        out.host.append(not zone.attributes.get(names.NIC_ATTR_NETNS_NAME, ""))
        out.used.append(used)
    if len(set(out.ids)) != len(out.ids):
        raise ValueError("duplicate NIC zone names (resource identifiers)")
    return out


def _units(q: Any) -> int:
    return int(q.milli_value()) if q is not None else -1


def _read_gpus(zones: list[TopologyZone]) -> _CNRGpu:
    """The GPU zones (children of NUMA zones) of a CNR: each card's size and what a new
    pod may use of it (nothing when the card reports 0 `nvidia.com/gpu`), its NUMA node,
    socket, PCIe switch and model, and what the CNR's allocations hold on it."""
    out = _CNRGpu()
    numa_socket = {z.name: z.parent for z in zones if z.type == names.ZONE_NUMA}
    default = names.DEFAULT_GPU_MEMORY_PER_GPU * MILLI
    for zone in zones:
        if zone.type != names.ZONE_GPU:
            continue
        if not zone.name:
            raise ValueError("a GPU zone has no name (the device id)")
        attrs = zone.attributes
        size = _units(zone.allocatable.get(names.RESOURCE_GPU_MEMORY))
        if size < 0:
            size = _units(zone.capacity.get(names.RESOURCE_GPU_MEMORY))
        size = default if size < 0 else size
        healthy = _units(zone.allocatable.get(names.RESOURCE_NVIDIA_GPU)) != 0
        numa = attrs.get(names.GPU_ATTR_NUMA, zone.parent)
        socket = attrs.get(names.GPU_ATTR_SOCKET, numa_socket.get(zone.parent, "0"))
        used = 0
        for consumer, reqs in zone.allocations:
            uid = consumer.rsplit("/", 1)[-1] if consumer else ""
            if uid:
                out.consumers.add(uid)
            mem = _units(reqs.get(names.RESOURCE_GPU_MEMORY))
            used += mem if mem >= 0 else size if names.RESOURCE_NVIDIA_GPU in reqs else 0
        out.ids.append(zone.name)
        out.full.append(size)
        out.cap.append(size if healthy else 0)
        out.numa.append(int(numa) if numa.isdigit() else -1)
        out.socket.append(int(socket) if socket.isdigit() else 0)
        out.model.append(attrs.get(names.GPU_ATTR_MODEL, ""))
        out.pcie.append(attrs.get(names.GPU_ATTR_PCIE_SWITCH, ""))
        out.used.append(used)
    if len(set(out.ids)) != len(out.ids):
        raise ValueError("duplicate GPU zone names (device ids)")
    return out


def _allocatable(name: str, view: Node) -> dict[str, int]:
    """The node's allocatable amounts under canonical names; none when unreadable."""
    alloc: dict[str, int] = {}
    try:
        for res, q in view.allocatable().items():
            canon = canonical_resource(res)
            alloc[canon] = amount(canon, q)
    except (QuantityError, ValueError, TypeError) as exc:
        log.warning("node %s: unreadable status.allocatable ignored: %s", name, exc)
        return {}
    return alloc
