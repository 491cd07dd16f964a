"""The webhook's handlers and the caches they read, wired once for every way they run:
behind `katalyst webhook`'s HTTPS server and inside an embedded API server's admission chain.

The SPD-reference mutator reads ServiceProfileDescriptors from an informer's cache (indexed
by `spec.targetRef`), refreshed by the host's ticker: the admission path makes no API call.
An SPD whose `spec.targetRef` names no workload is skipped: counted on every sync in
`katalyst_webhook_objects_skipped_total` and told once per version in a Warning Event on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pykatalyst.api import config_fields, names
from pykatalyst.cluster.admission import AdmissionPlugins, AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason
from pykatalyst.webhook.kvpa import KVPAIndex, KVPARecommender, validate_kvpa
from pykatalyst.webhook.nodes import admit_node
from pykatalyst.webhook.pods import PodMutator, Recommender, SPDReferenceMutator, validate_pod

Handler = Callable[[AdmissionRequest], AdmissionResponse]

VALIDATE_PODS = "/validate/pods"
MUTATE_PODS = "/mutate/pods"
MUTATE_NODES = "/mutate/nodes"
VALIDATE_KVPA = "/validate/kvpa"
BY_TARGET = "targetRef"


def index_by_target(spd: JSON) -> Iterable[str]:
    """An SPD's workload key; an SPD whose spec cannot be read targets nothing."""
    spec = spd.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, dict) else None
    ns = spd["metadata"].get("namespace", "")
    if isinstance(ref, dict) and ref.get("kind") and ref.get("name"):
        return (f"{ns}/{ref['kind']}/{ref['name']}",)
    return ()


def spd_problem(spd: JSON) -> str:
    """Why the webhook cannot use a stored SPD, or "": the problems `katalyst validate`
    names, else what its targetRef lacks."""
    if index_by_target(spd):
        return ""
    kind = names.SERVICE_PROFILE_DESCRIPTOR
    body = {**spd, "apiVersion": kind.api_version, "kind": kind.kind}
    problems = config_fields.config_problems(body)
    if problems:
        return "; ".join(str(p) for p in problems)
    return "spec.targetRef: accepted: an object naming the workload's kind and name"


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    kind: str  # the kind the route admits: "Pod", "Node", "KatalystVerticalPodAutoscaler"
    mutating: bool
    handler: Handler
    group: str = ""


class WebhookService:
    """The routes and their SPD cache. `cluster` None: no SPD is ever found (the webhook
    validates and mutates nodes only)."""

    def __init__(self, cluster: Cluster | None, recommender: Recommender | None = None) -> None:
        self.spds = (
            Informer(
                cluster, names.SERVICE_PROFILE_DESCRIPTOR, indexers={BY_TARGET: index_by_target}
            )
            if cluster is not None
            else None
        )
        self.synced = cluster is None
        self.sync_error: str | None = None
        # registered in the serving host's registry by `runtime.webhook`
        self.skips = SkippedObjects(
            "webhook",
            EventRecorder(cluster, names.WEBHOOK_COMPONENT) if cluster is not None else None,
        )
        self._verdicts: dict[str, tuple[str, str]] = {}  # uid -> (resourceVersion, problem)
        spd = SPDReferenceMutator(self._spd_by_name, self._spd_by_target)
        # KVPAs and workloads: the KVPA rules and the recommendations at pod creation
        self.kvpas = KVPAIndex(cluster) if cluster is not None else None
        if recommender is None and self.kvpas is not None:
            recommender = KVPARecommender(self.kvpas)
        kvpa_kind = names.KATALYST_VERTICAL_POD_AUTOSCALER
        self.routes = (
            Route(VALIDATE_PODS, "Pod", False, validate_pod),
            Route(MUTATE_PODS, "Pod", True, PodMutator(spd, recommender)),
            Route(MUTATE_NODES, "Node", True, admit_node),
            Route(
                VALIDATE_KVPA,
                kvpa_kind.kind,
                False,
                lambda r: validate_kvpa(r, self.kvpas),
                kvpa_kind.group,
            ),
        )

    def _spd_by_name(self, namespace: str, name: str) -> JSON | None:
        return self.spds.get(name, namespace) if self.spds is not None else None

    def _spd_by_target(self, namespace: str, kind: str, name: str) -> JSON | None:
        if self.spds is None:
            return None
        found = self.spds.by_index(BY_TARGET, f"{namespace}/{kind}/{name}")
        return found[0] if found else None

    def sync(self, now: float) -> int:
        """Refresh the caches (the host's ticker); raises what the cluster raises."""
        if self.spds is None:
            return 0
        try:
            changed = self.spds.sync()
            if self.kvpas is not None:
                changed += self.kvpas.sync()
        except ApiError as exc:
            self.sync_error = str(exc)
            raise
        self.synced, self.sync_error = True, None
        self.skips.report(self._skipped(self.spds.list()), now)
        return changed

    def _skipped(self, spds: list[JSON]) -> list[Skip]:
        """The SPDs the index leaves out, each checked once per resourceVersion."""
        verdicts: dict[str, tuple[str, str]] = {}
        out: list[Skip] = []
        for spd in spds:
            meta = spd.get("metadata") or {}
            uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
            seen = self._verdicts.get(uid)
            problem = seen[1] if seen is not None and seen[0] == rv else spd_problem(spd)
            verdicts[uid] = (rv, problem)
            if problem:
                kind = names.SERVICE_PROFILE_DESCRIPTOR
                out.append(Skip.of(kind, spd, skip_reason(spd), problem))
        self._verdicts = verdicts
        return out

    def not_ready(self) -> str | None:
        if self.synced:
            return None
        return self.sync_error or "the ServiceProfileDescriptor cache has not synced"


def install(cluster: AdmissionPlugins, service: WebhookService) -> None:
    """Run the webhook's handlers in `cluster`'s admission chain, in process: mutating
    routes first, each only for the kind it admits (as the webhook configurations scope
    them)."""
    for route in service.routes:
        plugin = _scoped(route)
        if route.mutating:
            cluster.add_mutating_admission(plugin, name=f"katalyst-webhook{route.path}")
        else:
            cluster.add_validating_admission(plugin, name=f"katalyst-webhook{route.path}")


def _scoped(route: Route) -> Handler:
    def plugin(request: AdmissionRequest) -> AdmissionResponse:
        if request.kind.kind != route.kind or request.kind.group != route.group:
            return AdmissionResponse()
        return route.handler(request)

    return plugin
