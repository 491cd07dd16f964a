"""The generic versioned store under MemoryCluster: objects by kind, namespace and name,
one global resourceVersion, and a bounded history of changes that watches replay from.

It knows nothing of what a kind means: that is each kind's `Strategy`
(`apiserver/strategy.py`). Stored objects are never mutated in place: every write builds a
new dict and replaces the old one, so the history and the per-node index share them
safely."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pykatalyst.api.names import Kind
from pykatalyst.apiserver.scale import ScalePaths, builtin_paths
from pykatalyst.apiserver.watch import Change, MemoryWatch, with_rv
from pykatalyst.cluster.protocol import (
    JSON,
    BadRequest,
    Conflict,
    EventType,
    Gone,
    Invalid,
    NotFound,
)
from pykatalyst.cluster.selectors import FieldSelector, LabelSelector

if TYPE_CHECKING:
    from pykatalyst.apiserver.strategy import Strategy

Key = tuple[str, str]  # (namespace, name)


def resource_name(kind: Kind) -> str:
    """The qualified resource the API server names in messages: `pods`,
    `customnoderesources.node.katalyst.kubewharf.io`."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _node_of(obj: JSON | None) -> str:
    return ((obj or {}).get("spec") or {}).get("nodeName") or ""


@dataclass(slots=True)
class KindStore:
    """The objects and open watches of one kind."""

    kind: Kind
    strategy: Strategy
    status_subresource: bool
    unconditional_update: bool
    builtin: bool = False
    resource: str = ""
    scale: ScalePaths | None = None  # where its Scale's fields live; None: no scale subresource
    # namespace ("" for cluster-scoped) -> name -> stored object (never mutated)
    objects: dict[str, dict[str, JSON]] = field(default_factory=dict)
    watchers: list[MemoryWatch] = field(default_factory=list)
    # kinds the strategy indexes by node (pods): watchers pinned to one spec.nodeName,
    # and the objects by node
    node_watchers: dict[str, list[MemoryWatch]] = field(default_factory=dict)
    by_node: dict[str, dict[Key, JSON]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resource = resource_name(self.kind)

    def count(self) -> int:
        return sum(len(v) for v in self.objects.values())

    def get(self, name: str, ns: str) -> JSON:
        obj = self.objects.get(ns, {}).get(name)
        if obj is None:
            raise NotFound(
                f'{self.resource} "{name}" not found',
                details={"name": name, "group": self.kind.group, "kind": self.kind.plural},
            )
        return obj

    def invalid(self, name: str, field_path: str, message: str) -> Invalid:
        return Invalid(
            f'{self.kind.kind} "{name}" is invalid: {field_path}: {message}',
            details={
                "name": name,
                "group": self.kind.group,
                "kind": self.kind.kind,
                "causes": [
                    {"reason": "FieldValueInvalid", "message": message, "field": field_path}
                ],
            },
        )

    def conflict(self, name: str, why: str) -> Conflict:
        return Conflict(
            f'Operation cannot be fulfilled on {self.resource} "{name}": {why}',
            details={"name": name, "group": self.kind.group, "kind": self.kind.plural},
        )

    def node_key(self, fields: FieldSelector) -> str | None:
        return fields.exact("spec.nodeName") if self.strategy.node_indexed else None

    def select(self, ns: str | None, labels: LabelSelector, fields: FieldSelector) -> list[JSON]:
        """The stored objects that match, ordered by namespace and name."""
        node = self.node_key(fields)
        candidates: Iterable[JSON]
        if node is not None:
            candidates = (o for _, o in sorted(self.by_node.get(node, {}).items()))
        elif ns is not None:
            candidates = (o for _, o in sorted(self.objects.get(ns, {}).items()))
        else:
            candidates = (
                o for n in sorted(self.objects) for _, o in sorted(self.objects[n].items())
            )
        out = []
        for obj in candidates:
            meta = obj["metadata"]
            if ns is not None and meta.get("namespace", "") != ns:
                continue
            if not labels.empty and not labels.matches(meta.get("labels")):
                continue
            if not fields.empty and not fields.matches(obj):
                continue
            out.append(obj)
        return out

    def all_watchers(self) -> Iterator[MemoryWatch]:
        yield from self.watchers
        for lst in self.node_watchers.values():
            yield from lst

    def subscribe(self, w: MemoryWatch) -> None:
        if w.node_key is not None:
            self.node_watchers.setdefault(w.node_key, []).append(w)
        else:
            self.watchers.append(w)

    def unsubscribe(self, w: MemoryWatch) -> None:
        lst = self.node_watchers.get(w.node_key, []) if w.node_key is not None else self.watchers
        if w in lst:
            lst.remove(w)

    def put(self, obj: JSON) -> None:
        """Store `obj` in place of the object of its name (and in the node index)."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        if self.strategy.node_indexed:
            self._unindex(ns, name)
            self.by_node.setdefault(_node_of(obj), {})[(ns, name)] = obj
        self.objects.setdefault(ns, {})[name] = obj

    def remove(self, ns: str, name: str) -> None:
        if self.strategy.node_indexed:
            self._unindex(ns, name)
        bucket = self.objects.get(ns)
        if bucket is not None:
            bucket.pop(name, None)
            if not bucket and self.kind.namespaced:
                del self.objects[ns]

    def _unindex(self, ns: str, name: str) -> None:
        prev = self.objects.get(ns, {}).get(name)
        if prev is not None:
            self.by_node.get(_node_of(prev), {}).pop((ns, name), None)

    def publish(self, ev: Change) -> None:
        for w in self.watchers:
            w.offer(ev)
        if self.node_watchers:
            for node in {_node_of(ev.obj), _node_of(ev.old)} if ev.old else {_node_of(ev.obj)}:
                for w in self.node_watchers.get(node, ()):
                    w.offer(ev)


class VersionedStore:
    """Every kind's objects, the global resourceVersion and the watch history. One
    re-entrant lock (`cond`) guards it all; callers hold it around each operation.
    `strategies` gives the strategy of a kind it is asked to serve."""

    def __init__(self, watch_history: int, strategies: Callable[[Kind], Strategy]) -> None:
        self.watch_history = watch_history
        self._strategies = strategies
        self.cond = threading.Condition(threading.RLock())
        self.rv = 0
        self.history: deque[Change] = deque(maxlen=watch_history)
        self.floor = 0  # changes with rv <= floor are no longer replayable
        self.kinds: dict[tuple[str, str], KindStore] = {}

    def state(self, kind: Kind, verb: str = "get") -> KindStore:
        st = self.kinds.get((kind.group, kind.plural))
        if st is None:
            raise NotFound(
                f"the server could not find the requested resource ({verb} {resource_name(kind)})",
                details={"group": kind.group, "kind": kind.plural},
            )
        return st

    def register(self, kind: Kind, status_subresource: bool, unconditional_update: bool) -> None:
        """Serve `kind`; registering a served kind again updates its description."""
        st = self.kinds.get((kind.group, kind.plural))
        if st is None:
            strategy = self._strategies(kind)
            st = KindStore(kind, strategy, status_subresource, unconditional_update)
            st.scale = builtin_paths(kind)
            self.kinds[(kind.group, kind.plural)] = st
        else:
            st.kind = kind
            st.status_subresource = status_subresource

    def drop_kind(self, st: KindStore) -> None:
        """Stop serving a kind: its objects go (each with a DELETED) and its watches end."""
        for bucket in list(st.objects.values()):
            for obj in list(bucket.values()):
                self.commit(st, "DELETED", obj, None)
        for w in list(st.all_watchers()):
            w.closed = True
        del self.kinds[(st.kind.group, st.kind.plural)]

    def has_namespace(self, ns: str) -> bool:
        return ns in self.kinds[("", "namespaces")].objects.get("", {})

    def commit(self, st: KindStore, etype: EventType, obj: JSON, old: JSON | None) -> JSON:
        """Stamp a new resourceVersion on `obj` (a store-owned dict) and publish it."""
        self.rv += 1
        rv = str(self.rv)
        if etype == "DELETED":
            obj = with_rv(obj, rv)
            meta = obj["metadata"]
            st.remove(meta.get("namespace", ""), meta["name"])
        else:
            obj["metadata"]["resourceVersion"] = rv
            st.put(obj)
        if len(self.history) == self.history.maxlen:
            self.floor = self.history[0].rv
        ev = Change(self.rv, (st.kind.group, st.kind.plural), etype, obj, old)
        self.history.append(ev)
        st.publish(ev)
        self.cond.notify_all()
        return obj

    def watch(
        self,
        st: KindStore,
        ns: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        resource_version: str | None,
        allow_bookmarks: bool,
    ) -> MemoryWatch:
        node_key = st.node_key(fields)
        w = MemoryWatch(
            self.cond, st, ns, labels, fields, allow_bookmarks, node_key, self.watch_history
        )
        if resource_version in (None, "", "0"):
            w.prime(st.select(ns, labels, fields))
        else:
            self._replay(st, w, str(resource_version))
        # Catching up is not falling behind: the window counts from here.
        w.limit = w.pending() + self.watch_history
        st.subscribe(w)
        return w

    def _replay(self, st: KindStore, w: MemoryWatch, resource_version: str) -> None:
        try:
            since = int(resource_version)
        except ValueError:
            raise BadRequest(
                f"resourceVersion: invalid value {resource_version!r}: "
                "it must be a version returned by this server"
            ) from None
        if since < self.floor:
            raise Gone(f"too old resource version: {since} ({self.floor + 1})")
        key = (st.kind.group, st.kind.plural)
        for ev in self.history:
            if ev.rv > since and ev.key == key:
                w.offer(ev)

    def bookmark(self) -> str:
        rv = str(self.rv)
        for st in self.kinds.values():
            bm = {
                "apiVersion": st.kind.api_version,
                "kind": st.kind.kind,
                "metadata": {"resourceVersion": rv},
            }
            for w in list(st.all_watchers()):
                if w.allow_bookmarks and not w.closed:
                    w.push("BOOKMARK", bm)
        self.cond.notify_all()
        return rv
