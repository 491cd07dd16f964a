"""The external metrics API (`external.metrics.k8s.io/v1beta1`) for `spd_agg_metrics`, as
Katalyst's custom-metrics server serves it, behind an APIService.

`GET /apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/spd_agg_metrics?labelSelector=`
with the four `metric.katalyst.kubewharf.io/spd-*` labels (SPD name, resource, container,
scope) answers an ExternalMetricValueList with one value: the latest aggMetrics item of
that scope whose timestamp is before now, for that container and resource (a quantity in
milli-units). No such point is a 404 naming what is missing, so the HPA reports it and
keeps its replicas.

Who may call: the kube-apiserver proxies with a client certificate signed by the
request-header client CA (from `kube-system/extension-apiserver-authentication`, or the
flag) and names the user in `X-Remote-User`/`X-Remote-Group`. A request without such a
certificate (or from a common name not in the allowed names) is refused with 401; probes
(`/healthz`, `/readyz`, `/livez`) stay open. What that user may do is kube-apiserver's to say
(`authz.py`, a SubjectAccessReview per request, cached): a refusal is a 403 in
kube-apiserver's words, a failure to ask is a 500.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.protocol import JSON, ApiError, BadRequest, Cluster, NotFound
from pykatalyst.cluster.selectors import parse_label_selector
from pykatalyst.metricsapi.authz import AccessReviewer, Caller, attributes

GROUP = names.EXTERNAL_METRICS_GROUP
VERSION = names.EXTERNAL_METRICS_VERSION
GV = f"{GROUP}/{VERSION}"
log = logging.getLogger("pykatalyst.metricsapi")
OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
SELECTOR_KEYS = (
    names.METRIC_SELECTOR_SPD_NAME,
    names.METRIC_SELECTOR_SPD_RESOURCE_NAME,
    names.METRIC_SELECTOR_SPD_CONTAINER_NAME,
    names.METRIC_SELECTOR_SPD_SCOPE_NAME,
)


@dataclass(frozen=True, slots=True)
class RequestHeaderAuth:
    """The aggregation layer's front-proxy authentication: the client certificate's CA is
    checked at the TLS handshake; here its common name (when `allowed_names` is set) and
    the user header."""

    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    def user(self, request: web.Request) -> Caller | str:
        """The caller, or why the request is refused."""
        transport = request.transport
        ssl_obj = transport.get_extra_info("ssl_object") if transport is not None else None
        cert = ssl_obj.getpeercert() if isinstance(ssl_obj, ssl.SSLObject) else None
        if not cert:
            return "no client certificate signed by the request-header client CA"
        cn = _common_name(cert)
        if self.allowed_names and cn not in self.allowed_names:
            return f"client certificate {cn!r} is not among the request-header allowed names"
        user = next((request.headers[h] for h in self.username_headers if h in request.headers), "")
        if not user:
            return f"no {'/'.join(self.username_headers)} header"
        groups = tuple(g for h in self.group_headers for g in request.headers.getall(h, []))
        extra: dict[str, list[str]] = {}
        for header, value in request.headers.items():
            for prefix in self.extra_prefixes:
                if header.lower().startswith(prefix.lower()) and len(header) > len(prefix):
                    # the key is escaped in the header's name (%-encoding), lower-cased
                    key = unquote(header[len(prefix) :]).lower()
                    extra.setdefault(key, []).append(value)
        return Caller(user, groups, tuple((k, tuple(v)) for k, v in sorted(extra.items())))


def _common_name(cert: Mapping[str, Any]) -> str:
    for rdn in cert.get("subject", ()):
        for pair in rdn:
            if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "commonName":
                return str(pair[1])
    return ""


def api_resource_list() -> JSON:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GV,
        "resources": [
            {
                "name": names.SPD_AGG_METRICS,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
        ],
    }


def api_group() -> JSON:
    version = {"groupVersion": GV, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def selector_labels(text: str) -> dict[str, str]:
    """The four SPD labels of a `labelSelector`, each with one `=` value; BadRequest naming
    what is missing otherwise."""
    sel = parse_label_selector(text)
    labels = {
        r.key: next(iter(r.values))
        for r in sel.requirements
        if r.op in ("=", "in") and len(r.values) == 1
    }
    missing = [k for k in SELECTOR_KEYS if k not in labels]
    if missing:
        raise BadRequest(
            f"labelSelector {text!r}: missing {', '.join(missing)} "
            f"(spd_agg_metrics selects one SPD, resource, container and scope)"
        )
    return {k: labels[k] for k in SELECTOR_KEYS}


def latest_value(
    spd: Mapping[str, Any], labels: Mapping[str, str], now: float
) -> tuple[float, str] | None:
    """(timestamp, quantity) of the latest item before `now` in the selected scope with
    the selected container and resource, or None."""
    scope = labels[names.METRIC_SELECTOR_SPD_SCOPE_NAME]
    container = labels[names.METRIC_SELECTOR_SPD_CONTAINER_NAME]
    resource = labels[names.METRIC_SELECTOR_SPD_RESOURCE_NAME]
    best: tuple[float, str] | None = None
    status = spd.get("status") if isinstance(spd.get("status"), Mapping) else {}
    for agg in (status or {}).get("aggMetrics") or []:
        if not isinstance(agg, Mapping) or agg.get("scope") != scope:
            continue
        for item in agg.get("items") or []:
            try:
                ts = parse_rfc3339(str(item.get("timestamp")))
            except (ValueError, AttributeError):
                continue
            if ts >= now or (best is not None and ts <= best[0]):
                continue
            for c in item.get("containers") or []:
                usage = c.get("usage") if isinstance(c, Mapping) else None
                if c.get("name") == container and isinstance(usage, Mapping) and resource in usage:
                    best = (ts, str(usage[resource]))
    return best


def metric_value_list(spd: Mapping[str, Any], labels: Mapping[str, str], now: float) -> JSON:
    found = latest_value(spd, labels, now)
    if found is None:
        raise NotFound(
            f"spd_agg_metrics: SPD {labels[names.METRIC_SELECTOR_SPD_NAME]} has no "
            f"{labels[names.METRIC_SELECTOR_SPD_RESOURCE_NAME]} point of container "
            f"{labels[names.METRIC_SELECTOR_SPD_CONTAINER_NAME]} in scope "
            f"{labels[names.METRIC_SELECTOR_SPD_SCOPE_NAME]} before now"
        )
    ts, text = found
    try:
        value = Quantity.from_milli(Quantity.parse(text).milli_value()).to_json()
    except QuantityError as exc:
        raise NotFound(
            f"spd_agg_metrics: the stored point {text!r} is not a quantity: {exc}"
        ) from None
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": GV,
        "metadata": {},
        "items": [
            {
                "metricName": names.SPD_AGG_METRICS,
                "metricLabels": dict(labels),
                "timestamp": rfc3339(ts),
                "value": value,
            }
        ],
    }


def _status(exc: ApiError) -> web.Response:
    return web.json_response(exc.status(), status=exc.code)


def _failure(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }
    return web.json_response(body, status=code)


class ExternalMetricsApp:
    """The aiohttp application; `now` is the clock the "before now" rule reads."""

    def __init__(
        self,
        cluster: Cluster,
        now: Callable[[], float],
        auth: RequestHeaderAuth | None,
        routes: Sequence[web.RouteDef] = (),
        authz: AccessReviewer | None = None,
    ) -> None:
        self.cluster = cluster
        self.now = now
        self.auth = auth
        self.authz = authz
        self.app = web.Application(middlewares=[self._authenticate])
        self.app.add_routes(list(routes))
        self.app.router.add_get("/apis", self._apis)
        self.app.router.add_get(f"/apis/{GROUP}", self._group)
        self.app.router.add_get(f"/apis/{GV}", self._resources)
        self.app.router.add_get(f"/apis/{GV}/namespaces/{{ns}}/{{metric}}", self._metric)

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if self.auth is None or request.path.rstrip("/") in OPEN_PATHS:
            return await handler(request)  # type: ignore[no-any-return]
        who = self.auth.user(request)
        if isinstance(who, str):
            return _failure(401, "Unauthorized", who)
        if self.authz is not None:
            attrs = attributes(request.method, request.path)
            try:
                verdict = await asyncio.to_thread(self.authz.review, who, attrs)
            except ApiError as exc:
                log.warning(
                    "cannot ask kube-apiserver whether %s may %s %s: %s (the server's identity "
                    "needs to create subjectaccessreviews: system:auth-delegator)",
                    who.user,
                    attrs.verb,
                    attrs.resource or attrs.path,
                    exc,
                )
                return _failure(500, "InternalError", f"authorization failed: {exc}")
            if not verdict.allowed:
                why = f": {verdict.reason}" if verdict.reason else ""
                return _failure(403, "Forbidden", attrs.refusal(who.user) + why)
        return await handler(request)  # type: ignore[no-any-return]

    async def _apis(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]}
        )

    async def _group(self, request: web.Request) -> web.Response:
        return web.json_response(api_group())

    async def _resources(self, request: web.Request) -> web.Response:
        return web.json_response(api_resource_list())

    async def _metric(self, request: web.Request) -> web.Response:
        ns, metric = request.match_info["ns"], request.match_info["metric"]
        try:
            if metric != names.SPD_AGG_METRICS:
                raise NotFound(f"external metric {metric!r} is not served (only spd_agg_metrics)")
            labels = selector_labels(request.query.get("labelSelector", ""))
            spd_name = labels[names.METRIC_SELECTOR_SPD_NAME]
            spd = await asyncio.to_thread(
                self.cluster.get, names.SERVICE_PROFILE_DESCRIPTOR, spd_name, ns
            )
            return web.json_response(metric_value_list(spd, labels, self.now()))
        except ApiError as exc:
            return _status(exc)
