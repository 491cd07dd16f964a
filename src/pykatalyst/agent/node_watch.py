"""What the cluster says about this node, held once per agent: its pods and its dynamic config.

One `NodeState` per node agent (Koordinator's statesinformer has the same role): one pod
informer on `spec.nodeName=<node>`, and one resolution of the AdminQoSConfiguration in force
— the one `admin_qos_config` names, else the one the node's CustomNodeConfig targets —
re-read every `config_ttl_s`. `refresh(now)` returns a frozen `NodeView` of both; the agent
overlays the AdminQoSConfiguration on its settings and the eviction stage on its own, from the
same read, so the two never disagree about which object is in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from pykatalyst.api import config_fields, names
from pykatalyst.api.crds import AdminQoSConfiguration, CustomNodeConfig
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """One resolution of the node's dynamic config.

    `ref` is the AdminQoSConfiguration in force ("namespace/name"), None when the node has
    none; `raw` the object as read (None with no ref or when reading it failed, `error` then
    says why and the configuration in force stays). A new `ConfigRead` is made only when the
    TTL has passed: consumers overlay it once per value (compare by identity or `read_at`).
    """

    read_at: float
    ref: str | None = None
    raw: JSON | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    skipped: tuple[Skip, ...] = ()  # the objects this read could not use


@dataclass(frozen=True, slots=True)
class NodeView:
    """The node's pods (uid -> object) and its dynamic config, as of one tick.

    `pods_version` changes whenever the pods do, so a consumer re-parses only then.
    """

    now: float
    pods: Mapping[str, JSON]
    pods_version: int
    config: ConfigRead
    warnings: tuple[str, ...] = field(default=())


class NodeState:
    def __init__(
        self,
        node: str,
        cluster: Cluster,
        *,
        admin_qos: str | None = None,
        config_ttl_s: float = 15.0,
        skips: SkippedObjects | None = None,
    ) -> None:
        self.node = node
        # the agent's objects-skipped counter (the factory registers it where /metrics is)
        self.skips = skips or SkippedObjects(
            "agent", EventRecorder(cluster, names.AGENT_COMPONENT, node)
        )
        self.cluster = cluster
        self.admin_qos = admin_qos
        self.config_ttl_s = config_ttl_s
        self._informer = Informer(cluster, names.POD, field_selector=f"spec.nodeName={node}")
        self._informer.add_handler(self._on_pod)
        self._pods: dict[str, JSON] = {}
        self._pods_view: Mapping[str, JSON] = {}
        self._pods_version = 0
        self._dirty = True
        self._config: ConfigRead | None = None

    def refresh(self, now: float) -> NodeView:
        """Sync the pods and, when the TTL has passed, re-resolve the dynamic config: once
        per tick, by the agent, which hands the view to its eviction stages."""
        warnings: list[str] = []
        try:
            self._informer.sync()
        except ApiError as exc:
            warnings.append(f"cannot list pods: {exc} (using the last known pods)")
        if self._dirty:
            self._pods_view = dict(self._pods)
            self._pods_version += 1
            self._dirty = False
        return NodeView(now, self._pods_view, self._pods_version, self.config(now), tuple(warnings))

    def config(self, now: float) -> ConfigRead:
        """The dynamic config: the last read while it is younger than `config_ttl_s`."""
        last = self._config
        if last is not None and now - last.read_at < self.config_ttl_s:
            return last
        self._config = read_config(self.cluster, self.node, self.admin_qos, now)
        self.skips.report(self._config.skipped, now)
        return self._config

    def _on_pod(self, event: str, old: JSON | None, new: JSON | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if event == "DELETED":
            self._pods.pop(uid, None)
        elif new is not None:
            self._pods[uid] = new
        self._dirty = True


def read_config(cluster: Cluster, node: str, admin_qos: str | None, now: float) -> ConfigRead:
    """Resolve and read the node's AdminQoSConfiguration (I/O: two gets at most). The
    objects it cannot use are in `skipped`: an unreadable CustomNodeConfig (told in an
    Event here), an AdminQoSConfiguration its model refuses (told by the agent's settings,
    which judge it)."""
    warnings: list[str] = []
    skipped: list[Skip] = []
    ref = admin_qos
    if ref is None:
        ref = admin_qos_from_cnc(cluster, node, warnings, skipped)
    if ref is None:
        return ConfigRead(now, warnings=tuple(warnings), skipped=tuple(skipped))
    ns, _, name = ref.partition("/")
    try:
        raw = cluster.get(names.ADMIN_QOS_CONFIGURATION, name, ns)
    except ApiError as exc:
        return ConfigRead(now, ref, error=str(exc), warnings=tuple(warnings))
    try:
        AdminQoSConfiguration.from_json(raw)
    except ValidationError as exc:
        message = f"dynamic config {ref} is invalid: {_problems(exc)}"
        kind = names.ADMIN_QOS_CONFIGURATION
        skipped.append(Skip.of(kind, raw, skip_reason(raw), message, tell=False))
    return ConfigRead(now, ref, raw, warnings=tuple(warnings), skipped=tuple(skipped))


def _problems(exc: ValidationError) -> str:
    return "; ".join(str(p) for p in config_fields.problems_of(exc))


def admin_qos_from_cnc(
    cluster: Cluster, node: str, warnings: list[str], skipped: list[Skip] | None = None
) -> str | None:
    """The AdminQoSConfiguration the node's CustomNodeConfig targets, if any. An unreadable
    CustomNodeConfig is said in `warnings` (and `skipped`) and targets nothing."""
    try:
        raw: Any = cluster.get(names.CUSTOM_NODE_CONFIG, node)
    except ApiError:
        return None
    try:
        cnc = CustomNodeConfig.from_json(raw)
    except ValidationError as exc:
        problems = _problems(exc)
        warnings.append(
            f"CustomNodeConfig {node} is unreadable: {problems} (no dynamic config from it)"
        )
        if skipped is not None:
            message = (
                f"CustomNodeConfig {node} is unreadable: {problems} (the agent on {node} "
                "takes no dynamic config from it)"
            )
            kind = names.CUSTOM_NODE_CONFIG
            skipped.append(Skip.of(kind, raw, skip_reason(raw), message))
        return None
    for target in cnc.status.katalyst_custom_config_list:
        if target.config_type.resource == names.ADMIN_QOS_CONFIGURATION.plural:
            return f"{target.config_namespace}/{target.config_name}"
    return None
