"""An in-process Kubernetes API server: the simulator's cluster and most tests' substrate.

It keeps the semantics components rely on, so that code proven here behaves the same
against a real API server: a global resourceVersion, optimistic concurrency, watch from a
version with a bounded history (410 Gone past it), selector-filtered watches that turn
"stops matching" into DELETED, status subresources, `pods/binding`, `pods/eviction`,
finalizers and graceful deletion, and a mutating-then-validating admission chain.

It is built as kube-apiserver's registry is: a generic versioned store
(`apiserver/store.py`, watches in `apiserver/watch.py`), a strategy per kind
(`apiserver/strategy.py`, pods in `apiserver/pods.py`), the hooks of the writes that reach
across kinds (`apiserver/hooks.py`) and the admission chain
(`apiserver/admission.py`). This module runs the verbs through them. Every object handed
to a caller is a fresh deep copy.
"""

from __future__ import annotations

import builtins
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from pykatalyst.api.names import (
    CONFIG_MAP,
    CRD,
    DEFAULT_NAMESPACE,
    DRA_KINDS,
    EVENT,
    HORIZONTAL_POD_AUTOSCALER,
    KATALYST_KINDS,
    KUBE_SYSTEM_NAMESPACE,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    REPLICA_SET,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    SYSTEM_NAMESPACE,
    WORKLOAD_KINDS,
    Kind,
)
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver import hooks, pods, scale
from pykatalyst.apiserver.admission import AdmissionChain
from pykatalyst.apiserver.ingest import bulk_copy, ingest
from pykatalyst.apiserver.resource_strategy import ResourceClaimStrategy, ResourceSliceStrategy
from pykatalyst.apiserver.store import KindStore, VersionedStore
from pykatalyst.apiserver.strategy import (
    EventStrategy,
    NamespaceStrategy,
    PodDisruptionBudgetStrategy,
    Strategy,
    bump_generation,
    check_type,
    drop_empty_meta,
    grace_seconds,
    keep_system_meta,
    spec_changed,
    validate_meta,
)
from pykatalyst.apiserver.watch import MemoryWatch, with_rv
from pykatalyst.cluster.admission import AdmissionPlugin
from pykatalyst.cluster.clock import Clock, VirtualClock
from pykatalyst.cluster.patch import (
    PatchError,
    copy_json,
    copy_object,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from pykatalyst.cluster.protocol import (
    JSON,
    AlreadyExists,
    ApiError,
    BadRequest,
    Cluster,
    Invalid,
    NotFound,
    ObjectList,
    PatchType,
    binding_body,
    eviction_body,
)
from pykatalyst.cluster.selectors import parse_field_selector, parse_label_selector

__all__ = ["MemoryCluster", "MemoryWatch", "strategy_for"]

DEFAULT_NAMESPACES: Final = (DEFAULT_NAMESPACE, KUBE_SYSTEM_NAMESPACE, SYSTEM_NAMESPACE)
# The alphabet the API server draws generateName suffixes from (no vowels, no look-alikes).
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_STRATEGIES: Final[dict[tuple[str, str], type[Strategy]]] = {
    ("", "pods"): pods.PodStrategy,
    ("", "namespaces"): NamespaceStrategy,
    ("", "events"): EventStrategy,
    ("policy", "poddisruptionbudgets"): PodDisruptionBudgetStrategy,
    (RESOURCE_SLICE.group, RESOURCE_SLICE.plural): ResourceSliceStrategy,
    (RESOURCE_CLAIM.group, RESOURCE_CLAIM.plural): ResourceClaimStrategy,
}
_STRATEGIC_REFUSED: Final = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def strategy_for(kind: Kind) -> Strategy:
    """The strategy of a kind: its own where it has one, else the default."""
    return _STRATEGIES.get((kind.group, kind.plural), Strategy)(kind)


EvictionGuard = Callable[[JSON], str | None]


class MemoryCluster:
    """`Cluster` in memory with API-server semantics. Thread-safe: one re-entrant lock
    guards everything (admission plugins may read the cluster while a write is under way).

    `clock` stamps creationTimestamp/deletionTimestamp and drives graceful pod deletion
    (default: a VirtualClock at 0, so tests and the simulator share one notion of time).
    `watch_history` bounds both the replayable event history and how far a single watcher
    may fall behind. `seed` makes uids and generateName suffixes reproducible;
    `uid_factory` replaces uid generation entirely.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        watch_history: int = 1000,
        *,
        seed: int | None = None,
        uid_factory: Callable[[], str] | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
    ) -> None:
        if watch_history < 1:
            raise ValueError(f"watch_history must be at least 1, got {watch_history}")
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.watch_history = watch_history
        self._rng = random.Random(seed)
        self._seeded = seed is not None
        self._uid_factory = uid_factory
        self._store = VersionedStore(watch_history, strategy_for)
        self._cond = self._store.cond
        self._admission = AdmissionChain(self._new_uid)
        self.eviction_guard: EvictionGuard | None = None
        for k in (POD, NODE, NAMESPACE, CRD):
            self.register_kind(k, status_subresource=True, unconditional_update=k != CRD)
        for k in (EVENT, CONFIG_MAP, LEASE):
            self.register_kind(k, status_subresource=False, unconditional_update=True)
        for k in (POD_DISRUPTION_BUDGET, *WORKLOAD_KINDS, REPLICA_SET, HORIZONTAL_POD_AUTOSCALER):
            self.register_kind(k, status_subresource=True, unconditional_update=True)
        for k in KATALYST_KINDS:
            self.register_kind(k, status_subresource=True, unconditional_update=False)
        for k in DRA_KINDS:
            self.register_kind(k, k == RESOURCE_CLAIM, unconditional_update=True)
        for st in self._store.kinds.values():
            st.builtin = True
        for ns in namespaces:
            self.create(NAMESPACE, {"metadata": {"name": ns}})

    # --- kinds ----------------------------------------------------------------------------

    def register_kind(
        self,
        kind: Kind,
        status_subresource: bool = True,
        unconditional_update: bool = False,
    ) -> None:
        """Serve `kind`. `unconditional_update=False` (the custom-resource behaviour) makes
        an update without metadata.resourceVersion a 422, as for real custom resources."""
        with self._cond:
            self._store.register(kind, status_subresource, unconditional_update)

    def registered_kinds(self) -> builtins.list[Kind]:
        with self._cond:
            return [st.kind for st in self._store.kinds.values()]

    def lookup_kind(self, group: str, plural: str) -> Kind:
        """The served kind for an API path's group and resource (NotFound if unknown)."""
        with self._cond:
            return self._store.state(Kind(group, "", "", plural, False)).kind

    def has_status_subresource(self, kind: Kind) -> bool:
        with self._cond:
            return self._store.state(kind).status_subresource

    def has_scale_subresource(self, kind: Kind) -> bool:
        with self._cond:
            return self._store.state(kind).scale is not None

    # --- helpers --------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._store.rv)

    def _new_uid(self) -> str:
        if self._uid_factory is not None:
            return self._uid_factory()
        if self._seeded:
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        return str(uuid.uuid4())

    @staticmethod
    def _namespace_of(st: KindStore, namespace: str | None) -> str:
        if not st.kind.namespaced:
            return ""
        if not namespace:
            raise BadRequest(f"a namespace is required for {st.resource}")
        return namespace

    # --- reads ----------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        with self._cond:
            st = self._store.state(kind)
            return copy_object(st.get(name, self._namespace_of(st, namespace)))

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        with self._cond:
            st = self._store.state(kind, "list")
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, st.resource)
            ns = namespace if st.kind.namespaced and namespace else None
            items = st.select(ns, labels, fields)
            with bulk_copy(len(items)):
                copies = [copy_object(o) for o in items]
            return ObjectList(copies, str(self._store.rv))

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
    ) -> MemoryWatch:
        """Unset or "0" resourceVersion: synthetic ADDED for every matching object, then
        the changes. A specific version: every change after it (410 Gone when it is older
        than the history window)."""
        with self._cond:
            st = self._store.state(kind, "watch")
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, st.resource)
            ns = namespace if st.kind.namespaced and namespace else None
            return self._store.watch(st, ns, labels, fields, resource_version, allow_bookmarks)

    def bookmark(self) -> str:
        """Send a BOOKMARK with the current resourceVersion to every watch that asked for
        bookmarks (a real server does this about once a minute); returns the version."""
        with self._cond:
            return self._store.bookmark()

    # --- admission ------------------------------------------------------------------------

    def add_mutating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        """Plugins run in the order added, each seeing the previous one's result."""
        with self._cond:
            self._admission.add_mutating(fn, name)

    def add_validating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        with self._cond:
            self._admission.add_validating(fn, name)

    def clear_admission(self) -> None:
        with self._cond:
            self._admission.clear()

    # --- create ---------------------------------------------------------------------------

    def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON:
        with self._cond:
            st = self._store.state(kind, "create")
            new = self._decoded_body(st, ingest(obj))
            ns = self._create_namespace(st, new["metadata"], namespace)
            if new["metadata"].get("resourceVersion"):
                raise ApiError("resourceVersion should not be set on objects to be created")
            st.strategy.prepare_for_create(st, new, self.clock.now())
            admitted = self._admission.admit(
                st.kind, "CREATE", new, None, new["metadata"].get("name", ""), ns
            )
            if admitted is not None and admitted is not new:
                new = st.strategy.decode(admitted)
            meta = new.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(st, str(meta["generateName"]), ns)
            validate_meta(st, new)
            st.strategy.validate_create(st, new)
            drop_empty_meta(meta)
            if meta["name"] in st.objects.get(ns, {}):
                raise AlreadyExists(
                    f'{st.resource} "{meta["name"]}" already exists',
                    details={"name": meta["name"], "group": st.kind.group, "kind": st.kind.plural},
                )
            hooks.on_store(self._store, st, new)
            self._stamp_new(st, meta)
            new = {"apiVersion": new.pop("apiVersion"), "kind": new.pop("kind"), **new}
            return copy_object(self._store.commit(st, "ADDED", new, None))

    @staticmethod
    def _decoded_body(st: KindStore, new: Any) -> JSON:
        if not isinstance(new, dict):
            raise BadRequest(f"a {st.kind.kind} must be a JSON object")
        if not isinstance(new.setdefault("metadata", {}), dict):
            raise BadRequest("metadata must be a JSON object")
        check_type(st, new)
        return st.strategy.decode(new)

    def _create_namespace(self, st: KindStore, meta: JSON, namespace: str | None) -> str:
        """The namespace a create writes to (the request's and the body's must agree, and
        it must exist); "" for a cluster-scoped kind."""
        if not st.kind.namespaced:
            meta.pop("namespace", None)
            return ""
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace "
                f"sent on the request ({body_ns!r} vs {namespace!r})"
            )
        ns = namespace or body_ns or ""
        if not ns:
            raise BadRequest(f"a namespace is required to create {st.resource}")
        if not self._store.has_namespace(ns):
            raise NotFound(
                f'namespaces "{ns}" not found', details={"name": ns, "kind": "namespaces"}
            )
        meta["namespace"] = ns
        return str(ns)

    def _stamp_new(self, st: KindStore, meta: JSON) -> None:
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = rfc3339(self.clock.now())
        if st.strategy.tracks_generation:
            meta["generation"] = 1
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(key, None)

    def _generate_name(self, st: KindStore, prefix: str, ns: str) -> str:
        taken = st.objects.get(ns, {})
        base = prefix[: 253 - 5]
        while True:
            suffix = "".join(self._rng.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            if base + suffix not in taken:
                return base + suffix

    # --- update ---------------------------------------------------------------------------

    def update(self, kind: Kind, obj: JSON) -> JSON:
        with self._cond:
            st = self._store.state(kind, "update")
            return self._update(st, ingest(obj), "", require_rv=True)

    def update_status(self, kind: Kind, obj: JSON) -> JSON:
        with self._cond:
            st = self._store.state(kind, "update")
            if not st.status_subresource:
                raise NotFound(
                    f"the server could not find the requested resource (put {st.resource}/status)"
                )
            return self._update(st, ingest(obj), "status", require_rv=True)

    def _update(
        self,
        st: KindStore,
        new: JSON,
        sub: str,
        require_rv: bool,
        url: tuple[str, str] | None = None,
        decoded: bool = False,
    ) -> JSON:
        """Write `new` over the stored object. `decoded`: `new` is already the strategy's
        decoding (a patch result), which decoding again would not change."""
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise BadRequest(f"a {st.kind.kind} must be a JSON object with metadata")
        check_type(st, new)
        if not decoded:
            new = st.strategy.decode(new)
        old = self._update_target(st, new["metadata"], url)
        name, ns = old["metadata"]["name"], old["metadata"].get("namespace", "")
        self._check_preconditions(st, new["metadata"], old["metadata"], require_rv)
        new = self._apply_update_rules(st, sub, old, new, ns)
        admitted = self._admission.admit(st.kind, "UPDATE", new, old, name, ns, sub)
        if admitted is not None and admitted is not new:
            new = st.strategy.decode(admitted)
        if sub:
            # Whatever a plugin did, a subresource still writes only what it may.
            new = st.strategy.write_subresource(st, sub, old, new, ns)
        else:
            st.strategy.validate_update(st, name, old, new)
        return self._write_update(st, old, new)

    def _update_target(self, st: KindStore, meta: JSON, url: tuple[str, str] | None) -> JSON:
        """The stored object an update names (and, for a patch, the URL named)."""
        name = meta.get("name") or ""
        if not name:
            raise st.invalid("", "metadata.name", "Required value: name is required")
        ns = self._namespace_of(st, meta.get("namespace"))
        if url is not None and (name != url[0] or (st.kind.namespaced and ns != url[1])):
            raise BadRequest(
                f"the name of the object ({ns + '/' if ns else ''}{name}) does not match the "
                f"name on the URL ({url[1] + '/' if url[1] else ''}{url[0]})"
            )
        return st.get(name, ns)

    @staticmethod
    def _check_preconditions(
        st: KindStore, meta: JSON, old_meta: Mapping[str, Any], require_rv: bool
    ) -> None:
        name, rv = old_meta["name"], meta.get("resourceVersion")
        if rv:
            if str(rv) != old_meta["resourceVersion"]:
                raise st.conflict(
                    name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
        elif require_rv and not st.unconditional_update:
            raise st.invalid(
                name,
                "metadata.resourceVersion",
                "Invalid value: 0: must be specified for an update",
            )
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise st.invalid(
                name, "metadata.uid", f'Invalid value: "{meta["uid"]}": field is immutable'
            )

    @staticmethod
    def _apply_update_rules(st: KindStore, sub: str, old: JSON, new: JSON, ns: str) -> JSON:
        """What the strategy keeps of an update before admission sees it."""
        if sub:
            return st.strategy.write_subresource(st, sub, old, new, ns)
        if st.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        keep_system_meta(st, new["metadata"], old["metadata"], ns)
        st.strategy.prepare_for_update(new)
        return new

    def _write_update(self, st: KindStore, old: JSON, new: JSON) -> JSON:
        old_meta = old["metadata"]
        name = old_meta["name"]
        meta = new["metadata"] = dict(new["metadata"])
        validate_meta(st, new)
        drop_empty_meta(meta)
        if meta["name"] != name or meta.get("namespace", "") != old_meta.get("namespace", ""):
            raise BadRequest("an update cannot change an object's name or namespace")
        if "deletionTimestamp" in old_meta:
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise st.invalid(
                    name,
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)}",
                )
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            return copy_object(old)  # a no-op write changes nothing, not even the version
        if "generation" in old_meta and spec_changed(st, old, new):
            bump_generation(meta, old_meta)  # (a kind without a generation skips the compare)
        hooks.on_store(self._store, st, new)
        if (
            "deletionTimestamp" in meta
            and not meta.get("finalizers")
            and int(meta.get("deletionGracePeriodSeconds") or 0) == 0
        ):
            self._store.commit(st, "DELETED", new, old)
            return copy_object(with_rv(new, str(self._store.rv)))
        return copy_object(self._store.commit(st, "MODIFIED", new, old))

    # --- patch ----------------------------------------------------------------------------

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> JSON:
        """A patch is applied to the current object and then written as an update: it is
        checked against metadata.resourceVersion only when the patch itself sets one."""
        with self._cond:
            st = self._store.state(kind, "patch")
            if subresource == "scale":
                return self._patch_scale(st, name, patch, namespace, patch_type)
            if (subresource and subresource not in st.strategy.patch_subresources) or (
                subresource == "status" and not st.status_subresource
            ):
                raise NotFound(
                    "the server could not find the requested resource "
                    f"(patch {st.resource}/{subresource})"
                )
            ns = self._namespace_of(st, namespace)
            old = st.get(name, ns)
            new = self._patched(st, old, patch, patch_type)
            if new["metadata"].get("resourceVersion") == old["metadata"]["resourceVersion"]:
                new["metadata"].pop("resourceVersion", None)
            new = self._decode_patched(st, name, new)
            return self._update(st, new, subresource or "", False, (name, ns), decoded=True)

    # --- the scale subresource ------------------------------------------------------------

    def _scale_paths(self, st: KindStore, verb: str) -> scale.ScalePaths:
        if st.scale is None:
            raise NotFound(
                f"the server could not find the requested resource ({verb} {st.resource}/scale)"
            )
        return st.scale

    def get_scale(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        """The object's `autoscaling/v1` Scale (a 404 for a kind without the subresource)."""
        with self._cond:
            st = self._store.state(kind, "get")
            paths = self._scale_paths(st, "get")
            return scale.view(st.get(name, self._namespace_of(st, namespace)), paths)

    def update_scale(self, kind: Kind, name: str, body: Any, namespace: str | None = None) -> JSON:
        """Write a Scale: its spec.replicas, checked against its resourceVersion when set."""
        with self._cond:
            st = self._store.state(kind, "update")
            paths = self._scale_paths(st, "update")
            ns = self._namespace_of(st, namespace)
            return self._write_scale(st, paths, st.get(name, ns), body, (name, ns))

    def _patch_scale(
        self, st: KindStore, name: str, patch: Any, namespace: str | None, patch_type: PatchType
    ) -> JSON:
        paths = self._scale_paths(st, "patch")
        ns = self._namespace_of(st, namespace)
        old = st.get(name, ns)
        view = scale.view(old, paths)
        # a Scale is a built-in type: strategic merge patches apply to it whatever the kind
        new_view = self._patched(st, view, patch, patch_type, builtin_type=True)
        if new_view["metadata"].get("resourceVersion") == view["metadata"].get("resourceVersion"):
            new_view["metadata"].pop("resourceVersion", None)
        return self._write_scale(st, paths, old, new_view, (name, ns))

    def _write_scale(
        self, st: KindStore, paths: scale.ScalePaths, old: JSON, body: Any, url: tuple[str, str]
    ) -> JSON:
        replicas = scale.desired(body, url[0])
        meta = (body.get("metadata") if isinstance(body, dict) else None) or {}
        new = scale.with_replicas(old, paths, replicas)
        new["metadata"] = {**old["metadata"], "resourceVersion": meta.get("resourceVersion")}
        if not new["metadata"]["resourceVersion"]:
            new["metadata"].pop("resourceVersion")
        return scale.view(self._update(st, new, "", False, url), paths)

    @staticmethod
    def _patched(
        st: KindStore, old: JSON, patch: Any, patch_type: PatchType, builtin_type: bool = False
    ) -> JSON:
        name = old["metadata"]["name"]
        try:
            if patch_type == "merge":
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch must be a JSON object", malformed=True)
                result = merge_patch(old, ingest(patch))
            elif patch_type == "strategic":
                if st.strategy.custom_resource and not builtin_type:
                    raise ApiError(_STRATEGIC_REFUSED, "UnsupportedMediaType", 415)
                if not isinstance(patch, dict):
                    raise PatchError(
                        "a strategic merge patch must be a JSON object", malformed=True
                    )
                result = strategic_merge_patch(old, ingest(patch))
            elif patch_type == "json":
                result = json_patch(old, ingest(patch))
            else:
                raise BadRequest(
                    f"unsupported patch type {patch_type!r}; accepted: merge, json, strategic"
                )
        except PatchError as e:
            if e.malformed:
                raise BadRequest(str(e)) from None
            raise Invalid(f'{st.kind.kind} "{name}" is invalid: {e}') from None
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise Invalid(f'{st.kind.kind} "{name}" is invalid: the patch removed metadata')
        return MemoryCluster._own(st, result)

    @staticmethod
    def _own(st: KindStore, result: JSON) -> JSON:
        """A patch result made the write's own. The patch functions build new containers
        only where the patch reaches, sharing the rest with the stored object. A write of
        a kind with the default strategy changes only the top level and the metadata in
        place, so only those are copied, the rest shared (stored objects are never
        changed); other strategies also change nested fields, and get a whole copy."""
        if type(st.strategy) is Strategy:
            return {**result, "metadata": copy_object(result["metadata"])}
        return copy_object(result)

    @staticmethod
    def _decode_patched(st: KindStore, name: str, new: JSON) -> JSON:
        try:
            return st.strategy.decode(new)
        except BadRequest as e:
            # the real server reports a patched object that fails to decode as an
            # invalid patch (422), where the same body on a create is a 400
            reason = e.message.partition(": ")[2] or e.message
            raise Invalid(
                f'{st.kind.kind} "{name}" is invalid: patch: Invalid value: {reason}',
                details={
                    "causes": [{"reason": "FieldValueInvalid", "message": reason, "field": "patch"}]
                },
            ) from None

    # --- delete ---------------------------------------------------------------------------

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON | None:
        """Pods bound to a node are deleted gracefully, as on a real cluster: they keep
        running with deletionTimestamp = now + grace (grace_period_seconds, else
        spec.terminationGracePeriodSeconds) until the kubelet — here a delete with grace
        0, as `apiserver.kubelet.StandInKubelet` sends — removes them. Unbound pods and
        grace 0 delete at once. Objects with finalizers stay, marked, until the last
        finalizer is removed."""
        with self._cond:
            st = self._store.state(kind, "delete")
            ns = self._namespace_of(st, namespace)
            old = st.get(name, ns)
            self._admission.admit(st.kind, "DELETE", None, old, name, ns)
            return self._delete(st, old, grace_period_seconds)

    def _delete(self, st: KindStore, old: JSON, requested: int | None) -> JSON | None:
        meta = old["metadata"]
        if requested is not None:
            requested = grace_seconds(requested, "gracePeriodSeconds")
        grace = st.strategy.deletion_grace(old, requested)
        finalizers = meta.get("finalizers") or []
        marked = "deletionTimestamp" in meta
        current = int(meta.get("deletionGracePeriodSeconds") or 0)
        if marked and grace >= current:
            return copy_object(old)
        # A pod's deletion is always written first (deletionTimestamp, the grace period), even
        # with grace 0: watchers see MODIFIED, then DELETED, as from a real API server.
        if grace > 0 or finalizers or (st.strategy.graceful and not (marked and current == 0)):
            old = self._mark_deleted(st, old, grace)
            if grace > 0 or finalizers:
                return copy_object(old)
        hooks.on_remove(self._store, st, old)
        self._store.commit(st, "DELETED", old, None)
        return None

    def _mark_deleted(self, st: KindStore, old: JSON, grace: int) -> JSON:
        """Write deletionTimestamp = now + grace."""
        meta = old["metadata"]
        now = self.clock.now()
        new = {**old, "metadata": dict(meta)}
        nmeta = new["metadata"]
        nmeta["deletionTimestamp"] = rfc3339(now + grace)
        nmeta["deletionGracePeriodSeconds"] = grace
        if "deletionTimestamp" not in meta:
            bump_generation(nmeta, meta)
        return self._store.commit(st, "MODIFIED", new, old)

    # --- subresources ---------------------------------------------------------------------

    def bind(
        self,
        namespace: str,
        name: str,
        node_name: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        with self._cond:
            st = self._store.state(POD, "create")
            old = st.get(name, namespace)
            if not node_name:
                raise st.invalid(name, "target.name", "Required value")
            binding = binding_body(name, namespace, node_name, annotations)
            kind = Kind("", "v1", "Binding", "bindings", True)
            self._admission.admit(kind, "CREATE", binding, None, name, namespace, "binding")
            new = pods.bound(old, node_name, self.clock.now(), annotations)
            self._store.commit(st, "MODIFIED", new, old)

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """The `pods/eviction` subresource, as kube-apiserver answers it. `eviction_guard`
        (when set) may refuse any pod not yet terminating with a 429. A pod that is
        Pending, finished or terminating is then deleted without a budget check. For any
        other, the one PodDisruptionBudget whose selector matches its labels decides: none
        lets it go, more than one is a 500, a budget whose status is not yet observed or
        that allows no disruption is a 429; otherwise the eviction spends one allowed
        disruption (recorded in the budget's `status.disruptedPods`). The pod gets the
        condition `DisruptionTarget=True` (reason `EvictionByEvictionAPI`), then is deleted
        with the eviction's grace period."""
        with self._cond:
            st = self._store.state(POD, "create")
            old = st.get(name, namespace)
            eviction = eviction_body(name, namespace, grace_period_seconds)
            kind = Kind("policy", "v1", "Eviction", "evictions", True)
            self._admission.admit(kind, "CREATE", eviction, None, name, namespace, "eviction")
            if self.eviction_guard is not None and "deletionTimestamp" not in old["metadata"]:
                reason = self.eviction_guard(copy_json(old))
                if reason:
                    raise pods.guard_refusal(reason)
            now = self.clock.now()
            if pods.needs_budget(old):
                self._spend_disruption(old, now)
            marked = pods.disruption_target(old, now)
            if marked is not None:
                old = self._store.commit(st, "MODIFIED", marked, old)
            self._delete(st, old, grace_period_seconds)

    def _spend_disruption(self, pod: JSON, now: float) -> None:
        budgets = self._store.kinds.get((POD_DISRUPTION_BUDGET.group, POD_DISRUPTION_BUDGET.plural))
        if budgets is None:
            return
        pdbs = budgets.objects.get(pod["metadata"]["namespace"], {})
        spent = pods.spend_disruption(list(pdbs.values()), pod, now)
        if spent is not None:
            self._store.commit(budgets, "MODIFIED", spent, pdbs[spent["metadata"]["name"]])

    # --- persistence ----------------------------------------------------------------------

    def snapshot(self) -> JSON:
        """The whole store as JSON (kinds and objects, not the watch history)."""
        with self._cond:
            kinds = [_kind_entry(st) for st in self._store.kinds.values()]
            return {"resourceVersion": str(self._store.rv), "kinds": kinds}

    @classmethod
    def from_snapshot(
        cls,
        data: Mapping[str, Any],
        clock: Clock | None = None,
        watch_history: int = 1000,
        *,
        seed: int | None = None,
        uid_factory: Callable[[], str] | None = None,
    ) -> MemoryCluster:
        """Rebuild a cluster from `snapshot()`; watches must start from a fresh list."""
        mc = cls(clock, watch_history, seed=seed, uid_factory=uid_factory, namespaces=())
        store = mc._store
        with mc._cond:
            for st in store.kinds.values():
                st.objects.clear()
                st.by_node.clear()
            store.history.clear()
            for entry in data.get("kinds", []):
                kind = Kind(
                    entry["group"],
                    entry["version"],
                    entry["kind"],
                    entry["plural"],
                    bool(entry["namespaced"]),
                    tuple(entry.get("shortNames") or ()),
                )
                mc.register_kind(
                    kind,
                    bool(entry.get("statusSubresource", True)),
                    bool(entry.get("unconditionalUpdate", False)),
                )
                st = store.state(kind)
                for obj in entry.get("items", []):
                    st.put(ingest(obj))
            store.rv = int(data.get("resourceVersion", 0))
            store.floor = store.rv
        return mc

    # --- introspection --------------------------------------------------------------------

    def count(self, kind: Kind) -> int:
        with self._cond:
            return self._store.state(kind).count()


def _kind_entry(st: KindStore) -> JSON:
    k = st.kind
    return {
        "group": k.group,
        "version": k.version,
        "kind": k.kind,
        "plural": k.plural,
        "namespaced": k.namespaced,
        "shortNames": list(k.short_names),
        "statusSubresource": st.status_subresource,
        "unconditionalUpdate": st.unconditional_update,
        "items": [
            copy_json(o) for ns in sorted(st.objects) for _, o in sorted(st.objects[ns].items())
        ],
    }


if TYPE_CHECKING:  # the type checker proves MemoryCluster is a Cluster
    _conforms: Cluster = MemoryCluster()
