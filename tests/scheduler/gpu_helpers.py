"""Builders for GPU scheduling tests: CNR GPU zones as Katalyst reports them, GPU pods
and profiles with GPUShare."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pykatalyst.api import names
from pykatalyst.scheduler.config import load_config_text

# one card: (id, numa, units, used units by consumer, healthy, model)
Card = tuple[str, int, int]


def gpu_zones(
    cards_per_numa: Sequence[int],
    *,
    numa_per_socket: int = 2,
    units: int = 100,
    prefix: str = "GPU",
    model: str = "A100",
    unhealthy: Sequence[str] = (),
    allocations: dict[str, list[tuple[str, int]]] | None = None,
    cpu_per_numa: str = "16",
    memory_per_numa: str = "32Gi",
) -> list[dict[str, Any]]:
    """Socket -> Numa -> GPU zones; card ids `<prefix>-<i>` numbered across NUMA nodes;
    `allocations[card id] = [(consumer, gpu_memory units)]`."""
    sockets: dict[int, list[dict[str, Any]]] = {}
    card = 0
    for numa, count in enumerate(cards_per_numa):
        socket = numa // numa_per_socket
        children = []
        for _ in range(count):
            cid = f"{prefix}-{card}"
            card += 1
            gpus = "0" if cid in unhealthy else "1"
            zone: dict[str, Any] = {
                "type": names.ZONE_GPU,
                "name": cid,
                "resources": {
                    "allocatable": {
                        names.RESOURCE_NVIDIA_GPU: gpus,
                        names.RESOURCE_GPU_MEMORY: str(units),
                    },
                    "capacity": {
                        names.RESOURCE_NVIDIA_GPU: "1",
                        names.RESOURCE_GPU_MEMORY: str(units),
                    },
                },
                "attributes": [
                    {"name": names.GPU_ATTR_NUMA, "value": str(numa)},
                    {"name": names.GPU_ATTR_SOCKET, "value": str(socket)},
                    {"name": names.GPU_ATTR_PCIE_SWITCH, "value": f"sw{numa}"},
                    {"name": names.GPU_ATTR_MODEL, "value": model},
                ],
            }
            allocs = (allocations or {}).get(cid)
            if allocs:
                zone["allocations"] = [
                    {"consumer": c, "requests": {names.RESOURCE_GPU_MEMORY: str(u)}}
                    for c, u in allocs
                ]
            children.append(zone)
        sockets.setdefault(socket, []).append(
            {
                "type": names.ZONE_NUMA,
                "name": str(numa),
                "resources": {
                    "allocatable": {"cpu": cpu_per_numa, "memory": memory_per_numa},
                    "capacity": {"cpu": cpu_per_numa, "memory": memory_per_numa},
                },
                "children": children,
            }
        )
    return [
        {"type": names.ZONE_SOCKET, "name": str(s), "children": numas}
        for s, numas in sorted(sockets.items())
    ]


def gpu_requests(
    cards: int | str, memory: int | str | None = None, cpu: str = "1"
) -> dict[str, str]:
    out = {"cpu": cpu, "memory": "1Gi", names.RESOURCE_NVIDIA_GPU: str(cards)}
    if memory is not None:
        out[names.RESOURCE_GPU_MEMORY] = str(memory)
    return out


def gpu_profile_yaml(policies: Sequence[str], extra_args: str = "") -> str:
    """One profile per policy, named `gpu-<policy>`, with GPUShare on every point."""
    profiles = []
    for p in policies:
        profiles.append(
            f"""- schedulerName: gpu-{p}
  plugins:
    multiPoint:
      enabled:
      - name: GPUShare
  pluginConfig:
  - name: GPUShare
    args:
      policy: {p}
{extra_args}"""
        )
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n" + "\n".join(profiles) + "\n"
    )


def gpu_config(policies: Sequence[str], extra_args: str = "") -> Any:
    return load_config_text(gpu_profile_yaml(policies, extra_args))
