"""The request-header (front proxy) settings kube-apiserver publishes for aggregated API
servers in `kube-system/extension-apiserver-authentication`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykatalyst.api import names
from pykatalyst.cluster.protocol import ApiError, Cluster, NotFound

AUTH_CONFIG_MAP = "extension-apiserver-authentication"


class AuthConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RequestHeaderConfig:
    client_ca_pem: str
    allowed_names: tuple[str, ...]
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


def _list(data: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    text = data.get(key)
    if not text:
        return default
    try:
        value = json.loads(str(text))
    except ValueError:
        raise AuthConfigError(f"{AUTH_CONFIG_MAP}: {key} is not a JSON list") from None
    if not isinstance(value, list):
        raise AuthConfigError(f"{AUTH_CONFIG_MAP}: {key} is not a JSON list")
    return tuple(str(v) for v in value) or default


def from_cluster(cluster: Cluster) -> RequestHeaderConfig:
    """The settings, or AuthConfigError when the cluster publishes none (kube-apiserver
    without --requestheader-client-ca-file)."""
    try:
        cm = cluster.get(names.CONFIG_MAP, AUTH_CONFIG_MAP, names.KUBE_SYSTEM_NAMESPACE)
    except NotFound:
        raise AuthConfigError(
            f"{names.KUBE_SYSTEM_NAMESPACE}/{AUTH_CONFIG_MAP} not found: the API server "
            "publishes no request-header CA (pass --requestheader-client-ca-file)"
        ) from None
    except ApiError as exc:
        raise AuthConfigError(
            f"cannot read {names.KUBE_SYSTEM_NAMESPACE}/{AUTH_CONFIG_MAP} (the request-header "
            f"CA, or pass --requestheader-client-ca-file): {exc}"
        ) from None
    data = cm.get("data") or {}
    ca = str(data.get("requestheader-client-ca-file", ""))
    if "BEGIN CERTIFICATE" not in ca:
        raise AuthConfigError(
            f"{AUTH_CONFIG_MAP} has no requestheader-client-ca-file: kube-apiserver needs "
            "--requestheader-client-ca-file for aggregated APIs"
        )
    return RequestHeaderConfig(
        ca,
        _list(data, "requestheader-allowed-names", ()),
        _list(data, "requestheader-username-headers", ("X-Remote-User",)),
        _list(data, "requestheader-group-headers", ("X-Remote-Group",)),
        _list(data, "requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
    )


def write_ca(config: RequestHeaderConfig, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "requestheader-ca.crt"
    path.write_text(config.client_ca_pem)
    return path
