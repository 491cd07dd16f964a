"""Which SR-IOV virtual function (VF) a pod gets (pure): Katalyst's SR-IOV resource plugin
rules, shared by the scheduler (which picks the VF before the Binding) and the device
plugin (which serves it, and picks it itself for a pod no scheduler chose one for).

A pod asks `resource.katalyst.kubewharf.io/sriov_nic: 1` (exactly 1, in one container: the
plugin refuses any other count). It gets one VF that is RDMA-capable, not held by another
pod, given out by a healthy PF, and on the socket of its NUMA binding when it has one
(Katalyst's hints are per socket for a NUMA-bound pod). Among those, Katalyst's order:
lowest VF index first, then lowest NUMA node, then PF name — so the VF 0s of every PF go
before any VF 1, spreading pods over the PFs.

The `dynamic` policy (Katalyst's `--sriov-policy-name dynamic`) sizes the VF by the pod's
cpus: a dedicated_cores pod with at least `large_cpu_threshold` (24) cpus gets a VF of
`large_queue_count` (32) queues, one with at least `small_cpu_threshold` (8) a VF of
`small_queue_count` (8) queues. When no VF of that size is free, the large size refuses
(`large_fail_on_exhaustion`) and the small size does not: it falls back to the static rule
(Katalyst leaves such a pod without a VF; on a vanilla kubelet a pod that asked for one
must get one or wait).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity

SRIOV = names.RESOURCE_SRIOV_NIC


@dataclass(frozen=True, slots=True)
class VfSlot:
    """One VF as allocation sees it."""

    id: str  # the representor name (sriov_vf_result)
    pf: str
    index: int
    numa: int = -1
    socket: int = 0
    rdma: bool = True
    queue_count: int = -1
    allocatable: bool = True  # its PF is healthy and gives it out
    pcie_switch: str = ""  # the PCIe switch its PF hangs off ("" unknown)


@dataclass(frozen=True, slots=True)
class VfPolicy:
    """Katalyst's SR-IOV policy and its dynamic sizes (its flag defaults)."""

    name: str = names.SRIOV_POLICY_STATIC
    large_queue_count: int = names.DEFAULT_SRIOV_LARGE_VF_QUEUE_COUNT
    large_cpu_threshold: int = names.DEFAULT_SRIOV_LARGE_VF_CPU_THRESHOLD
    large_fail_on_exhaustion: bool = True
    small_queue_count: int = names.DEFAULT_SRIOV_SMALL_VF_QUEUE_COUNT
    small_cpu_threshold: int = names.DEFAULT_SRIOV_SMALL_VF_CPU_THRESHOLD
    small_fail_on_exhaustion: bool = False
    # the annotations a pod must carry for the dynamic sizes (Katalyst's
    # --dynamic-pod-vf-required-annotations); others take the static rule
    required_annotations: tuple[tuple[str, str], ...] = ()

    def size_for(
        self, cpus: int, dedicated: bool, annotations: Mapping[str, str] | None = None
    ) -> tuple[int, bool] | None:
        """(queue count, refuse when none is free) the dynamic policy asks for a pod with
        `cpus` whole cpus and `annotations`; None: no size (the static rule)."""
        if self.name != names.SRIOV_POLICY_DYNAMIC or not dedicated:
            return None
        ann = annotations or {}
        if any(ann.get(k) != v for k, v in self.required_annotations):
            return None
        if cpus >= self.large_cpu_threshold:
            return self.large_queue_count, self.large_fail_on_exhaustion
        if cpus >= self.small_cpu_threshold:
            return self.small_queue_count, self.small_fail_on_exhaustion
        return None


def katalyst_order(vf: VfSlot) -> tuple[int, int, str]:
    return (vf.index, vf.numa, vf.pf)


