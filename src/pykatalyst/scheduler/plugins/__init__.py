"""Scheduler plugins: each hook judges every node at once.

Importing this package registers every plugin (`registry.register` on each class).
"""

from pykatalyst.scheduler.plugins import (
    gpu,
    interpod,
    nic,
    resources,
    sriov,
    standard,
    topology,
    upstream,
)

__all__ = ["gpu", "interpod", "nic", "resources", "sriov", "standard", "topology", "upstream"]
