"""A local cache of one kind, kept in sync from list + watch on any `Cluster`, and the
factory that shares one such cache per kind among the components of a process.

`sync()` does the I/O: the first call lists (handlers see ADDED for every object), later
calls drain the watch. When the watch answers 410 Gone the informer lists again and
turns the difference between its cache and the fresh list into the ADDED / MODIFIED /
DELETED its handlers would have seen, so a handler never misses a change it must react
to, only the intermediate states.

Objects the informer hands out are its cached copies, shared with its index: treat them
as read-only (copy before changing them), as with client-go listers. The cache is
refreshed from the cluster, so a mutation cannot leak into the store, only into this cache.
An informer made `shared` over a cluster whose watches can hand out the stored objects
themselves (MemoryCluster's) takes them uncopied: there a mutation would reach the store,
so only components that never change what they read (the scheduler) are made so.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, cast

from pykatalyst.api.names import Kind
from pykatalyst.cluster.protocol import JSON, Cluster, EventType, Gone, Watch, WatchEvent

Handler = Callable[[EventType, JSON | None, JSON | None], None]
# An indexer maps an object to the index values it is filed under (none, one or many).
Indexer = Callable[[JSON], Iterable[str]]
Key = tuple[str, str]


def index_by_node_name(obj: JSON) -> Iterable[str]:
    """Pods by spec.nodeName (unbound pods are filed under "")."""
    return ((obj.get("spec") or {}).get("nodeName") or "",)


def index_by_namespace(obj: JSON) -> Iterable[str]:
    return (obj["metadata"].get("namespace", ""),)


class SharingWatch(Protocol):
    """A watch that can deliver the stored objects themselves (`copy=False`), saying so
    with `shares_objects`."""

    shares_objects: bool

    def next_events(self, timeout: float = 0.0, copy: bool = True) -> list[WatchEvent]: ...


def _sharing(watch: Watch) -> SharingWatch | None:
    return cast(SharingWatch, watch) if getattr(watch, "shares_objects", False) is True else None


def _key(obj: JSON) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", "") or "", meta["name"])


class Informer:
    """Handlers are called as `fn(event_type, old, new)`: ADDED (None, obj), MODIFIED
    (previous, current), DELETED (last cached state, final state)."""

    def __init__(
        self,
        cluster: Cluster,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        *,
        shared: bool = False,
    ) -> None:
        """`shared`: take the objects of a watch that can share them uncopied (see the
        module's text); every handler and reader must then leave them unchanged."""
        self.cluster = cluster
        self.shared = shared
        self._uncopied: SharingWatch | None = None
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self._indexers = dict(indexers or {})
        self._cache: dict[Key, JSON] = {}
        self._indices: dict[str, dict[str, dict[Key, JSON]]] = {n: {} for n in self._indexers}
        self._handlers: list[Handler] = []
        self._watch: Watch | None = None
        self._rv = ""
        self.relists = 0

    # --- handlers and reads ---------------------------------------------------------------

    def add_handler(self, fn: Handler) -> None:
        """A handler added after the first sync is first told of every cached object."""
        self._handlers.append(fn)
        for obj in self.list():
            fn("ADDED", None, obj)

    def add_indexer(self, name: str, fn: Indexer) -> None:
        self._indexers[name] = fn
        self._indices[name] = {}
        for key, obj in self._cache.items():
            self._index_add(name, key, obj)

    @property
    def has_synced(self) -> bool:
        return self._watch is not None

    @property
    def resource_version(self) -> str:
        """The version the cache reflects (the last list or watch event seen)."""
        return self._rv

    def list(self) -> builtins.list[JSON]:
        return [self._cache[k] for k in sorted(self._cache)]

    def keys(self) -> builtins.list[Key]:
        return sorted(self._cache)

    def get(self, name: str, namespace: str | None = None) -> JSON | None:
        return self._cache.get((namespace or "", name))

    def by_index(self, index: str, value: str) -> builtins.list[JSON]:
        if index not in self._indices:
            raise KeyError(
                f"no indexer named {index!r}; this informer has: {sorted(self._indices) or 'none'}"
            )
        bucket = self._indices[index].get(value, {})
        return [bucket[k] for k in sorted(bucket)]

    def index_values(self, index: str) -> builtins.list[str]:
        return sorted(v for v, bucket in self._indices[index].items() if bucket)

    def __len__(self) -> int:
        return len(self._cache)

    # --- syncing --------------------------------------------------------------------------

    def sync(self, timeout: float = 0.0) -> int:
        """Bring the cache up to date; returns how many changes handlers were told of.
        `timeout` > 0 waits that long for the first event when nothing is pending."""
        if self._watch is None:
            return self._relist(initial=True)
        try:
            if self._uncopied is not None:
                events = self._uncopied.next_events(timeout, copy=False)
            else:
                events = self._watch.next_events(timeout)
        except Gone:
            return self._relist(initial=False)
        applied = 0
        for ev in events:
            rv = ev.object.get("metadata", {}).get("resourceVersion")
            if ev.type == "BOOKMARK":
                if rv:
                    self._rv = str(rv)
                continue
            if ev.type == "ERROR":
                # A Status in the stream: the server ended it; start over from a list.
                return applied + self._relist(initial=False)
            if rv:
                self._rv = str(rv)
            applied += self._apply(ev.type, ev.object)
        return applied

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
            self._uncopied = None

    def _open_watch(self) -> Watch:
        return self.cluster.watch(
            self.kind,
            namespace=self.namespace,
            resource_version=self._rv,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            allow_bookmarks=True,
        )

    def _relist(self, initial: bool) -> int:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
            self._uncopied = None
        if not initial:
            self.relists += 1
        fresh = self.cluster.list(
            self.kind,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        self._rv = fresh.resource_version
        seen: set[Key] = set()
        applied = 0
        for obj in fresh.items:
            key = _key(obj)
            seen.add(key)
            old = self._cache.get(key)
            if old is None:
                applied += self._apply("ADDED", obj)
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                applied += self._apply("MODIFIED", obj)
        for key in [k for k in self._cache if k not in seen]:
            applied += self._apply("DELETED", self._cache[key])
        self._watch = self._open_watch()
        self._uncopied = _sharing(self._watch) if self.shared else None
        return applied

    def _apply(self, etype: EventType, obj: JSON) -> int:
        key = _key(obj)
        old = self._cache.get(key)
        if etype == "DELETED":
            if old is None:
                return 0
            del self._cache[key]
            self._unindex(key, old)
            self._notify("DELETED", old, obj)
            return 1
        if etype not in ("ADDED", "MODIFIED"):
            return 0
        self._cache[key] = obj
        if old is not None:
            self._unindex(key, old)
        for name in self._indexers:
            self._index_add(name, key, obj)
        # A watch replay can re-announce an object we listed: it is a change, not a birth.
        self._notify("ADDED" if old is None else "MODIFIED", old, obj)
        return 1

    def _index_add(self, name: str, key: Key, obj: JSON) -> None:
        index = self._indices[name]
        for value in self._indexers[name](obj):
            index.setdefault(value, {})[key] = obj

    def _unindex(self, key: Key, obj: JSON) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            for value in fn(obj):
                bucket = index.get(value)
                if bucket is not None:
                    bucket.pop(key, None)
                    if not bucket:
                        del index[value]

    def _notify(self, etype: EventType, old: JSON | None, new: JSON | None) -> None:
        for fn in self._handlers:
            fn(etype, old, new)


InformerKey = tuple[Kind, str | None, str | None, str | None]


class InformerFactory:
    """One informer per kind (and namespace and selectors) for every component of a
    process, as client-go's shared informer factory: the controllers of one `katalyst
    controller` hold one CNR watch between them, not one each. The runtime's
    `ComponentHost` owns one per process; a component built without one makes its own.

    Sharing is safe because the components read an informer as a cache (`sync()`, then
    `list()` / `get()`): whichever syncs first brings it up to date for all."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._informers: dict[InformerKey, Informer] = {}

    def informer(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The shared informer of `kind` with these filters, made on first use."""
        key = (kind, namespace, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(self.cluster, kind, namespace, label_selector, field_selector)
            self._informers[key] = informer
        return informer

    def informers(self) -> builtins.list[Informer]:
        return list(self._informers.values())

    def close(self) -> None:
        for informer in self._informers.values():
            informer.close()
