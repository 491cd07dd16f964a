"""Lifecycle: one CustomNodeResource and one CustomNodeConfig per Node, gone with it.

Both carry an ownerReference to their Node (controller, blockOwnerDeletion), so the
garbage collector deletes them with it. The CNR takes on the Node's labels (merged over its
own), the CNC mirrors them exactly: the CNC's labels are what KCC label selectors match.
A CNR or CNC whose Node is gone is deleted, once it is older than `orphan_grace_s` and a
fresh read confirms that the Node does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, AlreadyExists, ApiError, Cluster, NotFound

DEFAULT_ORPHAN_GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class ObjectFacts:
    """A Node, CNR or CNC as the lifecycle reads it."""

    name: str
    uid: str = ""
    labels: Mapping[str, str] | None = None
    owners: tuple[Mapping[str, Any], ...] = ()
    created: float = 0.0


@dataclass(frozen=True, slots=True)
class LifecycleAction:
    verb: str  # create | patch | delete
    kind: Kind
    name: str
    body: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"action": self.verb, "kind": self.kind.kind, "name": self.name}


@dataclass(frozen=True, slots=True)
class LifecyclePlan:
    time: float
    nodes: int
    actions: tuple[LifecycleAction, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "nodes": self.nodes,
            "actions": [a.to_json() for a in self.actions],
        }

    def summary(self) -> str:
        counts = {
            v: sum(1 for a in self.actions if a.verb == v) for v in ("create", "patch", "delete")
        }
        what = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "nothing to do"
        return f"lifecycle: {self.nodes} nodes; {what}"


def owner_reference(node: ObjectFacts) -> dict[str, Any]:
    return {
        "apiVersion": names.NODE.api_version,
        "kind": names.NODE.kind,
        "name": node.name,
        "uid": node.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(obj: ObjectFacts, node: ObjectFacts) -> bool:
    return any(
        o.get("kind") == names.NODE.kind and o.get("name") == node.name and o.get("uid") == node.uid
        for o in obj.owners
    )


def _desired(kind: Kind, node: ObjectFacts, have: ObjectFacts | None) -> LifecycleAction | None:
    node_labels = dict(node.labels or {})
    ref = owner_reference(node)
    if have is None:
        new = {"name": node.name, "labels": node_labels, "ownerReferences": [ref]}
        return LifecycleAction("create", kind, node.name, {"metadata": new})
    labels = dict(have.labels or {})
    # The CNC mirrors the Node's labels exactly; the CNR keeps its own besides.
    want = node_labels if kind == names.CUSTOM_NODE_CONFIG else {**labels, **node_labels}
    meta: dict[str, Any] = {}
    if want != labels:
        # A merge patch: keys the CNC must lose are written as null.
        patch: dict[str, str | None] = {k: None for k in labels if k not in want}
        patch.update(want)
        meta["labels"] = patch
    if not _owned_by(have, node):
        others = [o for o in have.owners if o.get("kind") != names.NODE.kind]
        meta["ownerReferences"] = [*map(dict, others), ref]
    return LifecycleAction("patch", kind, node.name, {"metadata": meta}) if meta else None


def decide(
    nodes: Sequence[ObjectFacts],
    cnrs: Sequence[ObjectFacts],
    cncs: Sequence[ObjectFacts],
    now: float,
    *,
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S,
) -> LifecyclePlan:
    """Pure: the CNRs and CNCs to create or fix for each Node, and the orphans to delete."""
    actions: list[LifecycleAction] = []
    node_names = {n.name for n in nodes}
    for kind, objs in ((names.CUSTOM_NODE_RESOURCE, cnrs), (names.CUSTOM_NODE_CONFIG, cncs)):
        by_name = {o.name: o for o in objs}
        for node in sorted(nodes, key=lambda n: n.name):
            action = _desired(kind, node, by_name.get(node.name))
            if action is not None:
                actions.append(action)
        for obj in sorted(objs, key=lambda o: o.name):
            if obj.name not in node_names and now - obj.created >= orphan_grace_s:
                actions.append(LifecycleAction("delete", kind, obj.name))
    return LifecyclePlan(now, len(nodes), tuple(actions))


def object_facts(obj: JSON) -> ObjectFacts:
    meta = obj.get("metadata") or {}
    created = 0.0
    text = meta.get("creationTimestamp")
    if isinstance(text, str) and text:
        try:
            created = parse_rfc3339(text)
        except ValueError:
            created = 0.0
    return ObjectFacts(
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        tuple(o for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)),
        created,
    )


@dataclass(frozen=True, slots=True)
class ApplyResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


class LifecycleController:
    """`reconcile(now)` decides from informer caches; `apply(plan)` creates, patches and
    deletes (an orphan only after a fresh read of its Node says NotFound)."""

    name = names.CONTROLLER_LIFECYCLE

    def __init__(
        self,
        cluster: Cluster,
        *,
        node_selector: str | None = None,
        orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.orphan_grace_s = orphan_grace_s
        self.node_selector = node_selector
        shared = informers if informers is not None else InformerFactory(cluster)
        self._nodes = shared.informer(names.NODE, label_selector=node_selector)
        self._cnrs = shared.informer(names.CUSTOM_NODE_RESOURCE)
        self._cncs = shared.informer(names.CUSTOM_NODE_CONFIG)

    def reconcile(self, now: float) -> LifecyclePlan:
        for informer in (self._nodes, self._cnrs, self._cncs):
            informer.sync()
        nodes = [object_facts(o) for o in self._nodes.list()]
        cnrs = [object_facts(o) for o in self._cnrs.list()]
        cncs = [object_facts(o) for o in self._cncs.list()]
        if self.node_selector:
            # Only the objects of the selected nodes are this replica's to create or fix.
            wanted = {n.name for n in nodes}
            cnrs = [o for o in cnrs if o.name in wanted or _owner_is_node(o)]
            cncs = [o for o in cncs if o.name in wanted or _owner_is_node(o)]
        return decide(nodes, cnrs, cncs, now, orphan_grace_s=self.orphan_grace_s)

    def apply(self, plan: LifecyclePlan) -> ApplyResult:
        done: list[str] = []
        failed: list[str] = []
        for a in plan.actions:
            what = f"{a.verb} {a.kind.kind} {a.name}"
            try:
                if a.verb == "create":
                    self.cluster.create(a.kind, dict(a.body or {}))
                elif a.verb == "patch":
                    self.cluster.patch(a.kind, a.name, dict(a.body or {}))
                elif self._node_gone(a.name):
                    self.cluster.delete(a.kind, a.name)
                else:
                    continue
                done.append(what)
            except (NotFound, AlreadyExists):
                continue
            except ApiError as exc:
                failed.append(f"{what}: {exc}")
        return ApplyResult(tuple(done), tuple(failed))

    def _node_gone(self, name: str) -> bool:
        try:
            self.cluster.get(names.NODE, name)
        except NotFound:
            return True
        return False

    def run(self, now: float) -> tuple[LifecyclePlan, ApplyResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)


def _owner_is_node(obj: ObjectFacts) -> bool:
    return any(o.get("kind") == names.NODE.kind for o in obj.owners)
