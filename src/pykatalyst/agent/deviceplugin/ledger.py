"""Which pod the kubelet is admitting, and which cards it gets (pure).

The device plugin API tells a plugin neither the pod nor the container it allocates for:
`GetPreferredAllocation` and `Allocate` carry a resource, a count and device ids. The
plugin finds the pod the way the kubelet admits them: among the node's pods that are
bound, not yet running and still owed a GPU resource of that count, the one bound first,
and in it the first container, in spec order, that asks it. "Bound first" is PodScheduled's
time, which has whole seconds only; within a second, the pod's resourceVersion (for a pod
not yet admitted, that of its binding: the kubelet's watch delivers pods in that order, and
two pods a scheduler binds at once may be bound in either order), then creation time, then
name. Cards are the pod's `gpu_selection_result` (ids in allocation
order; a pod's containers take them in turn), checked against what is free; without
one, the plugin picks them as Katalyst's gpu-memory strategy sorts them (the fullest card
the share still fits, so shares pack and whole cards stay free) and writes the annotation.

What is taken of each card is what the kubelet's pod-resources `List` says containers
hold, plus the grants this plugin made that `List` does not show yet. No card is ever
given more units than it has, nor shared while a container holds it whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from pykatalyst.agent.gpu import CardUse, GpuHold, card_of, card_use, slot_id, unit_id
from pykatalyst.agent.host.devices import GpuDevice
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import parse_rfc3339

GPU = names.RESOURCE_NVIDIA_GPU
MEM = names.RESOURCE_GPU_MEMORY
UNKNOWN_VERSION = 2**63  # a resourceVersion that is not a number sorts last


class AllocationRefused(Exception):
    """The kubelet's request cannot be honoured; the message says why (the kubelet shows
    it on the pod as an admission error)."""


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """One container's ask: `cards` cards (nvidia.com/gpu) and `units` of their memory in
    all (gpu_memory; 0: the cards whole)."""

    container: str
    cards: int
    units: int = 0
    refused: str = ""  # why the container is not served (an init container's ask)

    def size(self, resource: str) -> int:
        return self.cards if resource == GPU else self.units

    def resources(self) -> frozenset[str]:
        return frozenset({GPU, MEM}) if self.units else frozenset({GPU})


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A pod on the node that asks for cards."""

    key: str  # namespace/name
    uid: str
    bound_at: float
    created_at: float
    asks: tuple[GpuAsk, ...]
    selection: tuple[str, ...] | None
    pending: bool  # bound, not started, not being deleted
    version: int = UNKNOWN_VERSION  # resourceVersion: the binding's while the pod waits


@dataclass(frozen=True, slots=True)
class Grant:
    """The cards one container was given, and the resources allocated so far."""

    uid: str
    key: str
    container: str
    cards: tuple[str, ...]
    per_card: int  # units on each card (the whole card's when whole)
    whole: bool
    wants: frozenset[str]  # the resources it asks
    resources: frozenset[str] = frozenset()  # those allocated so far
    at: float = 0.0

    @property
    def complete(self) -> bool:
        return self.resources >= self.wants


@dataclass(frozen=True, slots=True)
class Ledger:
    """The plugin's grants, by (pod uid, container)."""

    grants: Mapping[tuple[str, str], Grant] = field(default_factory=dict)

    def with_grant(self, g: Grant) -> Ledger:
        return Ledger({**self.grants, (g.uid, g.container): g})

    def prune(
        self, pods: Mapping[str, GpuPod], held: set[tuple[str, str]], now: float, ttl: float
    ) -> Ledger:
        """Drop grants of pods gone or no longer waiting (running, `List` shows what
        they hold; failed, they hold nothing), the complete ones `List` already shows
        (it is then the truth), and those older than `ttl`: the kubelet gave up."""
        keep = {}
        for k, g in self.grants.items():
            if g.uid not in pods or not pods[g.uid].pending or now - g.at > ttl:
                continue
            if g.complete and (g.key, g.container) in held:
                continue
            keep[k] = g
        return Ledger(keep)


# --- pods ---------------------------------------------------------------------------------


def _count(value: Any, where: str) -> int:
    try:
        q = Quantity.parse(str(value))
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not a quantity") from None
    if q.milli_value() % 1000 or q.value() < 0:
        raise ValueError(f"{where}: {value!r} must be a whole, non-negative number")
    return q.value()


def _time(text: Any) -> float:
    try:
        return parse_rfc3339(str(text)) if text else 0.0
    except ValueError:
        return 0.0


