"""Node overcommit: which NodeOvercommitConfig applies to each Node, written as annotations.

A Node labelled `katalyst.kubewharf.io/overcommit_node_pool=<val>` is selected by the
NodeOvercommitConfigs whose `spec.nodeOvercommitSelectorVal` is `<val>`; when several
select it the newest (creationTimestamp, then name) wins. A config with an empty selector
value is the default: it applies to the nodes that carry no pool label. For a selected
node the controller writes, like Katalyst:

- `cpu_overcommit_ratio` / `memory_overcommit_ratio`: the config's ratios ("1" when unset);
- `realtime_{cpu,memory}_overcommit_ratio`: copied from the node's CNR, where the agent
  publishes them;
- `overcommit_{allocatable,capacity}_{cpu,memory}`:
  `(original - guaranteedCPUs) * ratio + guaranteedCPUs`, with `ratio = min(set,
  realtime) >= 1`, the originals read from the `original_*` annotations the node webhook
  keeps, and guaranteedCPUs from the CNR (only under a static cpu manager; 0 for memory).

A node no config selects loses all these annotations, so deleting a config restores its
nodes. Each config's status lists the nodes it selects (`matchedNodeList`).

A controller given a node selector writes annotations only on the nodes it selects, but
lists every node a config selects in `matchedNodeList`: controllers for two node pools then
write the same list, instead of each one's pool in turn.

A config whose ratio is not a number >= 1 is refused: it selects nothing, a Warning Event
(`InvalidOvercommitConfig`) on it says why, once per generation, and it changes nothing:
a node whose only configs are refused ones keeps the annotations it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pykatalyst.api import names
from pykatalyst.api.crds import NodeOvercommitConfig
from pykatalyst.api.problems import field_problems
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.cluster.selectors import parse_label_selector
from pykatalyst.cluster.skips import Skip, SkippedObjects

DEFAULT_RATIO = "1"
_RATIO_KEYS = {
    names.RESOURCE_CPU: names.CPU_OVERCOMMIT_RATIO_ANNOTATION,
    names.RESOURCE_MEMORY: names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
}
_REALTIME_KEYS = {
    names.RESOURCE_CPU: names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION,
    names.RESOURCE_MEMORY: names.REALTIME_MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
}
# resource -> (original allocatable, original capacity, overcommit allocatable, capacity)
_CAPACITY_KEYS = {
    names.RESOURCE_CPU: (
        names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION,
        names.ORIGINAL_CAPACITY_CPU_ANNOTATION,
        names.OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION,
        names.OVERCOMMIT_CAPACITY_CPU_ANNOTATION,
    ),
    names.RESOURCE_MEMORY: (
        names.ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION,
        names.ORIGINAL_CAPACITY_MEMORY_ANNOTATION,
        names.OVERCOMMIT_ALLOCATABLE_MEMORY_ANNOTATION,
        names.OVERCOMMIT_CAPACITY_MEMORY_ANNOTATION,
    ),
}


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the decision reads of a Node and of its CNR (None: no CNR)."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    cnr_annotations: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class OvercommitConfigFacts:
    name: str
    selector_val: str
    ratios: Mapping[str, str]
    created: float
    matched: tuple[str, ...] = ()
    error: str = ""  # why the config is refused; "" when it is valid
    generation: int = 0
    uid: str = ""


@dataclass(frozen=True, slots=True)
class NodeAnnotationPatch:
    node: str
    config: str  # the config that selects the node; "" when none does
    changes: Mapping[str, str | None]  # None: remove the annotation

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "config": self.config, "changes": dict(self.changes)}


@dataclass(frozen=True, slots=True)
class OvercommitPlan:
    time: float
    selection: Mapping[str, str]  # node -> config ("" when none)
    patches: tuple[NodeAnnotationPatch, ...]
    statuses: Mapping[str, tuple[str, ...]]  # config -> its new matchedNodeList
    notes: tuple[str, ...] = ()
    refused: tuple[OvercommitConfigFacts, ...] = ()  # configs to report with an Event

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "selection": dict(self.selection),
            "patches": [p.to_json() for p in self.patches],
            "statuses": {k: list(v) for k, v in dict(self.statuses).items()},
            "notes": list(self.notes),
            "refused": {c.name: c.error for c in self.refused},
        }

    def summary(self) -> str:
        selected = sum(1 for c in self.selection.values() if c)
        return (
            f"overcommit: {len(self.selection)} nodes, {selected} selected by a config; "
            f"{len(self.patches)} node updates, {len(self.statuses)} status updates"
        )


def read_config(obj: JSON) -> OvercommitConfigFacts:
    """A NodeOvercommitConfig as the decision sees it; a bad one is kept with its error."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    created = _created(meta)
    status = obj.get("status")
    listed = status.get("matchedNodeList") if isinstance(status, dict) else None
    matched = tuple(str(n) for n in listed) if isinstance(listed, list) else ()
    gen = meta.get("generation")
    generation = gen if isinstance(gen, int) else 0
    uid = str(meta.get("uid", ""))
    try:
        noc = NodeOvercommitConfig.model_validate(obj)
    except ValidationError as exc:
        spec_raw = obj.get("spec")
        raw = spec_raw.get("nodeOvercommitSelectorVal", "") if isinstance(spec_raw, dict) else ""
        first = field_problems(exc)[0].show()
        return OvercommitConfigFacts(name, str(raw), {}, created, matched, first, generation, uid)
    spec = noc.spec
    return OvercommitConfigFacts(
        name,
        spec.node_overcommit_selector_val,
        dict(spec.resource_overcommit_ratio),
        created,
        matched,
        generation=generation,
        uid=uid,
    )


