"""The devices pods hold through DRA claims, in the CNR (pure but for the two reads the
agent already makes): the kubelet's pod-resources lists each container's claimed devices by
driver, pool and device name. A card of this driver's becomes a whole-card hold of
`nvidia.com/gpu` under its id, as a card of another vendor's plugin is reported; a NIC's
zone lists the pod as a consumer (it holds the NIC through the claim, not bandwidth)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pykatalyst.agent.dra.slices import TYPE_GPU, TYPE_NIC, device_name
from pykatalyst.agent.host.devices import DeviceSource, DeviceUnavailable, GpuDevice
from pykatalyst.agent.host.kubelet import DeviceGrant, KubeletDevices, KubeletDevicesView
from pykatalyst.agent.host.nics import NicDevice
from pykatalyst.api import names

DRA = frozenset({names.DRA_DRIVER})
Zones = dict[int, list[dict[str, Any]]]


def card_grants(held: KubeletDevices, cards: Sequence[GpuDevice]) -> KubeletDevices:
    """`held` with each DRA grant of a card as a whole-card `nvidia.com/gpu` grant; DRA
    grants of other devices are left out (the GPU report does not read them)."""
    by_name = {device_name(TYPE_GPU, c.id): c.id for c in cards}
    out: list[DeviceGrant] = []
    for g in held.containers:
        if g.resource != names.DRA_DRIVER:
            out.append(g)
            continue
        ids = tuple(by_name[d] for d in g.device_ids if d in by_name)
        if ids:
            out.append(dataclasses.replace(g, resource=names.RESOURCE_NVIDIA_GPU, device_ids=ids))
    return dataclasses.replace(held, containers=tuple(out))


def gpu_assignments(
    view: KubeletDevicesView, resources: frozenset[str], cards: DeviceSource, dra: bool
) -> KubeletDevices:
    """The kubelet's grants of `resources`, with the cards claimed through DRA when `dra`
    (KubeletUnavailable as the view raises it)."""
    if not dra:
        return view.device_assignments(resources)
    held = view.device_assignments(resources | DRA)
    try:
        return card_grants(held, cards.gpus())
    except DeviceUnavailable:
        return card_grants(held, ())


def nic_consumers(
    held: KubeletDevices, nics: Sequence[NicDevice], uid_of: Callable[[str], str | None]
) -> dict[str, list[str]]:
    """NIC identifier → the `<ns>/<name>/<uid>` of each pod holding it through a claim."""
    by_name = {device_name(TYPE_NIC, n.identifier): n.identifier for n in nics}
    out: dict[str, set[str]] = {}
    for g in held.containers:
        if g.resource != names.DRA_DRIVER:
            continue
        uid = uid_of(f"{g.namespace}/{g.pod}") or ""
        for d in g.device_ids:
            if d in by_name:
                out.setdefault(by_name[d], set()).add(f"{g.namespace}/{g.pod}/{uid}")
    return {k: sorted(v) for k, v in out.items()}


def with_nic_consumers(zones: Zones, consumers: Mapping[str, list[str]]) -> Zones:
    """The NIC zones with the claim holders listed as allocations without requests."""
    out: Zones = {}
    for socket, items in zones.items():
        out[socket] = []
        for zone in items:
            who = consumers.get(str(zone.get("name")), [])
            if who and zone.get("type") == names.ZONE_NIC:
                zone = {**zone, "allocations": [*zone.get("allocations", [])]}
                zone["allocations"].extend({"consumer": c} for c in who)
            out[socket].append(zone)
    return out
