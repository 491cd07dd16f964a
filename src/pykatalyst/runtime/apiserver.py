"""The embedded API server's runner: a `MemoryCluster` served over the Kubernetes REST API
(`apiserver.http.ApiServerApp`) by a ComponentHost, with the jobs a real control plane would
do around it as tickers: watch bookmarks, finishing graceful pod deletions (the
simulator's stand-in kubelet), and (with a
state file) saving the cluster every second it changed, fsync'd, so a `kill -9` loses at
most the last second."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from pykatalyst.apiserver.http import DEFAULT_MAX_BODY_BYTES, ApiServerApp, url_host
from pykatalyst.apiserver.kubelet import StandInKubelet
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.host import ComponentHost, Endpoint

API = "apiserver"
FINALIZE_PERIOD_S = 1.0
SAVE_PERIOD_S = 1.0
# A connection that sends nothing for this long is closed (silent sockets, slow headers).
IDLE_TIMEOUT_S = 30.0


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_stale_temp_files(path: Path) -> list[Path]:
    """Temp files a killed save left beside the state file; removed, and returned."""
    if not path.parent.is_dir():
        return []
    stale = [p for p in path.parent.glob(_temp_prefix(path) + "*") if p.name.endswith(".tmp")]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def save_snapshot(cluster: MemoryCluster, path: Path) -> None:
    """Write atomically and durably: the data is fsync'd before the rename and the folder
    after it, so a crash leaves the old snapshot or the new one, never half of one, and
    no temp file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(cluster.snapshot(), separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class StateSaver:
    """Saves the cluster when its resourceVersion moved since the last save."""

    def __init__(self, cluster: MemoryCluster, path: Path) -> None:
        self.cluster = cluster
        self.path = path
        self.saved_rv: str | None = None
        self.saves = 0

    def __call__(self, now: float = 0.0) -> bool:
        rv = self.cluster.resource_version
        if rv == self.saved_rv:
            return False
        save_snapshot(self.cluster, self.path)
        self.saved_rv = rv
        self.saves += 1
        return True


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
        *,
        token: str | None = None,
        state: Path | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.port = port
        self.bookmark_seconds = bookmark_seconds
        self.finalize_pods = finalize_pods
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.saver = StateSaver(cluster, state) if state is not None else None
        self.url = ""
        self._component = self._make_host()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _make_host(self) -> ComponentHost:
        # Store calls are quick and the app already runs them in its own threads: the
        # tickers run on the loop.
        component = ComponentHost(API, clock=RealClock())
        app = ApiServerApp(
            self.cluster,
            routes=component.health_routes(),
            token=self.token,
            max_body_bytes=self.max_body_bytes,
        )
        component.serve(
            Endpoint(
                API, self.host, self.port, app.app, health=False, idle_timeout_s=IDLE_TIMEOUT_S
            )
        )
        component.on_stop(app.stop_watches)
        saver = self.saver
        if saver is not None:
            remove_stale_temp_files(saver.path)
            saver.saved_rv = self.cluster.resource_version  # what was loaded is on disk
            component.every("save-state", SAVE_PERIOD_S, saver)

            def final_save() -> None:
                saver()

            component.on_stop(final_save)
        if self.bookmark_seconds > 0:
            component.every("bookmarks", self.bookmark_seconds, lambda now: self.cluster.bookmark())
        if self.finalize_pods:
            # Without kubelets, nothing would ever remove a bound pod whose grace period ran
            # out; this plays that part so `kubectl delete pod` finishes.
            kubelet = StandInKubelet(self.cluster, self.cluster.clock)
            component.every(
                "finalize-pods", FINALIZE_PERIOD_S, lambda now: kubelet.finish_deletions()
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
