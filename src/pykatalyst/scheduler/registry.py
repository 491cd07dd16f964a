"""The vocabulary of plugin registries: extension points, plugin names, kube's defaults,
and the entry (`PluginSpec`) a registry maps each plugin name to.

A registry is a plain map, name → `PluginSpec`, built by a function (the scheduler's own is
`scheduler.intree.in_tree_registry`, as kube-scheduler's `NewInTreeRegistry`) and handed
to the configuration loader and to the framework; nothing registers itself on import. An
entry for a plugin class is made with `plugin(name, cls, args)`: the extension points it
extends are the hooks the class defines. Plugins that no class runs are `declared` with
their points. The config loader resolves profiles against the registry, so a typo in a
plugin name or a plugin enabled at a point it does not implement is refused before
anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from pydantic import BaseModel

from pykatalyst.api import names

# Extension points, in the order a scheduling cycle visits them.
PRE_ENQUEUE: Final = "preEnqueue"
QUEUE_SORT: Final = "queueSort"
PRE_FILTER: Final = "preFilter"
FILTER: Final = "filter"
POST_FILTER: Final = "postFilter"
PRE_SCORE: Final = "preScore"
SCORE: Final = "score"
RESERVE: Final = "reserve"
PERMIT: Final = "permit"
PRE_BIND: Final = "preBind"
BIND: Final = "bind"
POST_BIND: Final = "postBind"
MULTI_POINT: Final = "multiPoint"

EXTENSION_POINTS: Final = (
    PRE_ENQUEUE,
    QUEUE_SORT,
    PRE_FILTER,
    FILTER,
    POST_FILTER,
    PRE_SCORE,
    SCORE,
    RESERVE,
    PERMIT,
    PRE_BIND,
    BIND,
    POST_BIND,
)

# Upstream plugin names (kube-scheduler's in-tree registry).
SCHEDULING_GATES: Final = "SchedulingGates"
PRIORITY_SORT: Final = "PrioritySort"
NODE_UNSCHEDULABLE: Final = "NodeUnschedulable"
NODE_NAME: Final = "NodeName"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_AFFINITY: Final = "NodeAffinity"
NODE_PORTS: Final = "NodePorts"
NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
VOLUME_RESTRICTIONS: Final = "VolumeRestrictions"
EBS_LIMITS: Final = "EBSLimits"
GCE_PD_LIMITS: Final = "GCEPDLimits"
NODE_VOLUME_LIMITS: Final = "NodeVolumeLimits"
AZURE_DISK_LIMITS: Final = "AzureDiskLimits"
VOLUME_BINDING: Final = "VolumeBinding"
VOLUME_ZONE: Final = "VolumeZone"
POD_TOPOLOGY_SPREAD: Final = "PodTopologySpread"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
DEFAULT_PREEMPTION: Final = "DefaultPreemption"
NODE_RESOURCES_BALANCED_ALLOCATION: Final = "NodeResourcesBalancedAllocation"
IMAGE_LOCALITY: Final = "ImageLocality"
DEFAULT_BINDER: Final = "DefaultBinder"

QOS_FIT: Final = names.PLUGIN_QOS_AWARE_NODE_RESOURCES_FIT
QOS_BALANCED: Final = names.PLUGIN_QOS_AWARE_NODE_RESOURCES_BALANCED_ALLOCATION
NODE_RESOURCE_TOPOLOGY: Final = names.PLUGIN_NODE_RESOURCE_TOPOLOGY
NODE_OVERCOMMITMENT: Final = names.PLUGIN_NODE_OVERCOMMITMENT

DEFAULT_SCHEDULER_PROFILE: Final = "default-scheduler"

# The hook a plugin class defines for each extension point (Unreserve comes with Reserve).
HOOK_POINTS: Final[dict[str, str]] = {
    "pre_enqueue": PRE_ENQUEUE,
    "less": QUEUE_SORT,
    "pre_filter": PRE_FILTER,
    "filter": FILTER,
    "post_filter": POST_FILTER,
    "pre_score": PRE_SCORE,
    "score": SCORE,
    "reserve": RESERVE,
    "permit": PERMIT,
    "pre_bind": PRE_BIND,
    "bind": BIND,
    "post_bind": POST_BIND,
}


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin a configuration may name: the extension points it extends, the model
    of its args, and the class that runs it (None when nothing runs here: `not_implemented`
    says why, or the scheduler itself does that plugin's work)."""

    name: str
    points: frozenset[str]
    args: type[BaseModel] | None = None
    cls: type | None = None
    not_implemented: str = ""


Registry: TypeAlias = Mapping[str, PluginSpec]


def hook_points(cls: type) -> frozenset[str]:
    """The extension points a plugin class extends: those whose hook it (or a parent
    below the framework's base) defines; the base's do-nothing hooks do not count."""
    points = set()
    for hook, point in HOOK_POINTS.items():
        fn = getattr(cls, hook, None)
        if fn is not None and not getattr(fn, "default_hook", False):
            points.add(point)
    return frozenset(points)


def _checked(spec: PluginSpec) -> PluginSpec:
    if not spec.points:
        raise ValueError(f"scheduler plugin {spec.name!r} extends no extension point")
    return spec


def plugin(name: str, cls: type, args: type[BaseModel] | None = None) -> PluginSpec:
    """The entry of the plugin class `cls` (whose `name` must be `name`), extending the
    points whose hooks it defines, its args validated by `args`."""
    if getattr(cls, "name", None) != name:
        raise ValueError(
            f"scheduler plugin {name!r}: class {cls.__name__} is named "
            f"{getattr(cls, 'name', None)!r}"
        )
    return _checked(PluginSpec(name, hook_points(cls), args, cls))


def declared(
    name: str,
    points: frozenset[str],
    *,
    args: type[BaseModel] | None = None,
    not_implemented: str = "",
) -> PluginSpec:
    """A plugin a configuration may name but no plugin class runs: the scheduler does its
    work itself, or (`not_implemented`) it decides nothing here."""
    return _checked(PluginSpec(name, points, args, None, not_implemented))


# kube-scheduler's default plugins (v1beta3 and v1 both express them as multiPoint), with
# the score weights it gives them.
DEFAULT_MULTI_POINT: Final[tuple[tuple[str, int | None], ...]] = (
    (SCHEDULING_GATES, None),
    (PRIORITY_SORT, None),
    (NODE_UNSCHEDULABLE, None),
    (NODE_NAME, None),
    (TAINT_TOLERATION, 3),
    (NODE_AFFINITY, 2),
    (NODE_PORTS, None),
    (NODE_RESOURCES_FIT, 1),
    (VOLUME_RESTRICTIONS, None),
    (EBS_LIMITS, None),
    (GCE_PD_LIMITS, None),
    (NODE_VOLUME_LIMITS, None),
    (AZURE_DISK_LIMITS, None),
    (VOLUME_BINDING, None),
    (VOLUME_ZONE, None),
    (POD_TOPOLOGY_SPREAD, 2),
    (INTER_POD_AFFINITY, 2),
    (DEFAULT_PREEMPTION, None),
    (NODE_RESOURCES_BALANCED_ALLOCATION, 1),
    (IMAGE_LOCALITY, 1),
    (DEFAULT_BINDER, None),
)

MAX_NODE_SCORE: Final = 100
MAX_CUSTOM_PRIORITY_SCORE: Final = 10
MAX_EXTENDER_PRIORITY: Final = 10
# kube refuses weights whose sum could overflow an int64 total; a smaller bound keeps the
# numpy totals far from overflow and is still far beyond any sane configuration.
MAX_TOTAL_WEIGHT: Final = 1 << 40
