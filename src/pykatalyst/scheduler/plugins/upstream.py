"""kube-scheduler's in-tree plugins that no plugin class runs here.

`SchedulingGates`, `PrioritySort` and `DefaultBinder` are the scheduler's own work (the
queue holds gated pods back and orders by priority; the scheduler binds through
`pods/binding`). The rest may be named by a configuration but decide nothing here; the
reason is shown by `--print-config` so nobody mistakes them for working ones.
"""

from __future__ import annotations

from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import DefaultPreemptionArgs, VolumeBindingArgs

_F = frozenset
_VOLUMES = "volumes are not modelled"
_OVERCOMMIT = (
    "this scheduler applies no overcommit ratio: pods are placed against the Node's "
    "allocatable as it is published"
)


def upstream_plugins() -> dict[str, reg.PluginSpec]:
    """The plugins a configuration may name that no plugin class runs, by name."""
    specs = [
        reg.declared(reg.SCHEDULING_GATES, _F({reg.PRE_ENQUEUE})),
        reg.declared(reg.PRIORITY_SORT, _F({reg.QUEUE_SORT})),
        reg.declared(reg.DEFAULT_BINDER, _F({reg.BIND})),
        reg.declared(
            reg.NODE_PORTS,
            _F({reg.PRE_FILTER, reg.FILTER}),
            not_implemented="host ports are not tracked",
        ),
        reg.declared(
            reg.VOLUME_RESTRICTIONS, _F({reg.PRE_FILTER, reg.FILTER}), not_implemented=_VOLUMES
        ),
        *(
            reg.declared(name, _F({reg.FILTER}), not_implemented=_VOLUMES)
            for name in (
                reg.EBS_LIMITS,
                reg.GCE_PD_LIMITS,
                reg.NODE_VOLUME_LIMITS,
                reg.AZURE_DISK_LIMITS,
            )
        ),
        reg.declared(
            reg.VOLUME_BINDING,
            _F({reg.PRE_FILTER, reg.FILTER, reg.RESERVE, reg.PRE_BIND}),
            args=VolumeBindingArgs,
            not_implemented=_VOLUMES,
        ),
        reg.declared(reg.VOLUME_ZONE, _F({reg.PRE_FILTER, reg.FILTER}), not_implemented=_VOLUMES),
        reg.declared(
            reg.DEFAULT_PREEMPTION,
            _F({reg.POST_FILTER}),
            args=DefaultPreemptionArgs,
            not_implemented="no preemption: unschedulable pods wait",
        ),
        reg.declared(
            reg.IMAGE_LOCALITY,
            _F({reg.SCORE}),
            not_implemented="image sizes are not tracked (score 0 everywhere)",
        ),
        reg.declared(
            reg.NODE_OVERCOMMITMENT,
            _F({reg.PRE_FILTER, reg.FILTER, reg.RESERVE}),
            not_implemented=_OVERCOMMIT,
        ),
    ]
    return {spec.name: spec for spec in specs}
