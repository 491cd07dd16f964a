"""The embedded API server's runner: a `MemoryCluster` served over the Kubernetes REST API
(`cluster.http.ApiServerApp`) by a ComponentHost, with the two jobs a real control plane
would do around it as tickers: watch bookmarks and finishing graceful pod deletions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.http import ApiServerApp, url_host
from pykatalyst.cluster.memory import MemoryCluster
from pykatalyst.runtime.host import ComponentHost, Endpoint

API = "apiserver"
FINALIZE_PERIOD_S = 1.0


class ApiServer:
    """Serves a MemoryCluster: in the foreground (`run`, the `katalyst apiserver` command,
    stopped by SIGTERM/SIGINT) or on a background thread (`start`/`stop`, the embedded API
    server of tests and local runs; `url` is ready once `start()` returns)."""

    def __init__(
        self,
        cluster: MemoryCluster,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_seconds: float = 60.0,
        finalize_pods: bool = False,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.port = port
        self.bookmark_seconds = bookmark_seconds
        self.finalize_pods = finalize_pods
        self.url = ""
        self._component = self._make_host()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _make_host(self) -> ComponentHost:
        # Store calls are quick and the app already runs them in its own threads: the
        # tickers run on the loop.
        component = ComponentHost(API, clock=RealClock())
        app = ApiServerApp(self.cluster, routes=component.health_routes())
        component.serve(Endpoint(API, self.host, self.port, app.app, health=False))
        component.on_stop(app.stop_watches)
        if self.bookmark_seconds > 0:
            component.every("bookmarks", self.bookmark_seconds, lambda now: self.cluster.bookmark())
        if self.finalize_pods:
            # Without kubelets, nothing would ever remove a bound pod whose grace period ran
            # out; this plays that part so `kubectl delete pod` finishes.
            component.every(
                "finalize-pods",
                FINALIZE_PERIOD_S,
                lambda now: self.cluster.finalize_pod_deletions(),
            )
        return component

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until `request_stop()`, SIGTERM or SIGINT (signals on the main thread)."""

        def bound() -> None:
            self.port = self._component.bound[API][1]
            self.url = f"http://{url_host(self.host)}:{self.port}"
            if ready is not None:
                ready()

        await self._component.run(on_ready=bound)

    def run(self, ready: Callable[[], None] | None = None) -> None:
        """`serve()` in the foreground, on a fresh event loop."""
        asyncio.run(self.serve(ready))

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="apiserver", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self.url

    def _run(self) -> None:
        try:
            asyncio.run(self.serve(ready=self._ready.set))
        except BaseException as e:  # reported to the thread that called start()
            self._error = e
            self._ready.set()

    def request_stop(self) -> None:
        """Ask `serve()` to return; callable from any thread."""
        self._component.request_stop()

    def stop(self) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
