"""Which fields of Katalyst's config objects pykatalyst acts on, and what a bad one is.

Every field a user sets in an AdminQoSConfiguration (or a KatalystCustomConfig,
CustomNodeConfig, NodeOvercommitConfig, KatalystVerticalPodAutoscaler,
ServiceProfileDescriptor) is one of three things:

- it takes effect: `TAKES_EFFECT` names the pykatalyst setting it sets;
- it is Katalyst's but pykatalyst does not implement it: stored and listed, never fatal;
- it is in no Katalyst schema: the API server drops it (a typo, usually).

`field_uses` walks an object along its CRD schema (`crdgen`) and says which is which;
`config_problems` validates it with the CRD model and names each bad field with what is
accepted. The agent (log line + Event) and `katalyst validate` both use them.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from pykatalyst.api import crdgen, crds, names, support
from pykatalyst.api.problems import NO_VALUE, field_problems

AQC = names.ADMIN_QOS_CONFIGURATION.kind
_RRC = "spec.config.reclaimedResourceConfig."
_MEM = "spec.config.evictionConfig.memoryPressureEvictionConfig."
_CPU = "spec.config.evictionConfig.cpuPressureEvictionConfig."
_REV = "spec.config.evictionConfig.reclaimedResourcesEvictionConfig."
_PROV = "spec.config.advisorConfig.cpuAdvisorConfig.cpuProvisionConfig."
_KCC = "controller (kcc): the nodes whose CustomNodeConfig targets it"

# Katalyst field path -> the agent setting it sets (agent/config.py, agent/eviction/config.py).
TAKES_EFFECT: dict[str, dict[str, str]] = {
    AQC: {
        _RRC + "enableReclaim": "advisor.enable_reclaim",
        _RRC + "reservedResourceForAllocate.cpu": "advisor.reserved_for_allocate_cpu",
        _RRC + "reservedResourceForAllocate.memory": "advisor.reserved_for_allocate_memory",
        _RRC + "minReclaimedResourceForAllocate.cpu": "advisor.min_reclaimed_for_allocate_cpu",
        _RRC + "reservedResourceForReport.cpu": "reporter.reserved_for_report_cpu",
        _RRC + "reservedResourceForReport.memory": "reporter.reserved_for_report_memory",
        _RRC + "minReclaimedResourceForReport.cpu": "reporter.min_reclaimed_for_report_cpu",
        _RRC + "minReclaimedResourceForReport.memory": "reporter.min_reclaimed_for_report_memory",
        _RRC + "minIgnoredReclaimedResourceForReport.cpu": "reporter.min_ignored_reclaimed_cpu",
        _RRC + "minIgnoredReclaimedResourceForReport.memory": (
            "reporter.min_ignored_reclaimed_memory"
        ),
        "spec.config.advisorConfig.cpuAdvisorConfig.allowSharedCoresOverlapReclaimedCores": (
            "cpu.overlap_reclaim_with_share"
        ),
        _PROV + "regionIndicators[].regionType": "advisor.rama.indicator_targets",
        _PROV + "regionIndicators[].targets[].name": "advisor.rama.indicator_targets",
        _PROV + "regionIndicators[].targets[].target": "advisor.rama.indicator_targets",
        "spec.config.evictionConfig.dryRun": "eviction.dry_run",
        _REV + "evictionThreshold.*": "eviction.reclaimed_resource.eviction_threshold",
        _REV + "softEvictionThreshold.*": "eviction.reclaimed_resource.soft_eviction_threshold",
        _REV + "gracePeriod": "eviction.reclaimed_resource.deletion_grace_s",
        _REV + "thresholdMetToleranceDuration": "eviction.reclaimed_resource.grace_period_s",
        _MEM + "enableSystemLevelEviction": "eviction.system_memory.enabled",
        _MEM + "systemFreeMemoryThresholdMinimum": "eviction.system_memory.free_threshold_minimum",
        _MEM + "systemKswapdRateThreshold": "eviction.system_memory.kswapd_rate_threshold",
        _MEM + "systemKswapdRateExceedDurationThreshold": (
            "eviction.system_memory.kswapd_rate_exceed_duration_s"
        ),
        _MEM + "enableNumaLevelEviction": "eviction.numa_memory.enabled",
        _MEM + "numaFreeBelowWatermarkTimesThreshold": "eviction.numa_memory.any_times_threshold",
        _MEM + "numaFreeBelowWatermarkTimesReclaimedThreshold": (
            "eviction.numa_memory.reclaimed_times_threshold"
        ),
        _MEM + "numaVictimMinimumUtilizationThreshold": (
            "eviction.numa_memory.victim_minimum_utilization"
        ),
        _MEM + "gracePeriod": "eviction.system_memory/numa_memory.deletion_grace_s",
        _CPU + "enableLoadEviction": "eviction.load.enabled",
        _CPU + "loadUpperBoundRatio": "eviction.load.hard_ratio",
        _CPU + "loadLowerBoundRatio": "eviction.load.soft_ratio",
        _CPU + "loadThresholdMetPercentage": "eviction.load.met_percentage",
        _CPU + "loadMetricRingSize": "eviction.load.ring_size",
        _CPU + "loadEvictionCoolDownTime": "eviction.load.cool_down_s",
        _CPU + "gracePeriod": "eviction.load.deletion_grace_s",
        # which nodes get the config: the kcc controller resolves them into CNC targets
        **dict.fromkeys(
            (
                "spec.nodeLabelSelector",
                "spec.priority",
                "spec.ephemeralSelector.nodeNames",
                "spec.ephemeralSelector.lastDuration",
                "spec.paused",
                "spec.updateStrategy.rollingUpdate.canary",
            ),
            _KCC,
        ),
    },
    names.CUSTOM_NODE_CONFIG.kind: {
        "status.katalystCustomConfigList[].configType.group": "the agent's config target",
        "status.katalystCustomConfigList[].configType.version": "the agent's config target",
        "status.katalystCustomConfigList[].configType.resource": "the agent's config target",
        "status.katalystCustomConfigList[].configName": "the agent's config target",
        "status.katalystCustomConfigList[].configNamespace": "the agent's config target",
    },
}

# Why a field of a kind that is acted on has no effect (kinds nothing acts on are explained
# by their entry in `support.FEATURES`).
FIELD_NOTES: dict[str, str] = {
    AQC: "pykatalyst does not implement this field; it is stored and ignored",
    names.CUSTOM_NODE_CONFIG.kind: "written by the controller; the agent reads only its "
    "status' config targets",
}

MODELS: dict[str, type[BaseModel]] = {
    AQC: crds.AdminQoSConfiguration,
    names.KATALYST_CUSTOM_CONFIG.kind: crds.KatalystCustomConfig,
    names.CUSTOM_NODE_CONFIG.kind: crds.CustomNodeConfig,
    names.NODE_OVERCOMMIT_CONFIG.kind: crds.NodeOvercommitConfig,
    names.KATALYST_VERTICAL_POD_AUTOSCALER.kind: crds.KatalystVerticalPodAutoscaler,
    names.SERVICE_PROFILE_DESCRIPTOR.kind: crds.ServiceProfileDescriptor,
}
CONFIG_KINDS = tuple(MODELS)


@dataclass(frozen=True, slots=True)
class FieldUse:
    """One field an object sets, and what pykatalyst does with it."""

    path: str
    value: Any
    effect: str  # the setting it sets; "" when it has none
    note: str  # why not, when it has none
    known: bool  # in Katalyst's schema

    @property
    def takes_effect(self) -> bool:
        return bool(self.effect)

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.path,
            "value": self.value,
            "takesEffect": self.takes_effect,
            "sets": self.effect or None,
            "note": self.note or None,
            "inKatalystSchema": self.known,
        }


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """A value the model refuses: the field, the value and what is accepted."""

    field: str
    value: Any
    accepted: str

    def __str__(self) -> str:
        return f"{self.field}: {self.value!r} is invalid: {self.accepted}"


@cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for spec in crdgen.kind_specs():
        for version in spec.versions:
            out[(spec.kind, version)] = crdgen.crd(spec)["spec"]["versions"][
                spec.versions.index(version)
            ]["schema"]["openAPIV3Schema"]
    return out


def _schema_for(kind: str, api_version: str) -> dict[str, Any]:
    version = api_version.rpartition("/")[2]
    schemas = _schemas()
    if (kind, version) in schemas:
        return schemas[(kind, version)]
    return next(s for (k, _), s in schemas.items() if k == kind)


def _leaves(value: Any, schema: dict[str, Any] | None, path: str) -> list[tuple[str, Any, bool]]:
    """(path, value, in the schema) of every field `value` sets."""
    if schema is None:
        return [(path, value, False)]
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if isinstance(value, dict) and (props or isinstance(extra, dict)):
        out: list[tuple[str, Any, bool]] = []
        for key, item in value.items():
            child = (props or {}).get(key)
            if child is None and isinstance(extra, dict):
                child = extra
            out += _leaves(item, child, f"{path}.{key}")
        return out
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict) and "properties" in items:
        return [leaf for item in value for leaf in _leaves(item, items, f"{path}[]")]
    return [(path, value, True)]


def _effect(kind: str, path: str) -> str:
    if kind not in TAKES_EFFECT:
        feature = support.for_kind(kind)
        return feature.by if feature is not None and feature.acted_on else ""
    table = TAKES_EFFECT[kind]
    if path in table:  # list paths ("a[].b") are no glob: "[" would open a class
        return table[path]
    for pattern, effect in table.items():
        if fnmatch.fnmatchcase(path, pattern):
            return effect
    return ""


def _note(kind: str, path: str, known: bool) -> str:
    if not known:
        return "not a field of Katalyst's schema: the API server drops it"
    feature = support.for_kind(kind)
    if feature is not None and not feature.acted_on:
        return feature.why_not()
    return FIELD_NOTES.get(kind, "pykatalyst does not implement this field")


def field_uses(obj: dict[str, Any]) -> list[FieldUse]:
    """Every field of a config object's spec (and a CustomNodeConfig's status)."""
    kind = str(obj.get("kind", ""))
    schema = _schema_for(kind, str(obj.get("apiVersion", "")))
    parts = ["spec", "status"] if kind == names.CUSTOM_NODE_CONFIG.kind else ["spec"]
    seen: dict[str, FieldUse] = {}
    for part in parts:
        if part not in obj:
            continue
        for path, value, known in _leaves(obj[part], schema["properties"].get(part), part):
            effect = _effect(kind, path) if known else ""
            note = "" if effect else _note(kind, path, known)
            seen.setdefault(path, FieldUse(path, value, effect, note, known))
    return list(seen.values())


def not_taking_effect(obj: dict[str, Any]) -> list[FieldUse]:
    return [use for use in field_uses(obj) if not use.takes_effect]


def problems_of(exc: ValidationError) -> list[ConfigProblem]:
    return [
        ConfigProblem(p.path, None if p.value is NO_VALUE else p.value, p.message)
        for p in field_problems(exc)
    ]


def config_problems(obj: dict[str, Any]) -> list[ConfigProblem]:
    """What the CRD model refuses in `obj` (nothing: it is valid)."""
    model = MODELS.get(str(obj.get("kind", "")))
    if model is None:
        return []
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        return problems_of(exc)
    return []
