"""pykatalyst.controllers: cluster-wide reconcilers (`reconcile(now) -> Plan`)."""

from pykatalyst.controllers.backstop import (
    BACKSTOP_TAINT,
    BackstopConfig,
    BackstopController,
    BackstopPlan,
    backstop_record,
    decide,
    last_heartbeat,
)

__all__ = [
    "BACKSTOP_TAINT",
    "BackstopConfig",
    "BackstopController",
    "BackstopPlan",
    "backstop_record",
    "decide",
    "last_heartbeat",
]
