"""KubeSchedulerConfiguration: load (v1beta3 or v1, bare or inside a ConfigMap), default
the way kube-scheduler does, validate, and resolve every profile into the ordered plugin
list of each extension point with weights and typed args.

A file that would make kube-scheduler refuse to start is refused here too, with a message
that names the profile, the plugin and the field; so are plugin names nobody implements,
since a typo would otherwise silently drop a policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pykatalyst.api import names
from pykatalyst.api.duration import Duration, format_duration
from pykatalyst.api.problems import field_problems
from pykatalyst.api.yamlio import load_yaml, load_yaml_all
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import OpaqueArgs, StrictModel, default_args
from pykatalyst.scheduler.intree import in_tree_registry

GROUP: Final = "kubescheduler.config.k8s.io"
API_VERSIONS: Final = (f"{GROUP}/v1beta3", f"{GROUP}/v1")
KIND: Final = "KubeSchedulerConfiguration"


class SchedulerConfigError(ValueError):
    """The configuration is invalid; `problems` lists every problem found."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{where}invalid scheduler configuration: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{where}invalid scheduler configuration:\n{lines}"
        super().__init__(text)


# --- wire models ----------------------------------------------------------------------------


class PluginRef(StrictModel):
    name: str
    weight: int | None = None


class PluginSet(StrictModel):
    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(StrictModel):
    preEnqueue: PluginSet = Field(default_factory=PluginSet)
    queueSort: PluginSet = Field(default_factory=PluginSet)
    preFilter: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)
    postFilter: PluginSet = Field(default_factory=PluginSet)
    preScore: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    preBind: PluginSet = Field(default_factory=PluginSet)
    bind: PluginSet = Field(default_factory=PluginSet)
    postBind: PluginSet = Field(default_factory=PluginSet)
    multiPoint: PluginSet = Field(default_factory=PluginSet)

    def point(self, name: str) -> PluginSet:
        value = getattr(self, name)
        assert isinstance(value, PluginSet)
        return value


class PluginConfig(StrictModel):
    name: str
    args: dict[str, Any] | None = None


class Profile(StrictModel):
    schedulerName: str = reg.DEFAULT_SCHEDULER_PROFILE
    percentageOfNodesToScore: int | None = None
    plugins: Plugins | None = None
    pluginConfig: list[PluginConfig] = Field(default_factory=list)


class Extender(BaseModel):
    """An extender entry is kept as written: this scheduler does not call extenders."""

    model_config = ConfigDict(extra="allow")
    urlPrefix: str = ""


class ClientConnection(StrictModel):
    """componentbaseconfig's ClientConnectionConfiguration. A qps or burst of 0 (or unset)
    takes kube-scheduler's defaults, 50 and 100; a negative qps disables the limit."""

    kubeconfig: str = ""
    acceptContentTypes: str = ""
    contentType: str = ""
    qps: float = 0.0
    burst: int = 0


class LeaderElection(StrictModel):
    """componentbaseconfig's LeaderElectionConfiguration, with kube-scheduler's defaults
    except the Lease's name and namespace, which are Katalyst's scheduler's. Honoured: the
    scheduler elects on this Lease with these timings unless its command line says
    otherwise. Only `leases` locks exist in current Kubernetes."""

    leaderElect: bool = True
    leaseDuration: Duration = 15.0
    renewDeadline: Duration = 10.0
    retryPeriod: Duration = 2.0
    resourceLock: Literal["leases"] = "leases"
    resourceName: str = Field(default=names.SCHEDULER_LEASE_NAME, min_length=1)
    resourceNamespace: str = Field(default=names.SYSTEM_NAMESPACE, min_length=1)

    def to_json(self) -> dict[str, Any]:
        return {
            "leaderElect": self.leaderElect,
            "leaseDuration": format_duration(self.leaseDuration),
            "renewDeadline": format_duration(self.renewDeadline),
            "retryPeriod": format_duration(self.retryPeriod),
            "resourceLock": self.resourceLock,
            "resourceName": self.resourceName,
            "resourceNamespace": self.resourceNamespace,
        }


