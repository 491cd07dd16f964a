"""GPU fragmentation as Fragmentation Gradient Descent measures it (Weng et al., "Beware
of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC '23), over every node at once.

For one task class m (host resources, cards, per-card share) and one node, the node's
fragmentation F_n(m) is the free GPU the class cannot use: all of the node's free GPU
when the class does not fit the node at all (too little cpu or memory, too few cards
with its share free), else the free GPU of the cards that cannot hold its share. A
class that asks for no GPU can use none of it: all the node's free GPU is a fragment to
it. The expected fragmentation under a task mix is the popularity-weighted sum over
classes. FGD places each task where, and on the cards where, that expectation grows
least.

Amounts are milli-units of card memory (a card of 100 units is 100,000); host resources
are the scheduler's amounts (cpu in milli-cores, memory in bytes). The paper checks cpu
only; memory is checked here too, since a node out of memory strands its cards as
surely. A whole-card class needs cards with nothing used.
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

# ((host amounts: cpu milli-cores, memory bytes, ...), cards, per-card share in
# milli-units or WHOLE)
TaskClass = tuple[tuple[int, ...], int, int]


@dataclass(frozen=True, slots=True)
class TaskMix:
    """Task classes and their popularity (weights sum to 1 when made by `of`)."""

    host: I64  # (classes, host resources): what each class needs of the host
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
        width = max(len(c[0]) for _, c in kept)
        return TaskMix(
            np.array([list(c[0]) + [0] * (width - len(c[0])) for _, c in kept], np.int64),
            np.array([c[1] for _, c in kept], np.int64),
            np.array([c[2] for _, c in kept], np.int64),
            np.array([w / wsum for w, _ in kept], np.float64),
        )


EMPTY_MIX = TaskMix(
    np.zeros((0, 1), np.int64),
    np.zeros(0, np.int64),
    np.zeros(0, np.int64),
    np.zeros(0, np.float64),
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

    @property
    def pods(self) -> int:
        """How many pods the mix is counted over."""
        return len(self._recent)

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


def _card_ok(free: I64, cap: I64, share: I64, cards: I64) -> BOOL:
    """(classes, cards, nodes): whether each card can hold each class's share (a class
    that asks for no card can use none: all free GPU is a fragment to it)."""
    s = share[:, None, None]
    whole = s == WHOLE
    fits = np.where(whole, free[None] >= cap[None], free[None] >= s)
    return (cap[None] > 0) & fits & (cards[:, None, None] > 0)


def _host_fits(host_free: I64, mix: TaskMix) -> BOOL:
    """(classes, nodes): whether each node has the host resources each class needs."""
    r = host_free.shape[0]
    need = mix.host[:, :r, None]
    return np.asarray((host_free[None] >= need).all(axis=1), np.bool_)


def _shapes(mix: TaskMix) -> tuple[I64, I64, F64]:
    """The distinct (cards, share) shapes of the mix and, per shape and class, the
    class's weight where the class has that shape: what the card arithmetic depends on is
    the shape alone, so it runs once per shape rather than once per class."""
    code = mix.cards * (1 << 40) + (mix.share - WHOLE)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    member = np.zeros((len(first), mix.size), np.float64)
    member[np.asarray(inverse).reshape(-1), np.arange(mix.size)] = mix.weight
    return mix.cards[first], mix.share[first], member


def node_fragmentation(free: I64, cap: I64, host_free: I64, mix: TaskMix) -> F64:
    """Per node (column): the expected fragmentation, in milli-units, under `mix`.
    `free` and `cap` are (cards, nodes), unusable cards with cap 0; `host_free` is
    (host resources, nodes) in the order of the classes' host amounts."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    if not mix.size:
        return np.zeros(f.shape[1], np.float64)
    cards, share, member = _shapes(mix)
    total = f.sum(axis=0)
    ok = _card_ok(f, cap, share, cards)  # (shapes, cards, nodes)
    inside = (f[None] * ~ok).sum(axis=1)
    held = member @ _host_fits(host_free, mix)  # (shapes, nodes): weight of classes that fit
    cards_ok = ok.sum(axis=1) >= cards[:, None]
    frag = mix.weight.sum() * total + (held * cards_ok * (inside - total[None])).sum(axis=0)
    return np.asarray(frag, np.float64)


