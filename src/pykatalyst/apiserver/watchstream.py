"""Watch streaming for the embedded API server: a `?watch=true` GET held open as a
chunked stream of JSON lines, fed from a store watch waited on in a worker thread, with
bounds on open watches (in total and per client) and a Table form for `kubectl get -w`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from pykatalyst.apiserver.discovery import Target
from pykatalyst.apiserver.responses import write_event
from pykatalyst.apiserver.tables import dig, table, wants_table
from pykatalyst.cluster.protocol import JSON, BadRequest, Gone, TooManyRequests, WatchEvent

if TYPE_CHECKING:
    from pykatalyst.apiserver.memory import MemoryCluster

# The server ends a watch after this long unless the client asked for less, as the
# real one does (clients reconnect from their last resourceVersion).
DEFAULT_WATCH_SECONDS: Final = 1800
# How long a watch thread waits on the store before looking at the connection again.
_WATCH_POLL_SECONDS: Final = 0.5


# Runs a store call off the event loop (the server's own, which knows when it stops).
StoreCall = Callable[..., Awaitable[Any]]


def _is_true(value: str | None) -> bool:
    return value in ("1", "true", "True")


@dataclass(eq=False)
class WatchStreams:
    """The open watch streams of one server. Store calls go through `call`, the server's
    own, which runs them off the event loop and knows when the server stops; waits on
    open watches run in `executor`."""

    cluster: MemoryCluster
    executor: ThreadPoolExecutor
    call: StoreCall
    max_watches: int
    max_watches_per_client: int
    stopping: bool = False
    _watches: set[Any] = field(default_factory=set)
    _watchers: dict[str, int] = field(default_factory=dict)

    def stop(self) -> None:
        self.stopping = True
        for w in list(self._watches):
            w.close()

    async def serve(self, t: Target, request: web.Request) -> web.StreamResponse:
        """Answer a watch request, within the bounds on open watches (a 429 beyond)."""
        q = request.query
        try:
            timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        except ValueError:
            raise BadRequest(f"timeoutSeconds: invalid value {q.get('timeoutSeconds')!r}") from None
        client = request.remote or "?"
        if sum(self._watchers.values()) >= self.max_watches:
            raise TooManyRequests(
                f"too many open watches on this server (at most {self.max_watches})",
                retry_after_seconds=1,
            )
        if self._watchers.get(client, 0) >= self.max_watches_per_client:
            raise TooManyRequests(
                f"too many open watches from {client} (at most {self.max_watches_per_client})",
                retry_after_seconds=1,
            )
        self._watchers[client] = self._watchers.get(client, 0) + 1
        try:
            return await self._stream(t, request, timeout)
        finally:
            left = self._watchers.pop(client, 1) - 1
            if left > 0:
                self._watchers[client] = left

    async def _open(self, t: Target, request: web.Request) -> Any:
        q = request.query
        return await self.call(
            self.cluster.watch,
            t.kind,
            t.namespace,
            q.get("resourceVersion") or None,
            q.get("labelSelector") or None,
            q.get("fieldSelector") or None,
            _is_true(q.get("allowWatchBookmarks")),
        )

    async def _stream(self, t: Target, request: web.Request, timeout: float) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        gone: Gone | None = None
        watch: Any = None
        try:
            watch = await self._open(t, request)
        except Gone as e:
            gone = e  # a real server answers 200 and sends the 410 as the first event
        await response.prepare(request)
        try:
            if gone is not None:
                await write_event(response, "ERROR", gone.status())
                return response
            self._watches.add(watch)
            await self._pump(t, request, response, watch, timeout)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if watch is not None:
                self._watches.discard(watch)
                watch.close()
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    async def _pump(
        self,
        t: Target,
        request: web.Request,
        response: web.StreamResponse,
        watch: Any,
        timeout: float,
    ) -> None:
        """Write the watch's events until the deadline, the client leaves or the server
        stops; a watch that fell behind ends with its 410 as an ERROR event."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        as_table = wants_table(request)
        include = request.query.get("includeObject", "")
        first_table = True
        while not self.stopping:
            transport = request.transport
            left = deadline - loop.time()
            if transport is None or transport.is_closing() or left <= 0:
                return
            try:
                events: list[WatchEvent] = await loop.run_in_executor(
                    self.executor, watch.next_events, min(left, _WATCH_POLL_SECONDS)
                )
            except Gone as e:
                await write_event(response, "ERROR", e.status())
                return
            except RuntimeError:  # the executor was shut down
                return
            for event in events:
                obj = event.object
                if as_table and event.type in ("ADDED", "MODIFIED", "DELETED"):
                    obj = self._table_row(t, obj, include, first_table)
                    first_table = False
                await write_event(response, event.type, obj)

    def _table_row(self, t: Target, obj: JSON, include: str, first: bool) -> JSON:
        rv = str(dig(obj, "metadata", "resourceVersion") or "")
        out = table(self.cluster, t.kind, [obj], rv, include)
        if not first:
            # as on a real server, only the first event carries the columns
            out["columnDefinitions"] = []
        return out