# kube-scheduler's clientConnection defaults (SetDefaults_KubeSchedulerConfiguration)
DEFAULT_CLIENT_QPS: Final = 50.0
DEFAULT_CLIENT_BURST: Final = 100


# Fields of kube-scheduler's configuration that this scheduler accepts (and validates) but
# that change nothing here, and why; `--print-config` lists those a file sets.
NO_EFFECT: Final[dict[str, str]] = {
    "parallelism": (
        "kube-scheduler's number of goroutines filtering and scoring nodes; here each pass "
        "over the nodes is one vectorised (numpy) computation in the scheduling thread"
    ),
    "enableProfiling": (
        "kube-scheduler serves Go's profiler at /debug/pprof; this Python process serves no "
        "profiler (attach py-spy to it instead)"
    ),
    "enableContentionProfiling": (
        "Go's lock contention profile, part of /debug/pprof; there is no counterpart here"
    ),
    "clientConnection.contentType": (
        "the API server is spoken to in JSON, the only encoding the Python client has; a "
        "protobuf content type is not used"
    ),
    "clientConnection.acceptContentTypes": (
        "the API server is spoken to in JSON, the only encoding the Python client has"
    ),
}


class KubeSchedulerConfigurationModel(StrictModel):
    apiVersion: str
    kind: str
    parallelism: int = 16
    leaderElection: LeaderElection = Field(default_factory=LeaderElection)
    clientConnection: ClientConnection = Field(default_factory=ClientConnection)
    enableProfiling: bool = True
    enableContentionProfiling: bool = True
    percentageOfNodesToScore: int | None = None
    podInitialBackoffSeconds: int = 1
    podMaxBackoffSeconds: int = 10
    delayCacheUntilActive: bool = False
    profiles: list[Profile] = Field(default_factory=list)
    extenders: list[Extender] = Field(default_factory=list)


# --- resolved form -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """One profile after defaults and merging: what the framework runs."""

    scheduler_name: str
    points: Mapping[str, tuple[str, ...]]
    score_weights: Mapping[str, int]
    args: Mapping[str, BaseModel]
    percentage_of_nodes_to_score: int | None
    # the plugins used that decide nothing here, and why (from the registry)
    not_implemented: Mapping[str, str] = field(default_factory=dict)

    def plugins_at(self, point: str) -> tuple[str, ...]:
        return self.points.get(point, ())

    def enabled(self, plugin: str, point: str | None = None) -> bool:
        if point is not None:
            return plugin in self.points.get(point, ())
        return any(plugin in p for p in self.points.values())

    def args_of(self, plugin: str) -> BaseModel:
        return self.args[plugin]

    def to_json(self) -> dict[str, Any]:
        plugins: dict[str, Any] = {}
        for point in reg.EXTENSION_POINTS:
            names_ = self.points.get(point, ())
            if not names_:
                continue
            if point == reg.SCORE:
                plugins[point] = [{"name": n, "weight": self.score_weights[n]} for n in names_]
            else:
                plugins[point] = list(names_)
        used = sorted({n for p in self.points.values() for n in p})
        out: dict[str, Any] = {
            "schedulerName": self.scheduler_name,
            "plugins": plugins,
            "pluginConfig": [
                {"name": n, "args": self.args[n].model_dump(mode="json", exclude_none=True)}
                for n in used
                if n in self.args
            ],
        }
        if self.percentage_of_nodes_to_score is not None:
            out["percentageOfNodesToScore"] = self.percentage_of_nodes_to_score
        if self.not_implemented:
            out["notImplemented"] = dict(self.not_implemented)
        return out


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    api_version: str
    profiles: tuple[ResolvedProfile, ...]
    percentage_of_nodes_to_score: int | None
    pod_initial_backoff_seconds: float
    pod_max_backoff_seconds: float
    parallelism: int
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    extenders: tuple[Mapping[str, Any], ...] = ()
    # clientConnection: requests per second to the API server (0: no limit), the burst
    # above it, and the kubeconfig to use when the command line names none
    client_qps: float = DEFAULT_CLIENT_QPS
    client_burst: int = DEFAULT_CLIENT_BURST
    kubeconfig: str = ""
    # delayCacheUntilActive: with leader election, fill the caches only once leading
    delay_cache_until_active: bool = False
    # the fields of NO_EFFECT the file sets
    no_effect: tuple[str, ...] = ()

    def profile(self, scheduler_name: str) -> ResolvedProfile | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": KIND,
            "parallelism": self.parallelism,
            "percentageOfNodesToScore": self.percentage_of_nodes_to_score,
            "podInitialBackoffSeconds": self.pod_initial_backoff_seconds,
            "podMaxBackoffSeconds": self.pod_max_backoff_seconds,
            "leaderElection": self.leader_election.to_json(),
            "clientConnection": {
                "kubeconfig": self.kubeconfig,
                "qps": self.client_qps if self.client_qps > 0 else -1,
                "burst": self.client_burst,
            },
            "delayCacheUntilActive": self.delay_cache_until_active,
            "profiles": [p.to_json() for p in self.profiles],
        }
        if self.extenders:
            out["extenders"] = [dict(e) for e in self.extenders]
        if self.no_effect:
            out["notImplemented"] = {f: NO_EFFECT[f] for f in self.no_effect}
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_json(), sort_keys=False)


