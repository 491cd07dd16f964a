"""The device plugin's state and answers, apart from gRPC: the cards it advertises, the
preferred ids and the allocations it hands the kubelet (ledger.py decides; this holds the
state, reads the pods and the kubelet's grants, and writes the selection annotation).

Every answer reads the node's pods from the API server and the kubelet's grants from
pod-resources first, under one lock: the kubelet allocates one container at a time, and
the plugin's view is then as fresh as the kubelet's.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.config_sections import DevicesConfig
from pykatalyst.agent.deviceplugin import ledger as lg
from pykatalyst.agent.gpu import GPU_RESOURCES, GpuHold, holds_from
from pykatalyst.agent.host.devices import CONTROL_NODES, DeviceSource, DeviceUnavailable, GpuDevice
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletUnavailable
from pykatalyst.api import names
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.protocol import ApiError, Cluster

log = logging.getLogger("pykatalyst.deviceplugin")


@dataclass(frozen=True, slots=True)
class Advertised:
    """One id the plugin advertises."""

    id: str
    healthy: bool
    numa: int  # -1: none


@dataclass(frozen=True, slots=True)
class ContainerAnswer:
    """What `Allocate` tells the kubelet for one container."""

    envs: dict[str, str]
    devices: tuple[tuple[str, str], ...]  # (container path, host path)
    annotations: Mapping[str, str] = field(default_factory=dict)  # the container's


class GpuPlugin:
    """The cards, the ledger and the answers for one node."""

    def __init__(
        self,
        node: str,
        cluster: Cluster,
        source: DeviceSource,
        kubelet: KubeletDevicesView | None,
        cfg: DevicesConfig,
        clock: Clock,
        device_nodes: dict[str, str] | None = None,
    ) -> None:
        self.node = node
        self.cluster = cluster
        self.source = source
        self.kubelet = kubelet
        self.cfg = cfg
        self.clock = clock
        # card id -> host device node, for cards whose node is not /dev/nvidia<minor>
        self.device_nodes = device_nodes or {}
        self.per_gpu = cfg.gpu_memory_per_gpu
        self.shares = cfg.device_plugin.shares_per_gpu
        self.ledger = lg.Ledger()
        self.cards: tuple[GpuDevice, ...] = ()
        self._lock = threading.RLock()

    # --- cards ---------------------------------------------------------------------------

    def poll(self) -> bool:
        """Read the cards again; True when what is advertised changed. Cards that cannot be
        read leave the last list (logged)."""
        try:
            return self.load()
        except DeviceUnavailable as exc:
            log.warning("cards not read, the last list stays: %s", exc)
            return False

    def load(self) -> bool:
        """Read the cards again (DeviceUnavailable when they cannot be); True when what is
        advertised changed."""
        cards = self.source.gpus()
        with self._lock:
            changed = cards != self.cards
            self.cards = cards
        if changed:
            sick = [c.id for c in cards if not c.healthy]
            log.info("cards: %s; unhealthy: %s", [c.id for c in cards], sick or "none")
        return changed

    def advertised(self, resource: str) -> list[Advertised]:
        with self._lock:
            ids = lg.device_ids(self.cards, resource, self.shares, self.per_gpu)
        return [Advertised(i, c.healthy, c.numa) for i, c in ids]

    # --- the node's pods and grants -------------------------------------------------------

    def _refresh(self) -> tuple[list[lg.GpuPod], list[GpuHold], set[tuple[str, str, str]]]:
        try:
            listed = self.cluster.list(names.POD, field_selector=f"spec.nodeName={self.node}")
        except ApiError as exc:
            raise lg.AllocationRefused(f"cannot list the node's pods: {exc}") from None
        pods = []
        for obj in listed.items:
            try:
                p = lg.gpu_pod(obj)
            except ValueError as exc:
                log.warning("pod %s skipped: %s", obj.get("metadata", {}).get("name"), exc)
                continue
            if p is not None:
                pods.append(p)
        holds: list[GpuHold] = []
        held: set[tuple[str, str, str]] = set()
        if self.kubelet is not None:
            try:
                grants = self.kubelet.device_assignments(GPU_RESOURCES).containers
                holds = holds_from(grants, self.per_gpu)
                held = {(f"{g.namespace}/{g.pod}", g.container, g.resource) for g in grants}
            except KubeletUnavailable as exc:
                log.warning("the kubelet's grants are not known: %s", exc)
        ttl = self.cfg.device_plugin.pending_timeout_s
        pairs = {(k, c) for k, c, _ in held}
        self.ledger = self.ledger.prune({p.uid: p for p in pods}, pairs, self.clock.now(), ttl)
        return pods, holds, held

    def _grant(self, resource: str, size: int) -> tuple[lg.GpuPod, lg.Grant]:
        pods, holds, held = self._refresh()
        found = lg.target(pods, self.ledger, held, resource, size)
        if found is None:
            raise lg.AllocationRefused(
                f"no pod bound to {self.node} is waiting for {size} {resource}"
            )
        pod, ask = found
        if ask.refused:
            raise lg.AllocationRefused(f"{pod.key}: {ask.refused}")
        g = self.ledger.grants.get((pod.uid, ask.container))
        if g is None:
            use = lg.taken(holds, self.ledger, self.per_gpu)
            chosen = lg.choose(pod, ask, self.cards, use, self.per_gpu)
            g = lg.grant_for(pod, ask, chosen, self.per_gpu, self.clock.now())
            self.ledger = self.ledger.with_grant(g)
        return pod, g

    # --- answers ---------------------------------------------------------------------------

    def preferred(self, resource: str, available: Sequence[str], size: int) -> list[str]:
        """The ids the plugin would have the kubelet allocate: those of the cards of the
        pod being admitted; the kubelet's own choice (nothing) when there is no such pod."""
        with self._lock:
            try:
                pod, g = self._grant(resource, size)
            except lg.AllocationRefused as exc:
                log.warning("no preference for %d %s: %s", size, resource, exc)
                return []
            ids = lg.preferred_ids(g, resource, available, size)
            log.info("%s container %s: %s on %s", pod.key, g.container, resource, g.cards)
            return ids

    def allocate(self, resource: str, ids: Sequence[str]) -> ContainerAnswer:
        """The container's environment and device nodes; AllocationRefused when the ids
        are not the cards of the pod being admitted."""
        with self._lock:
            pod, g = self._grant(resource, len(ids))
            try:
                lg.check_ids(g, resource, ids)
            except lg.AllocationRefused:
                self.ledger = lg.Ledger(
                    {k: v for k, v in self.ledger.grants.items() if v is not g or v.resources}
                )
                raise
            self.ledger = lg.mark(self.ledger, g, resource)
            log.info("%s container %s: %s allocated on %s", pod.key, g.container, resource, g.cards)
            if pod.selection is None:
                self._annotate(pod)
            return self._answer(g, resource)

    def _annotate(self, pod: lg.GpuPod) -> None:
        """Write the pod's selection once every container has its cards (a pod another
        scheduler bound: the annotation then says where it runs)."""
        grants = [self.ledger.grants.get((pod.uid, a.container)) for a in pod.asks if not a.refused]
        if any(g is None or not g.complete for g in grants):
            return
        value = ",".join(c for g in grants if g is not None for c in g.cards)
        ns, _, name = pod.key.partition("/")
        patch = {"metadata": {"annotations": {names.GPU_SELECTION_RESULT_ANNOTATION: value}}}
        try:
            self.cluster.patch(names.POD, name, patch, ns)
        except ApiError as exc:
            log.warning(
                "%s: cannot write %s=%s: %s",
                pod.key,
                names.GPU_SELECTION_RESULT_ANNOTATION,
                value,
                exc,
            )

    def _answer(self, g: lg.Grant, resource: str) -> ContainerAnswer:
        by_id = {c.id: c for c in self.cards}
        envs = {names.ENV_NVIDIA_VISIBLE_DEVICES: ",".join(g.cards)}
        mib = [by_id[c].memory_mib for c in g.cards if c in by_id]
        if mib and all(m is not None for m in mib):
            limit = min(m for m in mib if m is not None) * g.per_card // self.per_gpu
            envs[names.ENV_CUDA_DEVICE_MEMORY_LIMIT] = f"{limit}m"
        if resource != lg.GPU:  # the card's device nodes come once, with nvidia.com/gpu
            return ContainerAnswer(envs, ())
        nodes: list[tuple[str, str]] = []
        for cid in g.cards:
            card = by_id.get(cid)
            if card is None or card.minor is None:
                continue
            inside = f"/dev/nvidia{card.minor}"
            nodes.append((inside, self.device_nodes.get(cid, inside)))
        if nodes:
            nodes += [(p, p) for p in CONTROL_NODES if os.path.exists(p)]
        return ContainerAnswer(envs, tuple(nodes))

    def snapshot(self) -> dict[str, Any]:
        """The ledger, for logs and tests."""
        with self._lock:
            return {
                f"{g.key}/{g.container}": {"cards": list(g.cards), "resources": sorted(g.resources)}
                for g in self.ledger.grants.values()
            }
