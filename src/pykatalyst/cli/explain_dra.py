"""`katalyst explain pod`, its DRA part: each ResourceClaim the pod uses, the devices
kube-scheduler allocated to it (with their attributes from the node's ResourceSlices), and
whether the claim's `matchAttribute` constraints hold over them (docs/devices.md "DRA")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.objects import Pod
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster


def _claim_names(pod: Pod) -> list[tuple[str, str | None]]:
    """(the pod's name for the claim, the ResourceClaim's name or None while not made)."""
    spec = pod.raw.get("spec") or {}
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.raw.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for c in spec.get("resourceClaims") or []:
        name = str(c.get("name", ""))
        out.append((name, c.get("resourceClaimName") or made.get(name)))
    return out


def _attributes(cluster: Cluster, driver: str, pool: str, problems: list[str]) -> JSON:
    """device name → its attributes (plain values) in `pool` of `driver`."""
    try:
        slices = cluster.list(names.RESOURCE_SLICE, field_selector=f"spec.driver={driver}").items
    except ApiError as exc:
        problems.append(f"cannot list ResourceSlices of {driver}: {exc}")
        return {}
    out: JSON = {}
    for s in slices:
        spec = s.get("spec") or {}
        if (spec.get("pool") or {}).get("name") != pool:
            continue
        for d in spec.get("devices") or []:
            attrs = d.get("attributes") or {}
            out[d.get("name")] = {
                k: next(iter(v.values()), None) for k, v in attrs.items() if isinstance(v, dict)
            }
    return out


def _qualified(attr: str, driver: str) -> str:
    return attr if "/" in attr else f"{driver}/{attr}"


def _constraints(claim: JSON, devices: Sequence[JSON]) -> list[JSON]:
    """Each matchAttribute constraint and the values the allocated devices have for it."""
    out = []
    for c in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []:
        attr = c.get("matchAttribute")
        if not attr:
            continue
        asked = set(c.get("requests") or [d["request"] for d in devices])
        values = {}
        for d in devices:
            if d["request"] in asked:
                own = {_qualified(k, d["driver"]): v for k, v in d["attributes"].items()}
                values[d["device"]] = own.get(attr)
        distinct = set(values.values())
        held = len(distinct) == 1 and None not in distinct
        out.append({"matchAttribute": attr, "values": values, "holds": held})
    return out


def _results(claim: JSON) -> list[Mapping[str, Any]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def _claim_json(
    cluster: Cluster, pod: Pod, name: str, claim_name: str | None, problems: list[str]
) -> JSON:
    if claim_name is None:
        return {"name": name, "claim": None, "allocated": False, "devices": [], "constraints": []}
    try:
        claim = cluster.get(names.RESOURCE_CLAIM, claim_name, pod.namespace)
    except ApiError as exc:
        problems.append(f"cannot read ResourceClaim {claim_name}: {exc}")
        return {
            "name": name,
            "claim": claim_name,
            "allocated": False,
            "devices": [],
            "constraints": [],
        }
    attrs: dict[tuple[str, str], JSON] = {}
    devices = []
    for r in _results(claim):
        driver, pool = str(r.get("driver", "")), str(r.get("pool", ""))
        if (driver, pool) not in attrs:
            attrs[(driver, pool)] = _attributes(cluster, driver, pool, problems)
        device = str(r.get("device", ""))
        devices.append(
            {
                "request": str(r.get("request", "")),
                "driver": driver,
                "pool": pool,
                "device": device,
                "attributes": attrs[(driver, pool)].get(device, {}),
            }
        )
    return {
        "name": name,
        "claim": claim_name,
        "allocated": bool(devices),
        "devices": devices,
        "constraints": _constraints(claim, devices),
    }


def dra_json(cluster: Cluster, pod: Pod, problems: list[str]) -> JSON | None:
    """None for a pod that uses no ResourceClaim."""
    claims = _claim_names(pod)
    if not claims:
        return None
    return {"claims": [_claim_json(cluster, pod, n, c, problems) for n, c in claims]}


def dra_rows(dra: JSON | None) -> list[list[str]]:
    if dra is None:
        return []
    rows = []
    for c in dra["claims"]:
        if not c["allocated"]:
            rows.append([f"claim {c['name']}", f"{c['claim'] or '-'}: not allocated"])
            continue
        got = ", ".join(f"{d['request']}={d['device']}" for d in c["devices"])
        rows.append([f"claim {c['name']}", f"{c['claim']}: {got}"])
        for k in c["constraints"]:
            values = sorted({str(v) for v in k["values"].values()})
            verdict = "holds" if k["holds"] else "does not hold"
            rows.append(
                [f"matchAttribute {k['matchAttribute']}", f"{verdict}: {', '.join(values)}"]
            )
    return rows