# --- loading -------------------------------------------------------------------------------


def _pydantic_problems(prefix: str, exc: ValidationError) -> list[str]:
    return [p.show() for p in field_problems(exc, prefix)]


def _find_config_document(doc: Any, source: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise SchedulerConfigError(["the file is not a YAML mapping"], source)
    if doc.get("kind") == "ConfigMap":
        data = doc.get("data") or {}
        if not isinstance(data, Mapping):
            raise SchedulerConfigError(["ConfigMap data is not a mapping"], source)
        found: list[tuple[str, Mapping[str, Any]]] = []
        for key, text in data.items():
            try:
                inner = load_yaml(text, source) if isinstance(text, str) else None
            except yaml.YAMLError:
                continue
            if isinstance(inner, Mapping) and inner.get("kind") == KIND:
                found.append((str(key), inner))
        if not found:
            raise SchedulerConfigError(
                [
                    f"ConfigMap {doc.get('metadata', {}).get('name', '')!r} has no data key "
                    f"holding a {KIND}"
                ],
                source,
            )
        if len(found) > 1:
            keys = ", ".join(k for k, _ in found)
            raise SchedulerConfigError(
                [f"ConfigMap holds several {KIND} documents ({keys}); keep one"], source
            )
        return found[0][1]
    return doc


def load_config_text(
    text: str, source: str = "", registry: reg.Registry | None = None
) -> SchedulerConfig:
    try:
        docs = [d for d in load_yaml_all(text, source) if d is not None]
    except yaml.YAMLError as exc:
        raise SchedulerConfigError([f"not valid YAML: {exc}"], source) from exc
    if not docs:
        raise SchedulerConfigError(["the file is empty"], source)
    candidates = [
        d for d in docs if isinstance(d, Mapping) and d.get("kind") in (KIND, "ConfigMap")
    ]
    if len(candidates) != 1:
        raise SchedulerConfigError(
            [f"expected exactly one {KIND} (or a ConfigMap wrapping one), found {len(candidates)}"],
            source,
        )
    return resolve(_find_config_document(candidates[0], source), source, registry)


def load_config(path: str | Path, registry: reg.Registry | None = None) -> SchedulerConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SchedulerConfigError([f"cannot read {p}: {exc.strerror}"], str(p)) from exc
    return load_config_text(text, str(p), registry)


def default_config(registry: reg.Registry | None = None) -> SchedulerConfig:
    """kube-scheduler's configuration when given none: one default profile."""
    return resolve({"apiVersion": API_VERSIONS[-1], "kind": KIND}, "", registry)


def resolve(
    raw: Mapping[str, Any], source: str = "", registry: reg.Registry | None = None
) -> SchedulerConfig:
    """Default, validate and resolve a KubeSchedulerConfiguration given as a mapping,
    against `registry` (the plugins a profile may name; the in-tree registry if None)."""
    api_version = raw.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise SchedulerConfigError(
            [f"apiVersion {api_version!r} is not supported; accepted: {', '.join(API_VERSIONS)}"],
            source,
        )
    try:
        model = KubeSchedulerConfigurationModel.model_validate(dict(raw))
    except ValidationError as exc:
        raise SchedulerConfigError(_pydantic_problems("", exc), source) from exc

    problems = _top_level_problems(model)
    pct = model.percentageOfNodesToScore
    conn = model.clientConnection
    known = in_tree_registry() if registry is None else registry
    resolved = _resolve_profiles(model.profiles or [Profile()], known, problems)
    if problems:
        raise SchedulerConfigError(problems, source)
    return SchedulerConfig(
        api_version=str(api_version),
        profiles=tuple(resolved),
        percentage_of_nodes_to_score=pct,
        pod_initial_backoff_seconds=float(model.podInitialBackoffSeconds),
        pod_max_backoff_seconds=float(model.podMaxBackoffSeconds),
        parallelism=model.parallelism,
        leader_election=model.leaderElection,
        extenders=tuple(e.model_dump() for e in model.extenders),
        client_qps=(0.0 if conn.qps < 0 else conn.qps if conn.qps > 0 else DEFAULT_CLIENT_QPS),
        client_burst=conn.burst or DEFAULT_CLIENT_BURST,
        kubeconfig=conn.kubeconfig,
        delay_cache_until_active=model.delayCacheUntilActive,
        no_effect=_fields_without_effect(model),
    )


def _fields_without_effect(model: KubeSchedulerConfigurationModel) -> tuple[str, ...]:
    """The fields of NO_EFFECT that the file sets, in NO_EFFECT's order."""
    given = {*model.model_fields_set}
    given |= {f"clientConnection.{f}" for f in model.clientConnection.model_fields_set}
    return tuple(f for f in NO_EFFECT if f in given)


def _top_level_problems(model: KubeSchedulerConfigurationModel) -> list[str]:
    """What is wrong with the configuration's own fields (kube-scheduler's validation)."""
    problems: list[str] = []
    if model.parallelism <= 0:
        problems.append(f"parallelism: {model.parallelism} must be greater than 0")
    pct = model.percentageOfNodesToScore
    if pct is not None and not 0 <= pct <= 100:
        problems.append(f"percentageOfNodesToScore: {pct} is not in the valid range [0, 100]")
    if model.podInitialBackoffSeconds <= 0:
        problems.append(
            f"podInitialBackoffSeconds: {model.podInitialBackoffSeconds} must be greater than 0"
        )
    if model.podMaxBackoffSeconds < model.podInitialBackoffSeconds:
        problems.append(
            f"podMaxBackoffSeconds: {model.podMaxBackoffSeconds} must be greater than or equal "
            f"to podInitialBackoffSeconds ({model.podInitialBackoffSeconds})"
        )
    conn = model.clientConnection
    if conn.burst < 0:
        problems.append(f"clientConnection.burst: {conn.burst} must be greater than or equal to 0")
    return problems


def _resolve_profiles(
    profiles: list[Profile], known: reg.Registry, problems: list[str]
) -> list[ResolvedProfile]:
    """Every profile resolved, each scheduler name once; what is wrong into `problems`."""
    resolved: list[ResolvedProfile] = []
    seen: set[str] = set()
    for i, prof in enumerate(profiles):
        label = f"profiles[{i}] ({prof.schedulerName})"
        if not prof.schedulerName:
            problems.append(f"profiles[{i}].schedulerName: required")
            continue
        if prof.schedulerName in seen:
            problems.append(f"{label}.schedulerName: duplicate scheduler name")
            continue
        seen.add(prof.schedulerName)
        r = _resolve_profile(prof, label, known, problems)
        if r is not None:
            resolved.append(r)
    if len(resolved) > 1:
        sorts = {p.plugins_at(reg.QUEUE_SORT) for p in resolved}
        if len(sorts) > 1:
            problems.append("profiles: queueSort must be the same for all profiles")
    return resolved


def _merge_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """kube-scheduler's mergePluginSet: defaults minus disabled (or all, with "*"), a custom
    entry naming a default replaces it in place, other custom entries are appended."""
    disabled = {p.name for p in custom.disabled}
    custom_index = {p.name: i for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled:
        for plugin in default.enabled:
            if plugin.name in disabled:
                continue
            if plugin.name in custom_index:
                idx = custom_index[plugin.name]
                plugin = custom.enabled[idx]
                replaced.add(idx)
            enabled.append(plugin)
    enabled.extend(p for i, p in enumerate(custom.enabled) if i not in replaced)
    return PluginSet(enabled=enabled, disabled=list(custom.disabled))


def _resolve_profile(
    prof: Profile, label: str, known: reg.Registry, problems: list[str]
) -> ResolvedProfile | None:
    defaults = Plugins(
        multiPoint=PluginSet(
            enabled=[PluginRef(name=n, weight=w) for n, w in reg.DEFAULT_MULTI_POINT]
        )
    )
    custom = prof.plugins or Plugins()
    start = len(problems)
    _check_plugin_lists(custom, label, known, problems)
    points: dict[str, tuple[str, ...]] = {}
    weights: dict[str, int] = {}
    if len(problems) == start:
        # the plugin lists are sound: merge them (args are checked in any case, so that
        # every problem of the file is reported at once)
        points, weights = _merge_profile(defaults, custom, label, known, problems)

    used = {n for p in points.values() for n in p}
    args = _plugin_args(prof, used, label, known, problems)
    pct = prof.percentageOfNodesToScore
    if pct is not None and not 0 <= pct <= 100:
        problems.append(f"{label}.percentageOfNodesToScore: {pct} is not in [0, 100]")
    if len(problems) > start:
        return None
    return ResolvedProfile(
        scheduler_name=prof.schedulerName,
        points=points,
        score_weights=weights,
        args=args,
        percentage_of_nodes_to_score=pct,
        not_implemented={
            n: known[n].not_implemented for n in sorted(used) if known[n].not_implemented
        },
    )


def _check_plugin_lists(
    custom: Plugins, label: str, known: reg.Registry, problems: list[str]
) -> None:
    """Every plugin a profile enables or disables is known, extends the point it is listed
    at, and has a weight of 0 or more; what is not goes into `problems`."""
    for point in (*reg.EXTENSION_POINTS, reg.MULTI_POINT):
        pset = custom.point(point)
        for kind, refs in (("enabled", pset.enabled), ("disabled", pset.disabled)):
            for ref in refs:
                if ref.name == "*" and kind == "disabled":
                    continue
                if ref.name not in known:
                    problems.append(
                        f"{label}.plugins.{point}.{kind}: unknown plugin {ref.name!r} "
                        f"(known: {', '.join(sorted(known))})"
                    )
                elif (
                    point != reg.MULTI_POINT
                    and kind == "enabled"
                    and point not in known[ref.name].points
                ):
                    implemented = ", ".join(sorted(known[ref.name].points))
                    problems.append(
                        f"{label}.plugins.{point}.enabled: plugin {ref.name!r} does not extend "
                        f"{point} (it implements: {implemented})"
                    )
                if ref.weight is not None and ref.weight < 0:
                    problems.append(
                        f"{label}.plugins.{point}.{kind}[{ref.name}].weight: {ref.weight} must "
                        "be a positive integer (0 means the default, 1)"
                    )


def _plugin_args(
    prof: Profile, used: set[str], label: str, known: reg.Registry, problems: list[str]
) -> dict[str, BaseModel]:
    """The args of every plugin the profile uses or configures, defaulted and validated;
    what is wrong goes into `problems`."""
    configs: dict[str, dict[str, Any]] = {}
    for entry in prof.pluginConfig:
        where = f"{label}.pluginConfig[{entry.name}]"
        if entry.name not in known:
            known_list = ", ".join(sorted(known))
            problems.append(f"{where}: unknown plugin {entry.name!r} (known: {known_list})")
            continue
        if entry.name in configs:
            problems.append(f"{where}: repeated config for plugin {entry.name!r}")
            continue
        configs[entry.name] = dict(entry.args or {})
    args: dict[str, BaseModel] = {}
    for name in sorted(used | set(configs)):
        model_cls = known[name].args or OpaqueArgs
        where = f"{label}.pluginConfig[{name}].args"
        try:
            model = model_cls.model_validate(configs.get(name, {}))
            default_args(model)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(where, exc))
            continue
        except ValueError as exc:
            problems.append(f"{where}.{exc}")
            continue
        args[name] = model
    return args


def _merge_profile(
    defaults: Plugins, custom: Plugins, label: str, known: reg.Registry, problems: list[str]
) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """kube-scheduler's merge of default and configured plugin sets, multiPoint expansion
    included: the ordered plugins of each extension point and the score weights."""
    merged = {
        point: _merge_set(defaults.point(point), custom.point(point))
        for point in (*reg.EXTENSION_POINTS, reg.MULTI_POINT)
    }
    points: dict[str, tuple[str, ...]] = {}
    multi = merged[reg.MULTI_POINT]
    for point in reg.EXTENSION_POINTS:
        pset = merged[point]
        specific = [p.name for p in pset.enabled]
        if len(set(specific)) != len(specific):
            dup = next(n for n in specific if specific.count(n) > 1)
            problems.append(f"{label}.plugins.{point}: plugin {dup!r} is enabled twice")
            continue
        disabled = {p.name for p in pset.disabled}
        if "*" in disabled:
            points[point] = tuple(specific)
            continue
        override: list[str] = []
        from_multi: list[str] = []
        for ref in multi.enabled:
            if point not in known[ref.name].points or ref.name in disabled:
                continue
            if ref.name in specific:
                override.append(ref.name)
                continue
            if ref.name in from_multi:
                problems.append(
                    f"{label}.plugins.multiPoint: plugin {ref.name!r} already registered as {point}"
                )
                continue
            from_multi.append(ref.name)
        ordered = [n for n in specific if n in override]
        ordered += from_multi
        ordered += [n for n in specific if n not in override]
        points[point] = tuple(ordered)

    weights: dict[str, int] = {}
    for ref in [*merged[reg.SCORE].enabled, *multi.enabled]:
        if ref.name not in points.get(reg.SCORE, ()) or ref.name in weights:
            continue
        weights[ref.name] = ref.weight or 1
    total = sum(weights.values()) * reg.MAX_NODE_SCORE
    if total > reg.MAX_TOTAL_WEIGHT:
        problems.append(f"{label}.plugins.score: total score of Score plugins could overflow")

    if len(points.get(reg.QUEUE_SORT, ())) != 1:
        problems.append(
            f"{label}.plugins.queueSort: exactly one queueSort plugin is required, got "
            f"{list(points.get(reg.QUEUE_SORT, ()))}"
        )
    if not points.get(reg.BIND):
        problems.append(f"{label}.plugins.bind: at least one bind plugin is required")
    return points, weights
