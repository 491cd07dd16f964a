"""The scheduling queue: activeQ (priority, then arrival), backoffQ and the unschedulable set.

A pod that failed waits its backoff (initial × 2^(attempts−1), capped) before another
try; an unschedulable pod waits for a cluster change that could help it (a node added
or changed, a pod deleted, a CNR updated) or, at the latest, `max_unschedulable_seconds`.
Which change can help is told by the `RequeueHint` its failed attempt left (the
QueueingHints of kube-scheduler): a pod leaving a node wakes only the pods that node
could now take, not every waiting pod.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from pykatalyst.cluster.clock import is_due
from pykatalyst.scheduler.plugins.base import BOOL, Needs
from pykatalyst.scheduler.podinfo import PodInfo

# kube-scheduler's podMaxInUnschedulablePodsDuration
DEFAULT_MAX_UNSCHEDULABLE_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True)
class RequeueHint:
    """Which cluster changes can help a pod after a failed attempt.

    `any_event`: every change counts (a pre-filter refused the pod, or a plugin whose
    verdict depends on other pods rejected some node). Otherwise only a change on a node it
    was rejected on: on a `fit` node (by snapshot slot) when `needs` are now free there, on
    a `static` node when its labels, taints or schedulability changed. The slots hold while
    the snapshot's `static_gen` is still `gen` (removing a node moves slots); after that,
    any change counts.
    """

    any_event: bool = True
    gen: int = -1
    fit: BOOL = field(default_factory=lambda: np.zeros(0, np.bool_))
    static: BOOL = field(default_factory=lambda: np.zeros(0, np.bool_))
    needs: Needs = field(default_factory=Needs)


@dataclass(slots=True)
class QueuedPod:
    info: PodInfo
    attempts: int = 0
    arrived: float = 0.0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    seq: int = 0
    hint: RequeueHint | None = None


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable_seconds: float = DEFAULT_MAX_UNSCHEDULABLE_SECONDS,
    ) -> None:
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable_seconds = max_unschedulable_seconds
        self._seq = itertools.count()
        self._active: list[tuple[int, int, str]] = []  # (-priority, seq, uid)
        self._backoff: list[tuple[float, int, str]] = []  # (until, seq, uid)
        self._entries: dict[str, QueuedPod] = {}
        self._where: dict[str, str] = {}  # uid -> active | backoff | unschedulable | flight
        self._unsched: dict[str, None] = {}
        self._last_scan = float("-inf")
        self.move_requests = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: str) -> bool:
        return uid in self._entries

    def location(self, uid: str) -> str | None:
        return self._where.get(uid)

    def pending(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for where in self._where.values():
            out[where] = out.get(where, 0) + 1
        return out

    def _set(self, uid: str, where: str) -> None:
        if self._where.get(uid) == "unschedulable":
            self._unsched.pop(uid, None)
        self._where[uid] = where
        if where == "unschedulable":
            self._unsched[uid] = None

    def _push_active(self, entry: QueuedPod) -> None:
        entry.seq = next(self._seq)
        self._set(entry.info.uid, "active")
        heapq.heappush(self._active, (-entry.info.priority, entry.seq, entry.info.uid))

    def _push_backoff(self, entry: QueuedPod) -> None:
        entry.seq = next(self._seq)
        self._set(entry.info.uid, "backoff")
        heapq.heappush(self._backoff, (entry.backoff_until, entry.seq, entry.info.uid))

    def add(self, info: PodInfo, now: float) -> None:
        """A new pending pod (or one whose spec changed while waiting)."""
        entry = self._entries.get(info.uid)
        if entry is None:
            entry = QueuedPod(info, arrived=now)
            self._entries[info.uid] = entry
            self._push_active(entry)
            return
        entry.info = info
        where = self._where.get(info.uid)
        if where == "unschedulable":
            # an updated pod may now fit: try it again (after its backoff)
            self._requeue(entry, now)

    def update(self, info: PodInfo) -> None:
        entry = self._entries.get(info.uid)
        if entry is not None:
            entry.info = info

    def delete(self, uid: str) -> None:
        # lazy removal: heap items whose uid is gone are skipped on pop
        self._entries.pop(uid, None)
        self._where.pop(uid, None)
        self._unsched.pop(uid, None)

    def backoff_duration(self, attempts: int) -> float:
        if attempts <= 0:
            return 0.0
        d = float(self.initial_backoff) * float(2 ** (attempts - 1))
        return float(min(d, self.max_backoff))

    def _flush(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff)
            entry = self._entries.get(uid)
            if entry is None or self._where.get(uid) != "backoff" or entry.seq != seq:
                continue
            self._push_active(entry)
        if (
            self.max_unschedulable_seconds > 0
            and self._unsched
            and is_due(self._last_scan, now, 1.0)
        ):
            self._last_scan = now
            for uid in list(self._unsched):
                entry = self._entries[uid]
                if now - entry.unschedulable_since >= self.max_unschedulable_seconds:
                    self._requeue(entry, now)

    def pop(self, now: float) -> QueuedPod | None:
        """The next pod to try, or None when nothing is due."""
        self._flush(now)
        while self._active:
            _, seq, uid = heapq.heappop(self._active)
            entry = self._entries.get(uid)
            if entry is None or self._where.get(uid) != "active" or entry.seq != seq:
                continue
            entry.attempts += 1
            self._set(uid, "flight")
            return entry
        return None

    def next_due(self) -> float | None:
        """When the earliest backoff ends (for a runtime deciding how long to sleep)."""
        while self._backoff:
            until, seq, uid = self._backoff[0]
            entry = self._entries.get(uid)
            if entry is None or self._where.get(uid) != "backoff" or entry.seq != seq:
                heapq.heappop(self._backoff)
                continue
            return until
        return None

    def done(self, uid: str) -> None:
        """The pod was bound (or left the queue's care)."""
        self.delete(uid)

    def unschedulable(self, entry: QueuedPod, now: float, hint: RequeueHint | None = None) -> None:
        """No node fits: wait for a relevant cluster change (any change when `hint` is None)."""
        if entry.info.uid not in self._entries:
            return
        entry.hint = hint
        entry.backoff_until = now + self.backoff_duration(entry.attempts)
        entry.unschedulable_since = now
        self._set(entry.info.uid, "unschedulable")

    def retry(self, entry: QueuedPod, now: float) -> None:
        """A transient failure (e.g. the binding failed): try again after the backoff."""
        if entry.info.uid not in self._entries:
            return
        entry.backoff_until = now + self.backoff_duration(entry.attempts)
        self._push_backoff(entry)

    def _requeue(self, entry: QueuedPod, now: float) -> None:
        if entry.backoff_until > now:
            self._push_backoff(entry)
        else:
            self._push_active(entry)

    def move_all_unschedulable(self, now: float) -> int:
        """A cluster event that may help: every unschedulable pod gets another try."""
        self.move_requests += 1
        moved = 0
        for uid in list(self._unsched):
            self._requeue(self._entries[uid], now)
            moved += 1
        return moved

    def move_unschedulable(self, now: float, helps: Callable[[QueuedPod], bool]) -> int:
        """A cluster event: the unschedulable pods it `helps` get another try."""
        self.move_requests += 1
        moved = 0
        for uid in list(self._unsched):
            entry = self._entries[uid]
            if helps(entry):
                self._requeue(entry, now)
                moved += 1
        return moved
