"""The device plugin's SR-IOV side: the node's VFs advertised to the kubelet as
`resource.katalyst.kubewharf.io/sriov_nic` (one device id per VF, its representor name;
a VF that is not RDMA-capable or whose PF is unhealthy is advertised Unhealthy, so the
kubelet counts it and gives it to no one), and each container's VF served as Katalyst's
SR-IOV plugin serves it:

- the VF is the pod's `sriov_vf_result` (the scheduler's choice) when it is free; for a pod
  no scheduler chose one for, the plugin picks it by the same rule (topology/vf.py) and
  writes the annotation;
- the container gets the VF's RDMA device nodes under /dev/infiniband and
  /dev/infiniband/rdma_cm, the `pci-devices` annotation (JSON `[{"address", "repName",
  "vfName"}]`) and, for a VF in another network namespace, `netns`; pykatalyst adds the
  VF's PCI address and representor to the environment.

The pod being admitted is found as for the cards (ledger.py): the first bound, pending pod
still owed a VF. What is taken is what pod-resources `List` says containers hold, plus the
grants made here that `List` does not show yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.config_sections import NicsConfig
from pykatalyst.agent.deviceplugin import ledger as lg
from pykatalyst.agent.deviceplugin.plugin import Advertised, ContainerAnswer
from pykatalyst.agent.host.devices import DeviceUnavailable
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletUnavailable
from pykatalyst.agent.host.nics import NicDevice, NicSource
from pykatalyst.agent.host.sriov import VfDevice
from pykatalyst.agent.sriov import vf_slot
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.protocol import ApiError, Cluster
from pykatalyst.topology.vf import choose_vf, sriov_problem

log = logging.getLogger("pykatalyst.deviceplugin")

SRIOV = names.RESOURCE_SRIOV_NIC
NETNS_DIR = "/var/run/netns"


@dataclass(frozen=True, slots=True)
class VfPod:
    """A pod on the node that asks a VF."""

    key: str  # namespace/name
    uid: str
    container: str
    order: tuple[float, int, float, str]  # the kubelet's admission order
    selection: str  # its sriov_vf_result ("" without one)
    pending: bool
    problem: str = ""
    cpus: int = 0  # milli-cpus requested
    dedicated: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)


def vf_pod(obj: Mapping[str, Any]) -> VfPod | None:
    """The pod's VF ask, None when it asks none."""
    spec = obj.get("spec") or {}
    container = ""
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        if SRIOV in {**(res.get("requests") or {}), **(res.get("limits") or {})}:
            container = str(c.get("name", ""))
            break
    if not container:
        return None
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    bound, created, pending = lg.admission(obj)
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    cpu = 0  # milli
    for c in spec.get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        with contextlib.suppress(ValueError):
            cpu += Quantity.parse(str(req.get("cpu", 0))).milli_value()
    return VfPod(
        key,
        str(meta.get("uid", "")),
        container,
        (bound, lg._version(meta.get("resourceVersion")), created, key),
        str(ann.get(names.SRIOV_VF_RESULT_ANNOTATION) or "").strip(),
        pending=pending,
        problem=sriov_problem(obj),
        cpus=cpu,
        dedicated=ann.get(names.QOS_LEVEL_ANNOTATION) == names.QOS_DEDICATED_CORES,
        annotations={str(k): str(v) for k, v in ann.items()},
    )


@dataclass(frozen=True, slots=True)
class VfGrant:
    uid: str
    key: str
    container: str
    vf: str
    at: float
    allocated: bool = False


