"""The DeviceClass of each kind of device the agent publishes: what a ResourceClaim names
in `deviceClassName` to ask for a GPU, a NIC or an RDMA VF of this driver. Cluster-scoped
objects an administrator installs (the Helm chart with `dra.enabled`, or
`deploy/dra/deviceclasses.yaml`); the agent never writes them."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.dra.slices import TYPE_GPU, TYPE_NIC, TYPE_VF
from pykatalyst.api import names

CLASSES = (
    (names.DRA_CLASS_GPU, TYPE_GPU),
    (names.DRA_CLASS_NIC, TYPE_NIC),
    (names.DRA_CLASS_RDMA_VF, TYPE_VF),
)


def selector(device_type: str, driver: str = names.DRA_DRIVER) -> str:
    """The CEL expression choosing the driver's devices of one type."""
    return f'device.driver == "{driver}" && device.attributes["{driver}"].type == "{device_type}"'


def device_classes(driver: str = names.DRA_DRIVER) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": f"{names.DRA_GROUP}/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": selector(t, driver)}}]},
        }
        for name, t in CLASSES
    ]
