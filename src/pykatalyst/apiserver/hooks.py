"""What a write does beyond its own object, run by the store around the write: a
CustomResourceDefinition serves its kind from the moment it is stored (and stops serving
it, its objects gone, when removed); a namespace takes its objects with it.

These are the only writes that reach across kinds, so they live here rather than in the
strategies (`apiserver/strategy.py`), which only prepare and validate one object. They run
at the moment kube-apiserver's would: a CRD is checked before it is stored (a bad scale
path refuses it), and what a removal takes with it goes first, so watchers see a
namespace's or a CRD's objects deleted before the namespace or the CRD itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from pykatalyst.api.names import CRD, NAMESPACE
from pykatalyst.apiserver.store import KindStore, VersionedStore
from pykatalyst.apiserver.strategy import crd_kind, crd_scale
from pykatalyst.cluster.protocol import JSON

Hook = Callable[[VersionedStore, JSON], None]


def serve_crd_kind(store: VersionedStore, crd: JSON) -> None:
    """Serve the kind `crd` defines (or update a built-in kind's subresources)."""
    kind, has_status = crd_kind(crd)
    scale = crd_scale(crd)  # before anything changes: a bad path refuses the CRD
    existing = store.kinds.get((kind.group, kind.plural))
    if existing is not None and existing.builtin:
        existing.status_subresource = has_status or existing.status_subresource
        existing.scale = scale or existing.scale
        return
    store.register(kind, status_subresource=has_status, unconditional_update=False)
    store.kinds[(kind.group, kind.plural)].scale = scale


def drop_crd_kind(store: VersionedStore, crd: JSON) -> None:
    """Stop serving the custom kind `crd` defined; its objects go first."""
    spec = crd.get("spec") or {}
    key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
    st = store.kinds.get(key)
    if st is not None and not st.builtin:
        store.drop_kind(st)


def empty_namespace(store: VersionedStore, namespace: JSON) -> None:
    """Delete every object of the namespace. Simplification: a real namespace lingers in
    Terminating while its content goes."""
    ns = namespace["metadata"]["name"]
    for st in list(store.kinds.values()):
        if not st.kind.namespaced:
            continue
        for o in list(st.objects.get(ns, {}).values()):
            store.commit(st, "DELETED", o, None)


_ON_STORE: Final[Mapping[tuple[str, str], Hook]] = {(CRD.group, CRD.plural): serve_crd_kind}
_ON_REMOVE: Final[Mapping[tuple[str, str], Hook]] = {
    (CRD.group, CRD.plural): drop_crd_kind,
    (NAMESPACE.group, NAMESPACE.plural): empty_namespace,
}


def on_store(store: VersionedStore, st: KindStore, obj: JSON) -> None:
    """Before `obj` of kind `st` is created or updated (its hook may still refuse it)."""
    hook = _ON_STORE.get((st.kind.group, st.kind.plural))
    if hook is not None:
        hook(store, obj)


def on_remove(store: VersionedStore, st: KindStore, obj: JSON) -> None:
    """Before `obj` of kind `st` is removed for good."""
    hook = _ON_REMOVE.get((st.kind.group, st.kind.plural))
    if hook is not None:
        hook(store, obj)