def _created(meta: Mapping[str, Any]) -> float:
    text = meta.get("creationTimestamp")
    try:
        return parse_rfc3339(text) if isinstance(text, str) and text else 0.0
    except ValueError:
        return 0.0


def _candidates(
    node: NodeFacts, configs: Sequence[OvercommitConfigFacts]
) -> list[OvercommitConfigFacts]:
    """The configs (valid or refused) whose selector value is the node's pool."""
    val = node.labels.get(names.OVERCOMMIT_NODE_POOL_LABEL)
    if val == "":
        return []  # an empty label value selects nothing (Katalyst matches it to no pool)
    want = "" if val is None else val
    return [c for c in configs if c.selector_val == want]


def select_config(
    node: NodeFacts, configs: Sequence[OvercommitConfigFacts]
) -> OvercommitConfigFacts | None:
    """The config that applies to the node: the newest with the node's pool value, the
    newest default (empty value) for a node without the pool label, else None."""
    found = [c for c in _candidates(node, configs) if not c.error]
    if not found:
        return None
    return max(found, key=lambda c: (c.created, c.name))


def desired_annotations(node: NodeFacts, config: OvercommitConfigFacts | None) -> dict[str, str]:
    """The managed annotations the node should carry (absent keys: removed)."""
    if config is None:
        return {}
    out: dict[str, str] = {}
    cnr = node.cnr_annotations or {}
    for resource, key in _RATIO_KEYS.items():
        out[key] = config.ratios.get(resource, DEFAULT_RATIO)
        # The agent publishes its realtime ratio on the CNR under the node annotation's key.
        realtime = cnr.get(key)
        if realtime is not None:
            out[_REALTIME_KEYS[resource]] = realtime
    guaranteed = _guaranteed_cpus(cnr)
    for resource, (orig_alloc, orig_cap, oc_alloc, oc_cap) in _CAPACITY_KEYS.items():
        ratio = _effective_ratio(out.get(_RATIO_KEYS[resource]), out.get(_REALTIME_KEYS[resource]))
        extra = guaranteed if resource == names.RESOURCE_CPU else 0
        alloc = _scaled(node.annotations.get(orig_alloc), ratio, extra, resource)
        cap = _scaled(node.annotations.get(orig_cap), ratio, extra, resource)
        if alloc is not None and cap is not None:
            out[oc_alloc] = alloc
            out[oc_cap] = cap
    return out