def gpu_asks(spec: Mapping[str, Any]) -> tuple[GpuAsk, ...]:
    """The cards each container of a pod spec asks for (limits, as extended resources
    are asked; requests when there are no limits); ValueError naming the field."""
    inits = (_init_ask(c) for c in spec.get("initContainers") or [])
    out = [a for a in inits if a is not None]
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        name = c.get("name", "")
        where = f"container {name} resources"
        cards = _count(asked.get(GPU, 0), f"{where} {GPU}")
        units = _count(asked.get(MEM, 0), f"{where} {MEM}")
        if units and not cards:
            raise ValueError(f"{where}: {MEM} without {GPU} (ask {GPU}: N with it)")
        if cards:
            if units % cards:
                raise ValueError(f"{where}: {MEM} {units} does not split evenly over {cards} cards")
            out.append(GpuAsk(name, cards, units))
    return tuple(out)


def _init_ask(c: Mapping[str, Any]) -> GpuAsk | None:
    """An init container's ask, refused: the kubelet allocates init containers first and
    hands their ids on to the next containers, which a card's split cannot follow (the
    scheduler and the webhook refuse such pods; this answers one that got past them, so
    that its Allocate fails with the reason instead of taking another pod's turn)."""
    res = c.get("resources") or {}
    asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    sizes = {}
    for r in (GPU, MEM):
        try:
            sizes[r] = _count(asked.get(r, 0), f"init container {c.get('name', '')} {r}")
        except ValueError:
            sizes[r] = 0
    if not any(sizes.values()):
        return None
    what = " and ".join(f"{n} {r}" for r, n in sizes.items() if n)
    why = (
        f"init container {c.get('name', '')} asks for {what}; this device plugin serves "
        "the containers of spec.containers only"
    )
    return GpuAsk(str(c.get("name", "")), sizes[GPU], sizes[MEM], refused=why)


def gpu_pod(obj: Mapping[str, Any]) -> GpuPod | None:
    """The pod's GPU asks, None when it asks none; ValueError when they cannot be read."""
    meta = obj.get("metadata") or {}
    asks = gpu_asks(obj.get("spec") or {})
    if not asks:
        return None
    raw = (meta.get("annotations") or {}).get(names.GPU_SELECTION_RESULT_ANNOTATION)
    selection = tuple(s.strip() for s in raw.split(",") if s.strip()) if raw else None
    bound, created, pending = admission(obj)
    return GpuPod(
        f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        str(meta.get("uid", "")),
        bound,
        created,
        asks,
        selection,
        pending=pending,
        version=_version(meta.get("resourceVersion")),
    )


