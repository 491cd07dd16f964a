"""SriovVF: one SR-IOV VF for each pod asking `resource.katalyst.kubewharf.io/sriov_nic: 1`,
from the VFs the snapshot reads off the CNRs (NIC zones with `sriov_nic`, children of
their PF's NIC zone) and the pods it has assumed. Katalyst's SR-IOV plugin rules
(topology/vf.py), moved from the node to the scheduler (its scheduler has none):

* PreFilter: a count other than 1, or more than one container asking, keeps the pod
  Pending naming the field; so does a cluster whose CNRs report no RDMA VF at all.
* Filter: a node with a free RDMA-capable VF.
* Reserve: the VF, in Katalyst's order (lowest VF index, then NUMA node, then PF name;
  sized by the cpus of a dedicated_cores pod under the dynamic policy), on the socket of
  the pod's NUMA binding when it has one; into `sriov_vf_result` (the representor name,
  written on the pod by the Binding; the agent's device plugin serves that VF) and into
  the snapshot. A pod that also asks GPUs placed card by card gets its VF from GPUShare,
  which picks cards and VF as one pair (topology/joint.py); this plugin then only filters.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import numpy as np

from pykatalyst.api import names
from pykatalyst.scheduler.args import SriovVFArgs
from pykatalyst.scheduler.plugins.base import (
    BIND_ANNOTATIONS,
    BOOL,
    IDX,
    REQUEUE_RESOURCES,
    CycleState,
    Key,
    Plugin,
    PluginContext,
)
from pykatalyst.scheduler.plugins.topology import NUMA_RESERVATION
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot
from pykatalyst.topology.joint import JointAsk, joint_ask
from pykatalyst.topology.vf import VfPolicy, choose_vf, sriov_problem

SRIOV: Final = names.RESOURCE_SRIOV_NIC
VF_RESERVATION: Final = Key[str]("SriovVF/reservation")

REASON_NO_VF: Final = "node(s) had no free RDMA-capable SR-IOV VF (sriov_nic)"


def pod_annotations(pod: PodInfo) -> dict[str, str]:
    meta = pod.raw.get("metadata") or {}
    return {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}


def joint_of(pod: PodInfo, ctx: PluginContext) -> JointAsk | None:
    """How a pod asking GPUs (placed card by card) and a VF wants them paired; None when
    it asks only one of them, pairs nothing (`none`), or the profile lacks GPUShare or
    SriovVF. ValueError for annotations that cannot be read."""
    enabled = ctx.enabled_filters
    if (
        not pod.gpu.cards
        or pod.request(SRIOV) <= 0
        or names.PLUGIN_GPU_SHARE not in enabled
        or names.PLUGIN_SRIOV_VF not in enabled
    ):
        return None
    ask = joint_ask(pod_annotations(pod))
    return None if ask.mode == names.GPU_RDMA_AFFINITY_NONE else ask


def vf_policy_of(ctx: PluginContext) -> VfPolicy:
    args = ctx.args.get(names.PLUGIN_SRIOV_VF)
    return args.vf_policy() if isinstance(args, SriovVFArgs) else SriovVFArgs().vf_policy()


def reserved_sockets(
    pod: PodInfo, state: CycleState, snap: NodeSnapshot, slot: int
) -> set[int] | None:
    """The sockets of the NUMA zones reserved for a NUMA-bound pod (None: any)."""
    res = state.get(NUMA_RESERVATION)
    if not pod.is_dedicated_numa or res is None:
        return None
    zones = int(snap.numa_count[slot])
    ids, socks = snap.numa_id[:zones, slot], snap.numa_socket[:zones, slot]
    return {int(s) for i, s in zip(ids, socks, strict=True) if int(i) in res.numa_ids}


class SriovVF(Plugin):
    name: ClassVar[str] = names.PLUGIN_SRIOV_VF
    requeue = REQUEUE_RESOURCES

    def __init__(self, args: Any, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        self.policy: VfPolicy = (
            args.vf_policy() if isinstance(args, SriovVFArgs) else SriovVFArgs().vf_policy()
        )

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        if pod.request(SRIOV) <= 0:
            return None
        problem = sriov_problem(pod.raw)
        if problem:
            return problem
        if (
            snap.n
            and not snap.vf_free[: snap.n].any()
            and not any(v.rdma for name in snap.names[: snap.n] for v in snap.vf_slots(name))
        ):
            return f"the pod asks {SRIOV}: 1; no node's CNR reports an RDMA-capable SR-IOV VF"
        return None

    def _size(self, pod: PodInfo) -> tuple[int, bool] | None:
        qos = pod.qos
        dedicated = qos is not None and qos.is_dedicated
        return self.policy.size_for(self._cpus(pod), dedicated, self._annotations(pod))

    @staticmethod
    def _annotations(pod: PodInfo) -> dict[str, str]:
        return pod_annotations(pod)

    @staticmethod
    def _cpus(pod: PodInfo) -> int:
        return pod.request(names.RESOURCE_CPU) // 1000

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if pod.request(SRIOV) <= 0:
            return None
        passes = np.asarray(snap.vf_free[: snap.n] > 0, np.bool_)
        size = self._size(pod)
        if size is not None and size[1]:
            # the dynamic policy's refusing size: a free VF of that many queues
            for i in np.flatnonzero(passes):
                node = snap.names[int(i)]
                taken = snap.vf_taken(node)
                passes[i] = any(
                    v.rdma and v.allocatable and v.id not in taken and v.queue_count == size[0]
                    for v in snap.vf_slots(node)
                )
        return passes

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        size = self._size(pod)
        if size is None or not size[1]:
            return [(REASON_NO_VF,)] * len(idx)
        sized = (
            f"node(s) had no free {size[0]}-queue SR-IOV VF for {self._cpus(pod)} dedicated "
            "cpus (dynamic policy)"
        )
        return [(REASON_NO_VF if snap.vf_free[i] <= 0 else sized,) for i in idx]

    # --- reserve --------------------------------------------------------------------------

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        slot = snap.index.get(node)
        if pod.request(SRIOV) <= 0 or slot is None:
            return None
        if snap.gpu_count[slot] and self._paired_by_gpu_share(pod):
            return None  # GPUShare gives the VF with the cards
        qos = pod.qos
        choice = choose_vf(
            snap.vf_slots(node),
            snap.vf_taken(node),
            self.policy,
            sockets=reserved_sockets(pod, state, snap, slot),
            cpus=self._cpus(pod),
            dedicated=qos is not None and qos.is_dedicated,
            annotations=self._annotations(pod),
        )
        if choice.vf is None:
            return f"{choice.reason} on node {node}"
        state[VF_RESERVATION] = choice.vf.id
        notes = state.setdefault(BIND_ANNOTATIONS, {})
        notes[names.SRIOV_VF_RESULT_ANNOTATION] = choice.vf.id
        notes[names.SRIOV_VF_REASON_ANNOTATION] = choice.reason
        return None

    def _paired_by_gpu_share(self, pod: PodInfo) -> bool:
        try:
            return joint_of(pod, self.ctx) is not None
        except ValueError:
            return False  # GPUShare's PreFilter refuses the pod

    def unreserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        state.pop(VF_RESERVATION, None)
        notes = state.get(BIND_ANNOTATIONS)
        if notes is not None:
            notes.pop(names.SRIOV_VF_RESULT_ANNOTATION, None)
            notes.pop(names.SRIOV_VF_REASON_ANNOTATION, None)
