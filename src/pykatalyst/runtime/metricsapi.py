"""The external metrics API server's runner: the HTTPS server among a ComponentHost's
servers (with /healthz, /readyz, /metrics), and the serving certificate's reload check."""

from __future__ import annotations

from collections.abc import Callable

from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.metricsapi.authz import AccessReviewer
from pykatalyst.metricsapi.server import ExternalMetricsApp, RequestHeaderAuth
from pykatalyst.runtime.host import ComponentHost, Endpoint
from pykatalyst.webhook.server import TLSFiles

TLS_RELOAD = "tls-reload"


def metrics_api_host(
    cluster: Cluster,
    tls: TLSFiles,
    clock: Clock,
    auth: RequestHeaderAuth | None,
    *,
    listen: tuple[str, int],
    tls_check_s: float = 10.0,
    authz: AccessReviewer | None = None,
) -> ComponentHost:
    host = ComponentHost("metrics-api", clock=clock)
    host.every(TLS_RELOAD, tls_check_s, tls.reload_if_changed)
    app = ExternalMetricsApp(cluster, clock.now, auth, authz=authz)
    host.serve(Endpoint("metrics-api", listen[0], listen[1], app.app, ssl_context=tls.context))
    return host


def run_metrics_api(
    cluster: Cluster,
    tls: TLSFiles,
    clock: Clock,
    auth: RequestHeaderAuth | None,
    *,
    listen: tuple[str, int],
    on_ready: Callable[[], None] | None = None,
    max_seconds: float | None = None,
    authz: AccessReviewer | None = None,
) -> int:
    host = metrics_api_host(cluster, tls, clock, auth, listen=listen, authz=authz)
    return host.run_sync(on_ready=on_ready, max_seconds=max_seconds)
