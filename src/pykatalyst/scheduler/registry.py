"""Which plugins exist, which extension points each one implements, and kube's defaults.

The config loader resolves profiles against this table, so a typo in a plugin name or a
plugin enabled at a point it does not implement is refused before anything runs.
"""

from __future__ import annotations

from typing import Final

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

_F = frozenset
# plugin -> extension points it implements (Unreserve comes with Reserve).
PLUGIN_POINTS: Final[dict[str, frozenset[str]]] = {
    SCHEDULING_GATES: _F({PRE_ENQUEUE}),
    PRIORITY_SORT: _F({QUEUE_SORT}),
    NODE_UNSCHEDULABLE: _F({FILTER}),
    NODE_NAME: _F({FILTER}),
    TAINT_TOLERATION: _F({FILTER, PRE_SCORE, SCORE}),
    NODE_AFFINITY: _F({PRE_FILTER, FILTER, PRE_SCORE, SCORE}),
    NODE_PORTS: _F({PRE_FILTER, FILTER}),
    NODE_RESOURCES_FIT: _F({PRE_FILTER, FILTER, PRE_SCORE, SCORE}),
    VOLUME_RESTRICTIONS: _F({PRE_FILTER, FILTER}),
    EBS_LIMITS: _F({FILTER}),
    GCE_PD_LIMITS: _F({FILTER}),
    NODE_VOLUME_LIMITS: _F({FILTER}),
    AZURE_DISK_LIMITS: _F({FILTER}),
    VOLUME_BINDING: _F({PRE_FILTER, FILTER, RESERVE, PRE_BIND}),
    VOLUME_ZONE: _F({PRE_FILTER, FILTER}),
    POD_TOPOLOGY_SPREAD: _F({PRE_FILTER, FILTER, PRE_SCORE, SCORE}),
    INTER_POD_AFFINITY: _F({PRE_FILTER, FILTER, PRE_SCORE, SCORE}),
    DEFAULT_PREEMPTION: _F({POST_FILTER}),
    NODE_RESOURCES_BALANCED_ALLOCATION: _F({PRE_SCORE, SCORE}),
    IMAGE_LOCALITY: _F({SCORE}),
    DEFAULT_BINDER: _F({BIND}),
    QOS_FIT: _F({PRE_FILTER, FILTER, SCORE, RESERVE}),
    QOS_BALANCED: _F({SCORE}),
    NODE_RESOURCE_TOPOLOGY: _F({FILTER, SCORE, RESERVE}),
    NODE_OVERCOMMITMENT: _F({PRE_FILTER, FILTER, RESERVE}),
}

# Plugins a configuration may name but that decide nothing here, with the reason; they are
# listed by `--print-config` so nobody mistakes them for working ones.
NOT_IMPLEMENTED: Final[dict[str, str]] = {
    NODE_PORTS: "host ports are not tracked",
    VOLUME_RESTRICTIONS: "volumes are not modelled",
    EBS_LIMITS: "volumes are not modelled",
    GCE_PD_LIMITS: "volumes are not modelled",
    NODE_VOLUME_LIMITS: "volumes are not modelled",
    AZURE_DISK_LIMITS: "volumes are not modelled",
    VOLUME_BINDING: "volumes are not modelled",
    VOLUME_ZONE: "volumes are not modelled",
    DEFAULT_PREEMPTION: "no preemption: unschedulable pods wait",
    IMAGE_LOCALITY: "image sizes are not tracked (score 0 everywhere)",
    NODE_OVERCOMMITMENT: "node overcommit ratios are enforced by the webhook, not here",
}

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
