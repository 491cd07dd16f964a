"""Watches on the in-memory store: the record of each change, and an open watch that
filters the changes for one client, queues them and cuts the client off (410 Gone) when it
falls too far behind."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from pykatalyst.apiserver.ingest import bulk_copy
from pykatalyst.cluster.patch import copy_object
from pykatalyst.cluster.protocol import JSON, EventType, Gone, WatchEvent
from pykatalyst.cluster.selectors import FieldSelector, LabelSelector


class Subscriptions(Protocol):
    """The open watches of one kind, as a watch sees them (`store.KindStore`)."""

    resource: str

    def unsubscribe(self, w: MemoryWatch) -> None: ...


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write, as the watch history keeps it."""

    rv: int
    key: tuple[str, str]  # (group, plural)
    type: EventType
    obj: JSON
    old: JSON | None  # the previous state, for MODIFIED


def with_rv(obj: JSON, rv: str) -> JSON:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


class MemoryWatch:
    """An open watch on a MemoryCluster. Events queue here as they happen; a watcher that
    lets more than the cluster's history window pile up is cut off with 410 Gone, like a
    slow client of a real API server."""

    # `next_events(copy=False)` hands out the stored objects (`informer.SharingWatch`)
    shares_objects = True

    def __init__(
        self,
        cond: threading.Condition,
        state: Subscriptions,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        allow_bookmarks: bool,
        node_key: str | None,
        limit: int,
    ) -> None:
        self._cond = cond
        self._state = state
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self.allow_bookmarks = allow_bookmarks
        self.node_key = node_key
        self._pending: deque[tuple[EventType, JSON]] = deque()
        self.closed = False
        self._gone: str | None = None
        self.limit = limit

    def prime(self, objs: list[JSON]) -> None:
        """Queue the synthetic ADDED events of a watch from no version."""
        self._pending.extend(("ADDED", o) for o in objs)

    def matches(self, obj: JSON) -> bool:
        meta = obj["metadata"]
        if self._namespace is not None and meta.get("namespace") != self._namespace:
            return False
        if not self._labels.empty and not self._labels.matches(meta.get("labels")):
            return False
        return self._fields.empty or self._fields.matches(obj)

    def pending(self) -> int:
        return len(self._pending)

    def push(self, etype: EventType, obj: JSON) -> None:
        if self._gone is not None:
            return
        if len(self._pending) >= self.limit:
            self._pending.clear()
            self._gone = (
                f"watch of {self._state.resource} fell more than {self.limit} events "
                "behind and was closed; list again and watch from the new resourceVersion"
            )
            return
        self._pending.append((etype, obj))

    def offer(self, ev: Change) -> None:
        if self.closed:
            return
        if ev.type == "MODIFIED":
            assert ev.old is not None
            now_ok = self.matches(ev.obj)
            was_ok = self.matches(ev.old)
            if now_ok:
                self.push("MODIFIED" if was_ok else "ADDED", ev.obj)
            elif was_ok:
                # As the watch cache does: the old content, stamped with the new version.
                self.push("DELETED", with_rv(ev.old, ev.obj["metadata"]["resourceVersion"]))
        elif self.matches(ev.obj) or (ev.type == "DELETED" and ev.old and self.matches(ev.old)):
            # A delete is reported to whoever saw the object, even if the final write
            # (say, dropping the last finalizer) also changed what the selector looks at.
            self.push(ev.type, ev.obj)

    def next_events(self, timeout: float = 0.0, copy: bool = True) -> list[WatchEvent]:
        """The events queued so far (waiting up to `timeout` for one). With `copy=False`
        each event holds the stored object itself, uncopied: only for an in-process
        reader that reads it at once and never changes or keeps it (the simulator's
        kubelet)."""
        if timeout <= 0 and not self._pending and self._gone is None:
            # Nothing queued and no wait asked: the answer without the lock (most reads of
            # a busy cluster's quiet kinds). A push racing this read is simply seen by the
            # next one, as it would be had this read come a moment earlier.
            return []
        cond = self._cond
        with cond:
            if self._gone is None and not self._pending and not self.closed and timeout > 0:
                cond.wait_for(
                    lambda: bool(self._pending) or self.closed or self._gone is not None,
                    timeout,
                )
            if self._gone is not None:
                # Keeps raising until closed: a stream that lost events must not look healthy.
                self._state.unsubscribe(self)
                raise Gone(self._gone)
            if self.closed:
                return []
            if not copy:
                out = [WatchEvent(t, o) for t, o in self._pending]
            else:
                with bulk_copy(len(self._pending)):
                    out = [WatchEvent(t, copy_object(o)) for t, o in self._pending]
            self._pending.clear()
            return out

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._gone = None
            self._pending.clear()
            self._state.unsubscribe(self)
            self._cond.notify_all()

    def __enter__(self) -> MemoryWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