def _ratio(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value == value else None


def _effective_ratio(configured: str | None, realtime: str | None) -> float:
    values = [v for v in (_ratio(configured), _ratio(realtime)) if v is not None]
    return max(min(values), 1.0) if values else 1.0


def _guaranteed_cpus(cnr: Mapping[str, str]) -> int:
    if cnr.get(names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION) != names.CPU_MANAGER_POLICY_STATIC:
        return 0
    try:
        return max(int(cnr.get(names.CNR_GUARANTEED_CPUS_ANNOTATION, "0")), 0)
    except ValueError:
        return 0


def _scaled(text: str | None, ratio: float, guaranteed: int, resource: str) -> str | None:
    """`(original - guaranteed) * ratio + guaranteed` in Katalyst's units: millicpu for
    cpu, whole bytes for memory; None when the original is missing or unreadable."""
    if text is None:
        return None
    try:
        original = Quantity.parse(text)
    except QuantityError:
        return None
    g = Quantity.from_int(guaranteed, original.format)
    rest = original - g
    if resource == names.RESOURCE_CPU:
        scaled = Quantity.from_milli(int(rest.milli_value() * ratio), original.format)
    else:
        scaled = Quantity.from_int(int(rest.value() * ratio), original.format)
    return str(scaled + g)


def decide(
    nodes: Sequence[NodeFacts],
    configs: Sequence[OvercommitConfigFacts],
    now: float,
    reported: frozenset[tuple[str, str, int]] = frozenset(),
    owned: frozenset[str] | None = None,
) -> OvercommitPlan:
    """Pure: the annotation changes per node and the configs whose node list changed.
    `reported` holds the (name, uid, generation) of refused configs already told about;
    `owned`, the nodes whose annotations are this controller's to write (None: all). The
    node lists count every node given, owned or not."""
    selection: dict[str, str] = {}
    patches: list[NodeAnnotationPatch] = []
    matched: dict[str, list[str]] = {c.name: [] for c in configs}
    held: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        config = select_config(node, configs)
        selection[node.name] = config.name if config else ""
        if config is not None:
            matched[config.name].append(node.name)
        if owned is not None and node.name not in owned:
            continue
        if config is None and any(c.error for c in _candidates(node, configs)):
            held.append(node.name)  # a refused config changes nothing on its nodes
            continue
        want = desired_annotations(node, config)
        changes: dict[str, str | None] = {}
        for key in names.OVERCOMMIT_MANAGED_ANNOTATIONS:
            have = node.annotations.get(key)
            if want.get(key) != have:
                changes[key] = want.get(key)
        if changes:
            patches.append(NodeAnnotationPatch(node.name, selection[node.name], changes))
    statuses = {
        c.name: tuple(matched[c.name]) for c in configs if tuple(matched[c.name]) != c.matched
    }
    notes = [f"NodeOvercommitConfig {c.name} ignored: {c.error}" for c in configs if c.error]
    if held:
        notes.append(f"kept as they are (only refused configs select them): {', '.join(held)}")
    refused = tuple(c for c in configs if c.error and refusal_key(c) not in reported)
    return OvercommitPlan(now, selection, tuple(patches), statuses, tuple(notes), refused)


def refusal_key(config: OvercommitConfigFacts) -> tuple[str, str, int]:
    return (config.name, config.uid, config.generation)


def refusal_message(config: OvercommitConfigFacts) -> str:
    return (
        f"NodeOvercommitConfig {config.name} is refused and selects no node "
        f"(its nodes keep what they have): {config.error}"
    )


@dataclass(frozen=True, slots=True)
class ApplyResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


def node_facts(node: JSON, cnr: JSON | None) -> NodeFacts:
    meta = node.get("metadata") or {}
    cnr_meta = (cnr or {}).get("metadata") or {}
    return NodeFacts(
        str(meta.get("name", "")),
        {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        None
        if cnr is None
        else {str(k): str(v) for k, v in (cnr_meta.get("annotations") or {}).items()},
    )


class OvercommitController:
    """`reconcile(now)` decides from informer caches; `apply(plan)` patches Node
    annotations and NodeOvercommitConfig statuses; `run(now)` does both."""

    name = names.CONTROLLER_OVERCOMMIT

    def __init__(
        self,
        cluster: Cluster,
        *,
        node_selector: str | None = None,
        skips: SkippedObjects | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        shared = informers if informers is not None else InformerFactory(cluster)
        # Every node is read, for the configs' node lists; the selector picks the nodes
        # whose annotations this controller writes.
        self._selector = parse_label_selector(node_selector) if node_selector else None
        self._nodes = shared.informer(names.NODE)
        self._cnrs = shared.informer(names.CUSTOM_NODE_RESOURCE)
        self._configs = shared.informer(names.NODE_OVERCOMMIT_CONFIG)
        self._reported: set[tuple[str, str, int]] = set()
        self.events = EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        # The process's counter is shared by its controllers (ControllerRunner hands it in).
        self.skips = skips or SkippedObjects("controller", self.events)

    def reconcile(self, now: float) -> OvercommitPlan:
        for informer in (self._nodes, self._cnrs, self._configs):
            informer.sync()
        nodes = []
        for obj in self._nodes.list():
            name = str((obj.get("metadata") or {}).get("name", ""))
            nodes.append(node_facts(obj, self._cnrs.get(name)))
        sel = self._selector
        owned = None if sel is None else frozenset(n.name for n in nodes if sel.matches(n.labels))
        configs = [read_config(o) for o in self._configs.list()]
        # every refused config is counted on every reconcile; its Event is written once
        # per generation (the plan's `refused`)
        kind = names.NODE_OVERCOMMIT_CONFIG
        self.skips.report(
            (
                Skip(kind, c.name, "", c.uid, "", names.SKIP_REASON_INVALID, c.error)
                for c in configs
                if c.error
            ),
            now,
            event=False,
        )
        return decide(nodes, configs, now, frozenset(self._reported), owned)

    def apply(self, plan: OvercommitPlan) -> ApplyResult:
        done: list[str] = []
        failed: list[str] = []
        for p in plan.patches:
            body: JSON = {"metadata": {"annotations": dict(p.changes)}}
            try:
                self.cluster.patch(names.NODE, p.node, body)
                done.append(f"node {p.node}")
            except NotFound:
                continue
            except ApiError as exc:
                failed.append(f"node {p.node}: {exc}")
        for config, nodes in dict(plan.statuses).items():
            body = {"status": {"matchedNodeList": list(nodes)}}
            try:
                self.cluster.patch(names.NODE_OVERCOMMIT_CONFIG, config, body, subresource="status")
                done.append(f"status {config}")
            except NotFound:
                continue
            except ApiError as exc:
                failed.append(f"status {config}: {exc}")
        for refused in plan.refused:
            kind = names.NODE_OVERCOMMIT_CONFIG
            ref = ObjectRef(kind.kind, refused.name, uid=refused.uid, api_version=kind.api_version)
            reason = names.EVENT_REASON_INVALID_OVERCOMMIT_CONFIG
            outcome = self.events.record(
                ref, "Warning", reason, refusal_message(refused), plan.time
            )
            if outcome in ("failed", "throttled"):
                failed.append(f"event {refused.name}: {outcome}")
                continue
            done.append(f"event {refused.name}")
            self._reported.add(refusal_key(refused))
        return ApplyResult(tuple(done), tuple(failed))

    def run(self, now: float) -> tuple[OvercommitPlan, ApplyResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)
