"""The node's ResourceSlices kept equal to its devices: gather (the device sources and the
slices of this node and driver) → pure `decide` (what to create, update and delete) → an
executor that only applies the plan.

The executor survives what it meets: a slice changed meanwhile (409) or created by
someone else (409) is read again at the next round; a slice of ours the API server refuses
to update in place (another pool name, a bad body left by an older version) is deleted and
written anew; every failure is recorded, never raised. The kubelet deletes the node's
slices when it starts: the next round writes them again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.config_sections import DraConfig
from pykatalyst.agent.dra.slices import JSON, DraDevice, build_slices, inventory
from pykatalyst.agent.host.devices import DeviceSource, DeviceUnavailable
from pykatalyst.agent.host.nics import NicDevice, NicSource
from pykatalyst.api import names
from pykatalyst.cluster.protocol import ApiError, Cluster, Conflict, Invalid, NotFound

log = logging.getLogger("pykatalyst.dra")


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """What to write so the cluster's slices are the node's pool."""

    creates: tuple[JSON, ...] = ()
    updates: tuple[JSON, ...] = ()
    deletes: tuple[str, ...] = ()
    generation: int = 0
    reason: str = "unchanged"

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)


def _generation(obj: Mapping[str, Any]) -> int:
    value = obj.get("spec", {}).get("pool", {}).get("generation", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _comparable(spec: Mapping[str, Any]) -> Any:
    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    return {**spec, "pool": pool}


def _same(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return bool(_comparable(have.get("spec") or {}) == _comparable(want["spec"]))


def _in_place(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """An update the API server accepts: driver, node and pool name are immutable."""
    spec = have.get("spec") or {}
    pool = spec.get("pool") or {}
    w = want["spec"]
    return bool(
        spec.get("driver") == w["driver"]
        and spec.get("nodeName") == w["nodeName"]
        and pool.get("name") == w["pool"]["name"]
    )


def decide(
    node: str, devices: Sequence[DraDevice], existing: Iterable[Mapping[str, Any]]
) -> SlicePlan:
    """The writes that make `existing` (the slices of this node and driver) the pool of
    `devices`. Unchanged slices are left alone; any change bumps the pool's generation."""
    have = {str(o.get("metadata", {}).get("name", "")): o for o in existing}
    current = max((_generation(o) for o in have.values()), default=0)
    want = build_slices(node, devices, current)
    unchanged = len(want) == len(have) and all(
        w["metadata"]["name"] in have
        and _same(have[w["metadata"]["name"]], w)
        and _generation(have[w["metadata"]["name"]]) == current
        for w in want
    )
    if unchanged:
        return SlicePlan(generation=current)
    generation = current + 1
    want = build_slices(node, devices, generation)
    creates, updates, deletes = [], [], []
    for w in want:
        old = have.pop(w["metadata"]["name"], None)
        if old is None:
            creates.append(w)
        elif _in_place(old, w):
            rv = old.get("metadata", {}).get("resourceVersion")
            updates.append({**w, "metadata": {**w["metadata"], "resourceVersion": rv}})
        else:
            deletes.append(w["metadata"]["name"])
            creates.append(w)
    deletes.extend(sorted(have))
    reason = f"{len(devices)} devices in {len(want)} slices, generation {generation}"
    return SlicePlan(tuple(creates), tuple(updates), tuple(deletes), generation, reason)


@dataclass(frozen=True, slots=True)
class Applied:
    """What the executor did and what failed (failures are retried at the next round)."""

    written: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


def apply(cluster: Cluster, plan: SlicePlan) -> Applied:
    """Apply `plan`; nothing it meets is raised."""
    written: list[str] = []
    failed: list[str] = []
    kind = names.RESOURCE_SLICE

    def attempt(what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
            written.append(what)
        except NotFound:
            if not what.startswith("delete"):
                failed.append(f"{what}: not found")
        except (Conflict, Invalid, ApiError) as exc:
            failed.append(f"{what}: {exc}")

    for name in plan.deletes:
        attempt(f"delete {name}", cluster.delete, kind, name)
    for obj in plan.updates:
        attempt(f"update {obj['metadata']['name']}", cluster.update, kind, obj)
    for obj in plan.creates:
        attempt(f"create {obj['metadata']['name']}", cluster.create, kind, obj)
    for f in failed:
        log.warning("ResourceSlice %s", f)
    return Applied(tuple(written), tuple(failed))


@dataclass(frozen=True, slots=True)
class Round:
    """One round of the publisher, for logs, metrics and tests."""

    plan: SlicePlan
    applied: Applied
    error: str = ""


class SlicePublisher:
    """Gathers the node's devices and slices, decides and applies, every `poll_s`."""

    def __init__(
        self,
        node: str,
        cluster: Cluster,
        cfg: DraConfig,
        gpus: DeviceSource | None,
        nics: NicSource | None,
    ) -> None:
        self.node = node
        self.cluster = cluster
        self.cfg = cfg
        self.gpus = gpus
        self.nics = nics

    def devices(self) -> tuple[DraDevice, ...]:
        cards = () if self.gpus is None else self.gpus.gpus()
        nics: Sequence[NicDevice] = () if self.nics is None else self.nics.nics()
        return inventory(cards, nics, self.cfg.pcie_roots, vfs=self.cfg.vfs)

    def existing(self) -> list[JSON]:
        selector = f"spec.nodeName={self.node},spec.driver={names.DRA_DRIVER}"
        listed = self.cluster.list(names.RESOURCE_SLICE, field_selector=selector)
        return list(listed.items)

    def tick(self, now: float = 0.0) -> Round:
        try:
            devices = self.devices()
            existing = self.existing()
        except (DeviceUnavailable, ApiError, OSError) as exc:
            log.warning("ResourceSlices of %s not reconciled: %s", self.node, exc)
            return Round(SlicePlan(reason="not gathered"), Applied(), str(exc))
        plan = decide(self.node, devices, existing)
        applied = apply(self.cluster, plan)
        if not plan.empty:
            log.info("ResourceSlices of %s: %s", self.node, plan.reason)
        return Round(plan, applied)