class SriovPlugin:
    """The VFs, the grants and the answers for one node."""

    def __init__(
        self,
        node: str,
        cluster: Cluster,
        source: NicSource,
        kubelet: KubeletDevicesView | None,
        cfg: NicsConfig,
        clock: Clock,
        pending_timeout_s: float = 300.0,
    ) -> None:
        self.node = node
        self.cluster = cluster
        self.source = source
        self.kubelet = kubelet
        self.cfg = cfg
        self.clock = clock
        self.ttl = pending_timeout_s
        self.policy = cfg.sriov.vf_policy()
        self.nics: tuple[NicDevice, ...] = ()
        self.grants: dict[str, VfGrant] = {}  # by pod uid
        self._lock = threading.RLock()

    # --- VFs ------------------------------------------------------------------------------

    def poll(self) -> bool:
        try:
            return self.load()
        except DeviceUnavailable as exc:
            log.warning("NICs not read, the last list stays: %s", exc)
            return False

    def load(self) -> bool:
        nics = self.source.nics()
        with self._lock:
            changed = nics != self.nics
            self.nics = nics
        if changed:
            log.info("VFs: %s", [v.rep_name for n in nics for v in n.vfs])
        return changed

    def vfs(self) -> dict[str, tuple[NicDevice, VfDevice]]:
        with self._lock:
            return {v.rep_name: (n, v) for n in self.nics for v in n.vfs}

    def advertised(self, resource: str) -> list[Advertised]:
        return [
            Advertised(vid, vf.rdma and nic.healthy, vf.numa)
            for vid, (nic, vf) in sorted(self.vfs().items())
        ]

    # --- pods and grants --------------------------------------------------------------------

    def _refresh(self) -> tuple[list[VfPod], set[str], set[str]]:
        """The node's VF pods, the VFs containers hold, and (pod key) those `List` shows."""
        try:
            listed = self.cluster.list(names.POD, field_selector=f"spec.nodeName={self.node}")
        except ApiError as exc:
            raise lg.AllocationRefused(f"cannot list the node's pods: {exc}") from None
        pods = [p for p in (vf_pod(o) for o in listed.items) if p is not None]
        held: set[str] = set()
        shown: set[str] = set()
        if self.kubelet is not None:
            try:
                for g in self.kubelet.device_assignments(frozenset({SRIOV})).containers:
                    held.update(g.device_ids)
                    shown.add(f"{g.namespace}/{g.pod}")
            except KubeletUnavailable as exc:
                log.warning("the kubelet's grants are not known: %s", exc)
        by_uid = {p.uid: p for p in pods}
        now = self.clock.now()
        self.grants = {
            uid: g
            for uid, g in self.grants.items()
            if uid in by_uid
            and by_uid[uid].pending
            and now - g.at <= self.ttl
            and not (g.allocated and g.key in shown)
        }
        return pods, held, shown

    def _grant(self) -> tuple[VfPod, VfGrant]:
        pods, held, shown = self._refresh()
        order = sorted((p for p in pods if p.pending), key=lambda p: p.order)
        pod = next(
            (
                p
                for p in order
                if p.key not in shown
                and not (p.uid in self.grants and self.grants[p.uid].allocated)
            ),
            None,
        )
        if pod is None:
            raise lg.AllocationRefused(f"no pod bound to {self.node} is waiting for {SRIOV}")
        if pod.problem:
            raise lg.AllocationRefused(f"{pod.key}: {pod.problem}")
        g = self.grants.get(pod.uid)
        if g is None:
            taken = held | {x.vf for x in self.grants.values()}
            g = VfGrant(pod.uid, pod.key, pod.container, self._choose(pod, taken), self.clock.now())
            self.grants[pod.uid] = g
        return pod, g

    def _choose(self, pod: VfPod, taken: set[str]) -> str:
        vfs = self.vfs()
        if pod.selection:
            found = vfs.get(pod.selection)
            if found is None:
                raise lg.AllocationRefused(
                    f"{pod.key}: {names.SRIOV_VF_RESULT_ANNOTATION}={pod.selection}: "
                    "no such VF on this node"
                )
            nic, vf = found
            if not (vf.rdma and nic.healthy) or pod.selection in taken:
                raise lg.AllocationRefused(
                    f"{pod.key}: selected VF {pod.selection} is taken, not RDMA-capable or on "
                    "an unhealthy PF"
                )
            return pod.selection
        # no socket to keep to: the kubelet's device plugin API says nothing of the pod's
        slots = [vf_slot(v, 0, n.healthy) for n, v in vfs.values()]
        choice = choose_vf(
            slots,
            taken,
            self.policy,
            cpus=pod.cpus // 1000,
            dedicated=pod.dedicated,
            annotations=pod.annotations,
        )
        if choice.vf is None:
            raise lg.AllocationRefused(f"{pod.key}: {choice.reason}")
        return choice.vf.id

    # --- answers ----------------------------------------------------------------------------

    def preferred(self, resource: str, available: Sequence[str], size: int) -> list[str]:
        with self._lock:
            try:
                pod, g = self._grant()
            except lg.AllocationRefused as exc:
                log.warning("no preference for %d %s: %s", size, resource, exc)
                return []
            log.info("%s container %s: VF %s", pod.key, g.container, g.vf)
            return [g.vf] if g.vf in available else []

    def allocate(self, resource: str, ids: Sequence[str]) -> ContainerAnswer:
        with self._lock:
            pod, g = self._grant()
            if list(ids) != [g.vf]:
                self.grants.pop(pod.uid, None)
                raise lg.AllocationRefused(
                    f"{pod.key} container {g.container}: the kubelet offered {list(ids)}, "
                    f"the pod's VF is {g.vf}"
                )
            self.grants[pod.uid] = VfGrant(g.uid, g.key, g.container, g.vf, g.at, True)
            log.info("%s container %s: VF %s allocated", pod.key, g.container, g.vf)
            if pod.selection != g.vf:
                self._annotate(pod, g.vf)
            return self.answer(g.vf)

    def _annotate(self, pod: VfPod, vf: str) -> None:
        ns, _, name = pod.key.partition("/")
        patch = {"metadata": {"annotations": {names.SRIOV_VF_RESULT_ANNOTATION: vf}}}
        try:
            self.cluster.patch(names.POD, name, patch, ns)
        except ApiError as exc:
            log.warning(
                "%s: cannot write %s=%s: %s", pod.key, names.SRIOV_VF_RESULT_ANNOTATION, vf, exc
            )

    def answer(self, vid: str) -> ContainerAnswer:
        """What the container holding VF `vid` is given."""
        _, vf = self.vfs()[vid]
        stand_in = self.cfg.sriov.device_node
        nodes = [
            (
                os.path.join(names.SRIOV_RDMA_DEVICE_DIR, d),
                stand_in or os.path.join(names.SRIOV_RDMA_DEVICE_DIR, d),
            )
            for d in vf.ib_devices
        ]
        if nodes:
            nodes.append((names.SRIOV_RDMA_CM, stand_in or names.SRIOV_RDMA_CM))
        pci = [{"address": vf.pci_address, "repName": vf.rep_name, "vfName": vf.name}]
        notes = {names.SRIOV_PCI_DEVICES_ANNOTATION: json.dumps(pci, separators=(",", ":"))}
        if vf.netns:
            notes[names.SRIOV_NETNS_ANNOTATION] = os.path.join(NETNS_DIR, vf.netns)
        envs = {
            names.ENV_SRIOV_VF_PCI_ADDRESS: vf.pci_address,
            names.ENV_SRIOV_VF_REP_NAME: vf.rep_name,
        }
        return ContainerAnswer(envs, tuple(nodes), notes)
