"""GPU fragmentation as Fragmentation Gradient Descent measures it (Weng et al., "Beware
of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC '23), over every node at once.

For one task class m (cpu, cards, per-card share) and one node, the node's fragmentation
F_n(m) is the free GPU the class cannot use: all of the node's free GPU when the class
does not fit the node at all (too little cpu, too few cards with its share free), else
the free GPU of the cards that cannot hold its share. The expected fragmentation under a
task mix is the popularity-weighted sum over classes. FGD places each task where, and on
the cards where, that expectation grows least.

Amounts are milli-units of card memory (a card of 100 units is 100,000); cpu is in
milli-cores. A whole-card class needs cards with nothing used; a class asking no cards
fits wherever its cpu does.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pykatalyst.api.gpu import WHOLE

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]

# (cpu milli-cores, cards, per-card share in milli-units or WHOLE)
TaskClass = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class TaskMix:
    """Task classes and their popularity (weights sum to 1)."""

    cpu: I64
    cards: I64
    share: I64  # WHOLE stays WHOLE
    weight: F64

    @property
    def size(self) -> int:
        return len(self.weight)

    @staticmethod
    def of(counts: Iterable[tuple[TaskClass, float]], coverage: float = 1.0) -> TaskMix:
        """The most popular classes covering `coverage` of the total weight."""
        items = sorted(((w, c) for c, w in counts if w > 0), reverse=True)
        total = sum(w for w, _ in items)
        kept: list[tuple[float, TaskClass]] = []
        acc = 0.0
        for w, c in items:
            if kept and acc >= coverage * total:
                break
            kept.append((w, c))
            acc += w
        if not kept:
            return EMPTY_MIX
        wsum = sum(w for w, _ in kept)
        return TaskMix(
            np.array([c[0] for _, c in kept], np.int64),
            np.array([c[1] for _, c in kept], np.int64),
            np.array([c[2] for _, c in kept], np.int64),
            np.array([w / wsum for w, _ in kept], np.float64),
        )


EMPTY_MIX = TaskMix(
    np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
)


class RecentMix:
    """The task mix of the last `window` pods seen, as FGD's popularity estimate."""

    def __init__(self, window: int, coverage: float, refresh: int = 16) -> None:
        self.window = window
        self.coverage = coverage
        self.refresh = refresh
        self._recent: deque[TaskClass] = deque()
        self._counts: Counter[TaskClass] = Counter()
        self._since = 0
        self._mix = EMPTY_MIX

    def add(self, cls: TaskClass) -> None:
        self._recent.append(cls)
        self._counts[cls] += 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        self._since += 1

    def mix(self) -> TaskMix:
        if self._since >= self.refresh or (self._since and not self._mix.size):
            self._mix = TaskMix.of(((c, float(w)) for c, w in self._counts.items()), self.coverage)
            self._since = 0
        return self._mix


def _card_ok(free: I64, cap: I64, share: I64) -> BOOL:
    """(classes, cards, nodes): whether each card can hold each class's share."""
    s = share[:, None, None]
    whole = s == WHOLE
    return (cap[None] > 0) & np.where(whole, free[None] >= cap[None], free[None] >= s)


def node_fragmentation(free: I64, cap: I64, cpu_free: I64, mix: TaskMix) -> F64:
    """Per node (column): the expected fragmentation, in milli-units, under `mix`.
    `free` and `cap` are (cards, nodes); unusable cards have cap 0."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    if not mix.size:
        return np.zeros(f.shape[1], np.float64)
    total = f.sum(axis=0)
    ok = _card_ok(f, cap, mix.share)
    inside = (f[None] * ~ok).sum(axis=1)
    fits = (cpu_free[None] >= mix.cpu[:, None]) & (ok.sum(axis=1) >= mix.cards[:, None])
    frag = np.where(fits, inside, total[None])
    return np.asarray(mix.weight @ frag, np.float64)


def card_deltas(free: I64, cap: I64, cpu_free: I64, mix: TaskMix, cpu: int, share: int) -> F64:
    """(cards, nodes): how much the expected fragmentation grows when a task asking `cpu`
    and `share` milli-units of one card (WHOLE: the card) takes that card; +inf where the
    card cannot hold it."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    take = cap if share == WHOLE else np.full_like(f, share)
    can = (cap > 0) & (f >= take)
    if not mix.size:
        return np.where(can, 0.0, np.inf)
    total = f.sum(axis=0)
    ok = _card_ok(f, cap, mix.share)  # (C, K, n)
    cnt = ok.sum(axis=1)
    inside = (f[None] * ~ok).sum(axis=1)
    fits = (cpu_free[None] >= mix.cpu[:, None]) & (cnt >= mix.cards[:, None])
    before = np.where(fits, inside, total[None])  # (C, n)
    f2 = np.where(can, f - take, f)
    ok2 = _card_ok(f2, cap, mix.share)
    cnt2 = cnt[:, None, :] + ok2.astype(np.int64) - ok
    inside2 = inside[:, None, :] + f2[None] * ~ok2 - f[None] * ~ok
    cpu_fits = (cpu_free - cpu)[None] >= mix.cpu[:, None]  # (C, n)
    fits2 = cpu_fits[:, None, :] & (cnt2 >= mix.cards[:, None, None])
    total2 = (total[None, :] - (f - f2))[None]
    after = np.where(fits2, inside2, total2)
    delta = np.tensordot(mix.weight, after - before[:, None, :], axes=1)
    return np.where(can, delta, np.inf)


def cpu_delta(free: I64, cap: I64, cpu_free: I64, mix: TaskMix, cpu: int) -> F64:
    """Per node: how much the expected fragmentation grows when a task asking only `cpu`
    lands there (it can make the node too short of cpu for GPU classes)."""
    before = node_fragmentation(free, cap, cpu_free, mix)
    after = node_fragmentation(free, cap, cpu_free - cpu, mix)
    return after - before


def whole_delta(
    free: I64, cap: I64, cpu_free: I64, mix: TaskMix, cpu: int, cards: int
) -> tuple[F64, I64]:
    """Per node: the growth when a task takes `cards` whole cards (all idle cards are
    alike, so the first idle ones), and those cards' rows (cards, nodes) as a mask."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    idle = (cap > 0) & (f >= cap)
    chosen = idle & (np.cumsum(idle, axis=0) <= cards)
    before = node_fragmentation(f, cap, cpu_free, mix)
    after = node_fragmentation(np.where(chosen, 0, f), cap, cpu_free - cpu, mix)
    return after - before, chosen.astype(np.int64)
