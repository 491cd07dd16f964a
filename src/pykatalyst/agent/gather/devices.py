"""The GPU and NIC zones the agent reports, read each tick it publishes: the cards and
NICs from their sources, who holds them from the kubelet (device plugins and DRA claims);
the last good zones while a source cannot be read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykatalyst.agent import gpu, nic
from pykatalyst.agent.config_sections import DevicesConfig
from pykatalyst.agent.dra import holds as dra_holds
from pykatalyst.agent.host.devices import DeviceSource, DeviceUnavailable
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletUnavailable
from pykatalyst.agent.host.nics import NicSource
from pykatalyst.agent.inputs import GpuReport, NicReport, Zones
from pykatalyst.agent.pods import PodSpec, nic_hold
from pykatalyst.api import names
from pykatalyst.topology.machine import CPUTopology


class DeviceReader:
    """Reads the GPU and NIC zones; keeps the last good ones."""

    def __init__(
        self,
        cfg: DevicesConfig,
        topology: CPUTopology,
        devices: DeviceSource | None,
        device_view: KubeletDevicesView | None,
        nics: NicSource | None,
    ) -> None:
        self.cfg = cfg
        self.topology = topology
        self.devices = devices
        self.device_view = device_view
        self.nics = nics
        self.gpu_report: tuple[Zones, list[dict[str, Any]]] = ({}, [])
        self.nic_report: Zones = {}

    def gpus(self, specs: Mapping[str, PodSpec]) -> GpuReport:
        """The GPU zones and spec properties to report, and how they were read: the last
        good ones while the cards cannot be read; capacity only while the kubelet cannot
        say who holds them."""
        assert self.devices is not None
        held = None
        note = "cards and holds read"
        if self.device_view is not None:
            try:
                held = dra_holds.gpu_assignments(
                    self.device_view, gpu.GPU_RESOURCES, self.devices, self.cfg.dra.enabled
                )
            except KubeletUnavailable as exc:
                note = f"holds unknown: {exc}"
        uids = {s.key: s.uid for s in specs.values()}
        try:
            self.gpu_report = gpu.node_gpu_report(
                self.devices, held, self.cfg.gpu_memory_per_gpu, self.topology, uids.get
            )
        except DeviceUnavailable as exc:
            note = f"cards unreadable, last report kept: {exc}"
        return self.gpu_report[0], self.gpu_report[1], note

    def nic_zones(self, specs: Mapping[str, PodSpec]) -> NicReport:
        """The NIC zones to report and how they were read (the last good ones while the
        NICs cannot be read)."""
        assert self.nics is not None
        pods = [
            nic.BandwidthPod(s.namespace, s.name, s.uid, *nic_hold(s), _vf_hold(s))
            for s in specs.values()
        ]
        try:
            self.nic_report = nic.node_nic_report(self.nics, self.cfg.nic, pods, self.topology)
        except DeviceUnavailable as exc:
            return self.nic_report, f"NICs unreadable, last report kept: {exc}"
        if self.cfg.dra.enabled and self.device_view is not None:
            self.nic_report = self._with_claimed_nics(self.nic_report, specs)
        return self.nic_report, "NICs and holds read"

    def _with_claimed_nics(self, zones: Zones, specs: Mapping[str, PodSpec]) -> Zones:
        """The NIC zones with the pods holding a NIC through a DRA claim."""
        assert self.device_view is not None and self.nics is not None
        try:
            held = self.device_view.device_assignments(dra_holds.DRA)
            nics = self.nics.nics()
        except (KubeletUnavailable, DeviceUnavailable):
            return zones
        uids = {s.key: s.uid for s in specs.values()}
        return dra_holds.with_nic_consumers(zones, dra_holds.nic_consumers(held, nics, uids.get))


def _vf_hold(s: PodSpec) -> str:
    """The SR-IOV VF a pod asking sriov_nic holds (its sriov_vf_result; "" otherwise)."""
    if s.digest.request(names.RESOURCE_SRIOV_NIC) <= 0:
        return ""
    return str(s.digest.annotations.get(names.SRIOV_VF_RESULT_ANNOTATION) or "")
