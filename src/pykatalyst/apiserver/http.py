"""The HTTP face of a `MemoryCluster`: the Kubernetes REST API over aiohttp.

It translates requests into `MemoryCluster` calls and errors into `Status` JSON; all
semantics (versions, conflicts, selectors, admission, subresources) are the store's own.
That is enough for the official client and for `kubectl` (get, describe, create, apply,
edit, patch, delete, watch) to work against the embedded cluster. It is a local
development and test server: no authentication, no TLS, no protobuf, no server-side apply,
no paging (`limit`/`continue` are ignored: every list is complete).

This module routes requests to their handlers. Discovery is `apiserver/discovery.py`, the
kubectl tables `apiserver/tables.py`, watch streams `apiserver/watchstream.py` and the wire
form of answers `apiserver/responses.py`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlparse

import yaml
from aiohttp import web

from pykatalyst.api.yamlio import load_yaml
from pykatalyst.apiserver import discovery
from pykatalyst.apiserver.discovery import Target
from pykatalyst.apiserver.responses import (
    UnsupportedMediaType,
    error_response,
    json_response,
    parse_json,
    status_body,
    unauthorized,
)
from pykatalyst.apiserver.store import resource_name
from pykatalyst.apiserver.strategy import grace_seconds
from pykatalyst.apiserver.tables import dig, table, wants_table
from pykatalyst.apiserver.watchstream import WatchStreams
from pykatalyst.cluster.auth import bearer_middleware
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    MethodNotAllowed,
    NotFound,
    PatchType,
)

if TYPE_CHECKING:
    from pykatalyst.apiserver.memory import MemoryCluster

_T = TypeVar("_T")
_log = logging.getLogger(__name__)

PATCH_TYPES: Final[dict[str, PatchType]] = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
APPLY_PATCH: Final = "application/apply-patch+yaml"

# kube-apiserver's default --max-request-bytes is 3 MiB (etcd's object limit is 1.5 MiB).
DEFAULT_MAX_BODY_BYTES: Final = 3 * 1024 * 1024
# A client that sends its body slower than this is cut off with a 408.
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_WATCHES: Final = 200
DEFAULT_MAX_WATCHES_PER_CLIENT: Final = 100


class ApiServerApp:
    """The aiohttp application serving one MemoryCluster."""

    def __init__(
        self,
        cluster: MemoryCluster,
        max_watches: int = DEFAULT_MAX_WATCHES,
        routes: Iterable[web.RouteDef] = (),
        *,
        max_watches_per_client: int = DEFAULT_MAX_WATCHES_PER_CLIENT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
        token: str | None = None,
    ) -> None:
        """Open watches are bounded in total and per client address (429 beyond); bodies
        over `max_body_bytes` get a 413, ones slower than `body_timeout_s` a 408; with
        `token`, every request but the probes needs `Authorization: Bearer <token>`."""
        self.cluster = cluster
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        # Store calls, and the waits of open watches, run in these threads, never on the
        # event loop: a watch holds one thread while it waits for events, so there are
        # threads beyond the watch bound for the other calls.
        self._executor = ThreadPoolExecutor(
            max_workers=max_watches + 16, thread_name_prefix="store"
        )
        self.watches = WatchStreams(
            cluster, self._executor, self._store, max_watches, max_watches_per_client
        )
        middlewares = [bearer_middleware(token, unauthorized)] if token else []
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
        # Routes of the process serving this app (health, metrics) come before the API's.
        self.app.router.add_routes(list(routes))
        self.app.router.add_route("*", "/{path:.*}", self._dispatch)
        self.app.on_shutdown.append(self._on_shutdown)

    async def _on_shutdown(self, app: web.Application) -> None:
        self.stop_watches()

    def stop_watches(self) -> None:
        self.watches.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- routing ------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as e:
            return error_response(e)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # the client sees a 500 Status instead of a dropped socket
            _log.exception("%s %s failed", request.method, request.path_qs)
            return error_response(ApiError(f"{type(e).__name__}: {e}", "InternalError", 500))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        segments = [s for s in path.split("/") if s]
        method = request.method
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        doc = discovery.document(self.cluster, path, request.host)
        if doc is not None:
            return json_response(doc)
        if segments[:1] == ["api"] and len(segments) > 2:
            return await self._resource("", segments[1], segments[2:], method, request)
        if segments[:1] == ["apis"] and len(segments) > 3:
            return await self._resource(segments[1], segments[2], segments[3:], method, request)
        raise NotFound(f"the server could not find the requested resource ({method} {path})")

    async def _resource(
        self, group: str, version: str, rest: list[str], method: str, request: web.Request
    ) -> web.StreamResponse:
        t = discovery.resolve(self.cluster, group, version, rest)
        if request.query.get("dryRun"):
            raise BadRequest("dryRun is not supported by this server")
        if t.kind.plural == "bindings":
            return await self._bindings(t, method, request)
        if t.name is None:
            return await self._collection(t, method, request)
        if t.subresource in ("binding", "eviction"):
            return await self._pod_subresource(t, t.name, method, request)
        handler = {
            "GET": self._get,
            "PUT": self._put,
            "PATCH": self._patch,
            "DELETE": self._delete,
        }.get(method)
        if handler is None:
            raise MethodNotAllowed(f"{method} is not supported on {resource_name(t.kind)}")
        return await handler(t, t.name, request)

    # --- handlers -----------------------------------------------------------------------

    async def _bindings(self, t: Target, method: str, request: web.Request) -> web.Response:
        if method != "POST" or t.namespace is None:
            raise MethodNotAllowed(f"{method} is not supported on bindings")
        body = await self._body(request)
        pod = str(dig(body, "metadata", "name") or "")
        await self._store(self.cluster.bind, t.namespace, pod, _target_name(body))
        return json_response(status_body(201), 201)

    async def _collection(self, t: Target, method: str, request: web.Request) -> web.StreamResponse:
        if method == "GET":
            if request.query.get("watch") in ("1", "true", "True"):
                return await self.watches.serve(t, request)
            return await self._list(t, request)
        if method == "POST":
            body = await self._body(request)
            created = await self._store(self.cluster.create, t.kind, body, t.namespace)
            return json_response(created, 201)
        raise MethodNotAllowed(
            f"{method} is not supported on the {resource_name(t.kind)} collection"
        )

    async def _pod_subresource(
        self, t: Target, name: str, method: str, request: web.Request
    ) -> web.Response:
        if method != "POST":
            raise MethodNotAllowed(f"{method} is not supported on pods/{t.subresource}")
        body = await self._body(request)
        ns = t.namespace or ""
        if t.subresource == "binding":
            notes = dig(body, "metadata", "annotations")
            notes = {str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict) else None
            await self._store(self.cluster.bind, ns, name, _target_name(body), notes)
        else:
            grace = dig(body, "deleteOptions", "gracePeriodSeconds")
            seconds = None if grace is None else grace_seconds(grace, "gracePeriodSeconds")
            await self._store(self.cluster.evict, ns, name, seconds)
        return json_response(status_body(201), 201)

    async def _get(self, t: Target, name: str, request: web.Request) -> web.Response:
        if t.subresource == "scale":
            scale = await self._store(self.cluster.get_scale, t.kind, name, t.namespace)
            return json_response(scale)
        obj = await self._store(self.cluster.get, t.kind, name, t.namespace)
        if wants_table(request) and t.subresource is None:
            rv = str(dig(obj, "metadata", "resourceVersion") or "")
            include = request.query.get("includeObject", "")
            return json_response(table(self.cluster, t.kind, [obj], rv, include))
        return json_response(obj)

    async def _put(self, t: Target, name: str, request: web.Request) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise BadRequest("the body of a PUT must be a JSON object")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be a JSON object")
        if meta.get("name", name) != name:
            raise BadRequest(
                f"the name of the object ({meta.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        meta["name"] = name
        if t.namespace is not None:
            if meta.get("namespace", t.namespace) != t.namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request"
                )
            meta["namespace"] = t.namespace
        if t.subresource == "status":
            return json_response(await self._store(self.cluster.update_status, t.kind, body))
        if t.subresource == "scale":
            scale = await self._store(self.cluster.update_scale, t.kind, name, body, t.namespace)
            return json_response(scale)
        if t.subresource is not None:
            raise MethodNotAllowed(f"PUT is not supported on {t.subresource}: patch it")
        return json_response(await self._store(self.cluster.update, t.kind, body))

    async def _patch(self, t: Target, name: str, request: web.Request) -> web.Response:
        content_type = request.content_type
        if content_type == APPLY_PATCH:
            raise UnsupportedMediaType(
                "server-side apply is not supported by this server; use client-side "
                "`kubectl apply` (the default) or a merge/strategic/JSON patch"
            )
        patch_type = PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format {content_type!r} - "
                f"accepted media types include: {', '.join(PATCH_TYPES)}"
            )
        patch = await self._body(request)
        patched = await self._store(
            self.cluster.patch, t.kind, name, patch, t.namespace, patch_type, t.subresource
        )
        return json_response(patched)

    async def _delete(self, t: Target, name: str, request: web.Request) -> web.Response:
        if t.subresource is not None:
            raise MethodNotAllowed(f"DELETE is not supported on {t.subresource}")
        grace = await self._grace_period(request)
        result = await self._store(self.cluster.delete, t.kind, name, t.namespace, grace)
        if result is not None:
            return json_response(result)
        details = {"name": name, "group": t.kind.group, "kind": t.kind.plural}
        return json_response(status_body(200, details=details))

    async def _store(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a store call off the event loop: it takes the store's lock, and admission
        plugins may do I/O of their own (a webhook served on this very loop, say)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except RuntimeError as exc:  # the executor is shut down: the server is stopping
            if self.watches.stopping:
                raise ApiError("the server is shutting down", "ServiceUnavailable", 503) from exc
            raise

    async def _read(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(
                f"the request body is over this server's limit of {self.max_body_bytes} bytes",
                "RequestEntityTooLarge",
                413,
            ) from None
        except TimeoutError:
            raise ApiError(
                f"the request body did not arrive within {self.body_timeout_s:g}s",
                "Timeout",
                408,
            ) from None

    async def _body(self, request: web.Request) -> Any:
        raw = await self._read(request)
        if not raw:
            raise BadRequest("the request has no body")
        ctype = request.content_type
        if "json" not in ctype and "yaml" not in ctype and ctype != "application/octet-stream":
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format {ctype!r} - accepted media "
                "types include: application/json, application/yaml"
            )
        try:
            if "yaml" in request.content_type:
                return load_yaml(raw, "the request body")
            return parse_json(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        except RecursionError:
            raise BadRequest("the request body is nested too deeply") from None

    async def _grace_period(self, request: web.Request) -> int | None:
        value: Any = request.query.get("gracePeriodSeconds")
        raw = await self._read(request)
        if raw:
            try:
                options = parse_json(raw)
            except (ValueError, RecursionError):
                raise BadRequest("the DeleteOptions body is not valid JSON") from None
            if isinstance(options, dict) and options.get("gracePeriodSeconds") is not None:
                value = options["gracePeriodSeconds"]
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise BadRequest(f"gracePeriodSeconds: invalid value {value!r}") from None
        return grace_seconds(value, "gracePeriodSeconds")

    async def _list(self, t: Target, request: web.Request) -> web.Response:
        q = request.query
        result = await self._store(
            self.cluster.list,
            t.kind,
            t.namespace,
            q.get("labelSelector") or None,
            q.get("fieldSelector") or None,
        )
        if wants_table(request):
            return json_response(
                table(
                    self.cluster,
                    t.kind,
                    result.items,
                    result.resource_version,
                    q.get("includeObject", ""),
                )
            )
        return json_response(
            {
                "kind": f"{t.kind.kind}List",
                "apiVersion": t.kind.api_version,
                "metadata": {"resourceVersion": result.resource_version},
                "items": result.items,
            }
        )


def _target_name(binding: Any) -> str:
    name = dig(binding, "target", "name")
    if not isinstance(name, str):
        raise BadRequest("a Binding needs target.name (the node)")
    return name


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def kubeconfig_for(url: str, name: str = "katalyst-embedded", token: str | None = None) -> JSON:
    """A kubeconfig for `kubectl` / `--kubeconfig` pointing at this server, with its bearer
    token when it has one."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
