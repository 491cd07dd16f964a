"""The HTTPS side of the webhook: the aiohttp app, its TLS context and the client check.

Each route reads an AdmissionReview v1 and answers one. A body that is not one gets HTTP
400 with a `Status` naming the field; a body over `max_body` bytes gets 413; a handler that
raises is answered 500 (and logged) rather than ending the server.

TLS: `TLSFiles` loads the serving pair and, on each `reload_if_changed()` (a ticker of
the host), loads it again when either file's mtime changed, into the same SSL context, so
new connections get the new certificate and open ones are not cut. With a client CA, the
admission routes require a client certificate signed by it (kube-apiserver presents one
when its admission config says so); `/healthz`, `/readyz` and `/metrics` stay open to the
kubelet's probes.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from pykatalyst.cluster.auth import TLSError as TLSError
from pykatalyst.cluster.auth import new_server_context, trust_clients
from pykatalyst.webhook.review import ReviewError, parse_review, review_response, status_body
from pykatalyst.webhook.service import Route, WebhookService

log = logging.getLogger("pykatalyst.webhook")

# An AdmissionReview holds the object and the old object; Kubernetes objects stop at 1.5 MiB.
MAX_BODY_BYTES = 4 * 1024 * 1024
HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})


@dataclass(slots=True)
class TLSFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None
    context: ssl.SSLContext = field(init=False)
    _mtimes: tuple[float, ...] = field(init=False, default=())
    reloads: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.context = new_server_context()
        self._load()
        if self.client_ca is not None:
            # Optional at the handshake so probes connect; the admission routes require it.
            trust_clients(self.context, self.client_ca, required=False)

    def _stat(self) -> tuple[float, ...]:
        return tuple(os.stat(p).st_mtime_ns for p in (self.cert, self.key))

    def _load(self) -> None:
        try:
            mtimes = self._stat()
            self.context.load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as exc:
            raise TLSError(f"cannot load {self.cert} / {self.key}: {exc}") from None
        self._mtimes = mtimes

    def reload_if_changed(self, now: float = 0.0) -> bool:
        """Load the pair again when a file changed; a pair that does not load (half
        written) keeps the old one serving and is tried again next time."""
        try:
            if self._stat() == self._mtimes:
                return False
            self._load()
        except (OSError, TLSError) as exc:
            log.warning("serving certificate changed but did not load (kept the old): %s", exc)
            return False
        self.reloads += 1
        log.info("reloaded the serving certificate from %s", self.cert)
        return True


def _json(body: object, status: int) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


@dataclass(slots=True)
class _Metrics:
    requests: Counter
    latency: Histogram


def _metrics(registry: CollectorRegistry) -> _Metrics:
    return _Metrics(
        Counter(
            "katalyst_webhook_admissions_total",
            "Admission requests answered, by route and outcome.",
            ["route", "outcome"],
            registry=registry,
        ),
        Histogram(
            "katalyst_webhook_admission_duration_seconds",
            "Time to answer one admission request inside the webhook, by route.",
            ["route"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=registry,
        ),
    )


def _handler(route: Route, metrics: _Metrics) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        start = time.perf_counter()
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            metrics.requests.labels(route.path, "too_large").inc()
            return _json(status_body(413, f"request body too large: {exc.text}"), 413)
        try:
            req = parse_review(body)
        except ReviewError as exc:
            metrics.requests.labels(route.path, "bad_request").inc()
            return _json(status_body(400, f"malformed AdmissionReview: {exc}"), 400)
        try:
            verdict = route.handler(req)
        except Exception:  # the server boundary: one bad request must not end it
            log.exception("%s: handler failed on %s %s", route.path, req.kind.kind, req.name)
            metrics.requests.labels(route.path, "error").inc()
            return _json(status_body(500, "the webhook failed on this request"), 500)
        outcome = "allowed" if verdict.allowed else "denied"
        metrics.requests.labels(route.path, outcome).inc()
        response = _json(review_response(req.uid, verdict), 200)
        metrics.latency.labels(route.path).observe(time.perf_counter() - start)
        return response

    return handle


def _require_client_cert() -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path not in HEALTH_PATHS:
            transport = request.transport
            cert = transport.get_extra_info("peercert") if transport is not None else None
            if not cert:
                return _json(
                    status_body(401, "a client certificate signed by the CA is required"), 401
                )
        return await handler(request)

    return check


def make_app(
    service: WebhookService,
    registry: CollectorRegistry,
    *,
    require_client_cert: bool = False,
    max_body: int = MAX_BODY_BYTES,
) -> web.Application:
    """The admission routes; the host adds /healthz, /readyz and /metrics."""
    middlewares = [_require_client_cert()] if require_client_cert else []
    app = web.Application(client_max_size=max_body, middlewares=middlewares)
    metrics = _metrics(registry)
    for route in service.routes:
        app.router.add_post(route.path, _handler(route, metrics))
    return app
