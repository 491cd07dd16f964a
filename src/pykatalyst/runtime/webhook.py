"""The webhook's runner: the HTTPS admission server among a ComponentHost's servers, with
two tickers: the SPD cache sync and the serving certificate's reload check."""

from __future__ import annotations

from collections.abc import Callable

from pykatalyst.cluster.clock import Clock
from pykatalyst.runtime.host import ComponentHost, Endpoint
from pykatalyst.webhook.server import TLSFiles, make_app
from pykatalyst.webhook.service import WebhookService

SYNC = "sync"
TLS_RELOAD = "tls-reload"


def webhook_host(
    service: WebhookService,
    tls: TLSFiles,
    clock: Clock,
    *,
    listen: tuple[str, int],
    sync_interval_s: float = 1.0,
    tls_check_s: float = 10.0,
) -> ComponentHost:
    host = ComponentHost("webhook", clock=clock)
    host.every(SYNC, sync_interval_s, service.sync)
    host.every(TLS_RELOAD, tls_check_s, tls.reload_if_changed)
    host.ready_when("spd-cache", service.not_ready)
    host.registry.register(service.skips.total)
    app = make_app(service, host.registry, require_client_cert=tls.client_ca is not None)
    host.serve(Endpoint("webhook", listen[0], listen[1], app, ssl_context=tls.context))
    return host


def run_webhook(
    service: WebhookService,
    tls: TLSFiles,
    clock: Clock,
    *,
    listen: tuple[str, int],
    on_ready: Callable[[], None] | None = None,
    max_seconds: float | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT or `max_seconds`; exit code 0."""
    host = webhook_host(service, tls, clock, listen=listen)
    return host.run_sync(on_ready=on_ready, max_seconds=max_seconds)