def admission(obj: Mapping[str, Any]) -> tuple[float, float, bool]:
    """(when the pod was bound — PodScheduled's time, else its creation —, when it was
    created, whether it is bound and not started nor being deleted)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    bound = next(
        (
            c.get("lastTransitionTime")
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled"
        ),
        None,
    )
    created = _time(meta.get("creationTimestamp"))
    started = bool(status.get("containerStatuses")) or status.get("phase") not in (None, "Pending")
    return _time(bound) or created, created, not started and not meta.get("deletionTimestamp")


def _version(value: Any) -> int:
    text = str(value or "")
    return int(text) if text.isdigit() else UNKNOWN_VERSION


def target(
    pods: Iterable[GpuPod],
    ledger: Ledger,
    held: Set[tuple[str, str, str]],
    resource: str,
    size: int,
) -> tuple[GpuPod, GpuAsk] | None:
    """The pod and container the kubelet is allocating `size` of `resource` for: the
    first bound pod still owed it (neither granted by the plugin nor listed by the kubelet
    in `held`, (namespace/name, container, resource)), and its first container owed it."""
    order = sorted(
        (p for p in pods if p.pending),
        key=lambda p: (p.bound_at, p.version, p.created_at, p.key),
    )
    for p in order:
        for ask in p.asks:
            g = ledger.grants.get((p.uid, ask.container))
            given = (g is not None and resource in g.resources) or (
                (p.key, ask.container, resource) in held
            )
            owed = resource in ask.resources() and not given
            if owed and ask.size(resource) == size:
                return p, ask
    return None


# --- cards --------------------------------------------------------------------------------


def taken(holds: Sequence[GpuHold], ledger: Ledger, per_gpu: int) -> dict[str, CardUse]:
    """What is taken of each card: `List`'s holds, except those of containers the plugin
    is still allocating (`List` may show one resource of them, not yet the other), which
    count as their grants say."""
    mine = {(g.key, g.container) for g in ledger.grants.values()}
    listed = [h for h in holds if (h.pod_key, h.container) not in mine]
    extra = [
        GpuHold(*g.key.partition("/")[::2], g.container, card, g.per_card, g.whole)
        for g in ledger.grants.values()
        for card in g.cards
    ]
    return card_use([*listed, *extra])


def fits(
    card: GpuDevice | None, use: CardUse, per_card: int, whole: bool, per_gpu: int
) -> str | None:
    """Why the card cannot take the share, or None when it can."""
    if card is None:
        return "no such card on this node"
    if not card.healthy:
        return "the card is unhealthy"
    if use.whole:
        return "a container holds the card whole"
    if whole and use.holders:
        return f"the card is shared ({use.units}/{per_gpu} units taken)"
    if use.units + per_card > per_gpu:
        return f"{use.units}/{per_gpu} units taken, {per_card} more do not fit"
    return None


def _selected(pod: GpuPod, ask: GpuAsk) -> tuple[str, ...] | None:
    """The ask's part of the pod's selection: the containers take its ids in turn."""
    if pod.selection is None:
        return None
    start = 0
    for a in pod.asks:
        if a.container == ask.container:
            break
        if not a.refused:
            start += a.cards
    part = pod.selection[start : start + ask.cards]
    if len(part) != ask.cards or len(set(part)) != len(part):
        raise AllocationRefused(
            f"{names.GPU_SELECTION_RESULT_ANNOTATION}={','.join(pod.selection)} does not name "
            f"{ask.cards} distinct cards for container {ask.container}"
        )
    return part


def choose(
    pod: GpuPod,
    ask: GpuAsk,
    cards: Sequence[GpuDevice],
    use: Mapping[str, CardUse],
    per_gpu: int,
) -> tuple[str, ...]:
    """The ask's cards: the selection when it fits, else (no selection) the fullest cards
    it fits on; AllocationRefused saying why not."""
    whole = ask.units == 0
    per_card = per_gpu if whole else ask.units // ask.cards
    by_id = {c.id: c for c in cards}
    chosen = _selected(pod, ask)
    if chosen is not None:
        for cid in chosen:
            why = fits(by_id.get(cid), use.get(cid, CardUse()), per_card, whole, per_gpu)
            if why:
                raise AllocationRefused(f"{pod.key}: selected card {cid}: {why}")
        return chosen
    ok = [c for c in cards if fits(c, use.get(c.id, CardUse()), per_card, whole, per_gpu) is None]
    ok.sort(key=lambda c: (per_gpu - use.get(c.id, CardUse()).units, c.id))
    if len(ok) < ask.cards:
        raise AllocationRefused(
            f"{pod.key}: {ask.cards} cards with {per_card} free units asked, {len(ok)} found"
        )
    return tuple(c.id for c in ok[: ask.cards])


def grant_for(pod: GpuPod, ask: GpuAsk, chosen: tuple[str, ...], per_gpu: int, now: float) -> Grant:
    whole = ask.units == 0
    per_card = per_gpu if whole else ask.units // ask.cards
    return Grant(pod.uid, pod.key, ask.container, chosen, per_card, whole, ask.resources(), at=now)


def preferred_ids(g: Grant, resource: str, available: Sequence[str], size: int) -> list[str]:
    """Ids of `available` on the grant's cards: one slot of each card, or its units."""
    want = {c: 1 if resource == GPU else g.per_card for c in g.cards}
    out = []
    for d in sorted(available):
        c = card_of(d)
        if want.get(c, 0) > 0:
            out.append(d)
            want[c] -= 1
    return out[:size]


def check_ids(g: Grant, resource: str, ids: Sequence[str]) -> None:
    """AllocationRefused unless `ids` are exactly the grant's share of `resource`."""
    got: dict[str, int] = {}
    for d in ids:
        got[card_of(d)] = got.get(card_of(d), 0) + 1
    want = {c: 1 if resource == GPU else g.per_card for c in g.cards}
    if got != want:
        raise AllocationRefused(
            f"{g.key} container {g.container}: the kubelet offered {resource} ids on "
            f"{sorted(got.items())}, the pod's cards are {sorted(want.items())}"
        )


def device_ids(
    cards: Sequence[GpuDevice], resource: str, shares: int, per_gpu: int
) -> list[tuple[str, GpuDevice]]:
    """The ids the plugin advertises for `resource`, with their card."""
    n = shares if resource == GPU else per_gpu
    make = slot_id if resource == GPU else unit_id
    return [(make(c.id, k), c) for c in cards for k in range(n)]


def mark(ledger: Ledger, g: Grant, resource: str) -> Ledger:
    return ledger.with_grant(replace(g, resources=g.resources | {resource}))