def card_deltas(free: I64, cap: I64, host_free: I64, mix: TaskMix, host: I64, share: int) -> F64:
    """(cards, nodes): how much the expected fragmentation grows when a task asking
    `host` (per host resource) and `share` milli-units of one card (WHOLE: the card)
    takes that card; +inf where the card cannot hold it."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    take = cap if share == WHOLE else np.full_like(f, share)
    can = (cap > 0) & (f >= take)
    if not mix.size:
        return np.where(can, 0.0, np.inf)
    cards, shares, member = _shapes(mix)
    wsum = mix.weight.sum()
    total = f.sum(axis=0)
    ok = _card_ok(f, cap, shares, cards)  # (G, K, n)
    cnt = ok.sum(axis=1)
    inside = (f[None] * ~ok).sum(axis=1)
    held = member @ _host_fits(host_free, mix)  # (G, n)
    before = wsum * total + (held * (cnt >= cards[:, None]) * (inside - total[None])).sum(axis=0)
    f2 = np.where(can, f - take, f)
    ok2 = _card_ok(f2, cap, shares, cards)
    cnt2 = cnt[:, None, :] + ok2.astype(np.int64) - ok
    inside2 = inside[:, None, :] + f2[None] * ~ok2 - f[None] * ~ok
    held2 = member @ _host_fits(host_free - host[:, None], mix)  # (G, n)
    total2 = total[None, :] - (f - f2)  # (K, n)
    gain = held2[:, None, :] * (cnt2 >= cards[:, None, None]) * (inside2 - total2[None])
    after = wsum * total2 + gain.sum(axis=0)
    return np.where(can, after - before[None, :], np.inf)


def host_delta(free: I64, cap: I64, host_free: I64, mix: TaskMix, host: I64) -> F64:
    """Per node: how much the expected fragmentation grows when a task asking only host
    resources lands there (it can leave a node too short of cpu for GPU classes)."""
    before = node_fragmentation(free, cap, host_free, mix)
    after = node_fragmentation(free, cap, host_free - host[:, None], mix)
    return after - before


def whole_delta(
    free: I64, cap: I64, host_free: I64, mix: TaskMix, host: I64, cards: int
) -> tuple[F64, I64]:
    """Per node: the growth when a task takes `cards` whole cards (all idle cards are
    alike, so the first idle ones), and those cards' rows (cards, nodes) as a mask."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    idle = (cap > 0) & (f >= cap)
    chosen = idle & (np.cumsum(idle, axis=0) <= cards)
    before = node_fragmentation(f, cap, host_free, mix)
    after = node_fragmentation(np.where(chosen, 0, f), cap, host_free - host[:, None], mix)
    return after - before, chosen.astype(np.int64)


_LOW = (1 << 31) - 1
_MULTIPLIERS: np.ndarray[tuple[int], np.dtype[np.uint64]] = np.random.default_rng(
    0x6A09E667
).integers(1, 2**63, 2 * 64 + 8, dtype=np.uint64) | np.uint64(1)


def node_deltas(
    free: I64, cap: I64, host_free: I64, mix: TaskMix, host: I64, cards: int, share: int
) -> F64:
    """Per node: how much a task (`host` resources, `cards` cards of `share` each; no
    cards: host resources only) grows the expected fragmentation there, on its best
    cards. Nodes in the same state (the same card amounts in any order, the same host
    resources free) are evaluated once: early on most nodes are idle and alike, late
    most are full and alike."""
    f = np.where(cap > 0, np.maximum(free, 0), 0)
    # sort each node's cards by (free, size) in one pass: both fit in 31 bits here
    packed = np.sort((np.minimum(f, _LOW) << 31) | np.clip(cap, 0, _LOW), axis=0)
    fs, cs = packed >> 31, packed & _LOW
    key = np.vstack([packed, host_free]).astype(np.uint64)
    # one 64-bit hash per column (odd multipliers, wrapping): a 1-D unique is fast
    mult = _MULTIPLIERS[: key.shape[0], None]
    with np.errstate(over="ignore"):
        digest = (key * mult).sum(axis=0, dtype=np.uint64)
    _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
    uf = np.asarray(fs[:, first], np.int64)
    ucap = np.asarray(cs[:, first], np.int64)
    uhost = np.asarray(host_free[:, first], np.int64)
    if not cards:
        out = host_delta(uf, ucap, uhost, mix, host)
    elif share == WHOLE:
        out = whole_delta(uf, ucap, uhost, mix, host, cards)[0]
    else:
        deltas = card_deltas(uf, ucap, uhost, mix, host, share)
        out = np.sort(deltas, axis=0)[:cards].sum(axis=0)
    return np.asarray(out, np.float64)[np.asarray(inverse).reshape(-1)]