def sriov_count(containers: Iterable[Mapping[str, object]]) -> int:
    """The VFs a pod spec's containers ask in all (limits over requests, as extended
    resources are asked); ValueError naming the field when a value is not a whole
    number, is not 1, or more than one container asks."""
    total = 0
    for c in containers:
        res = c.get("resources") or {}
        assert isinstance(res, Mapping)
        asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        value = asked.get(SRIOV)
        if value is None:
            continue
        where = f"container {c.get('name', '')} resources {SRIOV}"
        try:
            q = Quantity.parse(str(value))
        except ValueError:
            raise ValueError(f"{where}: {value!r} is not a quantity; accepted: 1") from None
        if q.milli_value() == 0:
            continue
        if q.milli_value() != 1000:
            raise ValueError(f"{where}: {value!r}; accepted: 1 (one VF per pod)")
        total += 1
    if total > 1:
        raise ValueError(f"{total} containers ask {SRIOV}; accepted: one VF per pod")
    return total


def sriov_problem(pod: Mapping[str, Any]) -> str:
    """Why a pod's `sriov_nic` ask cannot be served ("" when it can): a count other than 1,
    more than one container asking, or an init container asking."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    try:
        sriov_count(spec.get("containers") or [])
        inits = sriov_count(spec.get("initContainers") or [])
    except ValueError as exc:
        return str(exc)
    if inits:
        return f"an init container asks {SRIOV}; accepted: in spec.containers only"
    return ""


@dataclass(frozen=True, slots=True)
class VfChoice:
    """The VF picked (None: none fits) and why, in one line."""

    vf: VfSlot | None
    reason: str


@dataclass(frozen=True, slots=True)
class VfCandidates:
    """The VFs a pod may get (empty: `refusal` says why), with what narrowed them."""

    vfs: list[VfSlot]
    where: str = ""
    sized: str = ""
    refusal: str = ""


def vf_candidates(
    vfs: Iterable[VfSlot],
    taken: Set[str],
    policy: VfPolicy,
    *,
    sockets: Set[int] | None = None,
    cpus: int = 0,
    dedicated: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> VfCandidates:
    """Every VF the pod may get: free, RDMA-capable and allocatable, on `sockets` when
    given (the pod's NUMA binding), of the dynamic policy's size when it asks one."""
    free = [v for v in vfs if v.rdma and v.allocatable and v.id not in taken]
    if not free:
        return VfCandidates([], refusal="no free RDMA-capable VF")
    where = ""
    if sockets is not None:
        free = [v for v in free if v.socket in sockets]
        where = f" on socket {','.join(map(str, sorted(sockets)))} (the pod's NUMA binding)"
        if not free:
            return VfCandidates([], where, refusal=f"no free RDMA-capable VF{where}")
    size = policy.size_for(cpus, dedicated, annotations)
    sized = ""
    if size is not None:
        queues, refuse = size
        exact = [v for v in free if v.queue_count == queues]
        if exact:
            free, sized = exact, f", {queues} queues for {cpus} dedicated cpus (dynamic policy)"
        elif refuse:
            return VfCandidates(
                [], where, refusal=f"no free {queues}-queue VF{where} for {cpus} dedicated cpus"
            )
        else:
            sized = f", no {queues}-queue VF free: any size (dynamic policy)"
    return VfCandidates(free, where, sized)


def choose_vf(
    vfs: Iterable[VfSlot],
    taken: Set[str],
    policy: VfPolicy,
    *,
    sockets: Set[int] | None = None,
    cpus: int = 0,
    dedicated: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> VfChoice:
    """The VF for one pod: among `vf_candidates`, the first in Katalyst's order."""
    c = vf_candidates(
        vfs,
        taken,
        policy,
        sockets=sockets,
        cpus=cpus,
        dedicated=dedicated,
        annotations=annotations,
    )
    if not c.vfs:
        return VfChoice(None, c.refusal)
    best = min(c.vfs, key=katalyst_order)
    return VfChoice(
        best,
        f"VF {best.index} of {best.pf} ({best.id}){c.where}{c.sized}: the lowest VF index free, "
        "then NUMA node, then PF name (Katalyst's order)",
    )
