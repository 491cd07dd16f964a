"""Optional dependencies, installed as extras: `pykatalyst[kube]` (the Kubernetes client, for
every command run against a real cluster), `pykatalyst[sim]` (matplotlib, for the
simulator's charts), `pykatalyst[node]` (grpcio and protobuf, for the kubelet's pod-resources
API), `pykatalyst[autoscale]` (croniter and statsmodels, for IHPA crons and the built-in
predictor), `pykatalyst[sweep]` (Ray, for the simulator's what-if sweeps) and
`pykatalyst[dev]` (all of them, and the test tools). A node agent's image needs `[kube]`, and
`[node]` beside a kubelet with the static cpu manager."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def require(module: str, extra: str, needed_for: str) -> ModuleType:
    """Import `module`, or raise MissingExtra saying which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(
            f"{needed_for} needs the {module!r} package, which is not installed: "
            f"pip install 'pykatalyst[{extra}]'"
        ) from exc
