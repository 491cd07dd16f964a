"""`KubeCluster`: the `Cluster` protocol over a real Kubernetes API server.

This is the only module that imports the official `kubernetes` client, and it uses only the
client's transport: configuration (kubeconfig, in-cluster service account, exec plugins,
client certificates, token refresh) and its HTTP layer. Requests are built here and bodies
stay plain JSON dicts both ways, because the generated typed models cost time, lose unknown
fields of our CRDs, and fail to decode some valid responses (a successful `pods/binding`
answers with a `Status` the generated `create_namespaced_binding` cannot read as a
`V1Binding`).
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import quote

import urllib3

from pykatalyst.api.names import POD as _POD
from pykatalyst.api.names import Kind
from pykatalyst.cluster.protocol import (
    JSON,
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    EventType,
    Forbidden,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    ObjectList,
    PatchType,
    TooManyRequests,
    WatchEvent,
    binding_body,
    eviction_body,
)
from pykatalyst.cluster.ratelimit import TokenBucket

PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

# client-go's defaults for a client that does not configure its own limits
DEFAULT_QPS = 5.0
DEFAULT_BURST = 10
# how long one watch request lasts before the client reconnects from its last version
DEFAULT_WATCH_SECONDS = 300
# connections kept open to the server: enough for a scheduler's concurrent binds beside its
# watches (the client's own default, 5 per cpu, drops and re-handshakes the rest)
DEFAULT_POOL_SIZE = 32


class KubeConfigError(ValueError):
    """A kubeconfig or in-cluster configuration the client cannot use."""


class RateLimiter:
    """Client-side rate limit with client-go's semantics: `burst` requests at once, then
    `qps` per second (one `ratelimit.TokenBucket`, thread-safe). `now` and `sleep` are
    injected so tests run on virtual time."""

    def __init__(
        self,
        qps: float,
        burst: int,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps < 0:
            raise ValueError(f"qps must be >= 0 (0 disables the limit), got {qps}")
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be >= 1 when qps > 0, got {burst}")
        self.qps = qps
        self.burst = burst
        self._now = now
        self._sleep = sleep
        self._bucket = TokenBucket(qps, burst, now=now())
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; return how long the caller must wait before using it."""
        if self.qps == 0:
            return 0.0
        with self._lock:
            return self._bucket.reserve(self._now())

    def acquire(self) -> float:
        """Wait for a token; return the time waited."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay


def error_from_response(status: int, body: bytes, retry_after: str | None = None) -> ApiError:
    """The typed error for a failed response, read from its `Status` body when it has one."""
    message = ""
    reason = ""
    details: dict[str, Any] = {}
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        message = str(doc.get("message") or "")
        reason = str(doc.get("reason") or "")
        details = dict(doc.get("details") or {})
    elif body:
        message = body.decode("utf-8", "replace")[:500]
    message = message or f"HTTP {status}"
    wait: float | None = None
    if retry_after:
        try:
            wait = float(retry_after)
        except ValueError:
            wait = None
    if wait is None and "retryAfterSeconds" in details:
        wait = float(details["retryAfterSeconds"])
    kw: dict[str, Any] = {"details": details}
    if wait is not None:
        kw["retry_after_seconds"] = wait
    if status == 404:
        return NotFound(message, **kw)
    if status == 409:
        return (
            AlreadyExists(message, **kw) if reason == "AlreadyExists" else Conflict(message, **kw)
        )
    if status == 410:
        return Gone(message, **kw)
    if status == 422:
        return Invalid(message, **kw)
    if status == 400:
        return BadRequest(message, **kw)
    if status == 403:
        return Forbidden(message, **kw)
    if status == 405:
        return MethodNotAllowed(message, **kw)
    if status == 429:
        return TooManyRequests(message, **kw)
    return ApiError(message, reason or "InternalError", status, **kw)


def _with_type(kind: Kind, obj: JSON) -> JSON:
    # A real API server leaves apiVersion/kind off the items of built-in lists.
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj


class KubeCluster:
    """The `Cluster` protocol over the official client's `ApiClient` (sync).

    Thread-safe: requests go through the client's connection pool; watches read their
    streams on their own threads.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        request_timeout: float = 30.0,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
    ) -> None:
        # Typed as Any: the generated client is only partly annotated.
        self._client: Any = api_client
        self.limiter = RateLimiter(qps, burst, now, sleep)
        self.request_timeout = request_timeout
        self.watch_seconds = watch_seconds
        self._watches: weakref.WeakSet[KubeWatch] = weakref.WeakSet()

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        context: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        **kw: Any,
    ) -> KubeCluster:
        """From a kubeconfig file (None: $KUBECONFIG or ~/.kube/config). `pool_size`: the
        connections kept open to the server."""
        from kubernetes import client, config

        configuration = client.Configuration()
        load: Any = config.load_kube_config
        try:
            load(config_file=path, context=context, client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as exc:
            raise KubeConfigError(f"kubeconfig {path or '(default)'}: {exc}") from None
        configuration.connection_pool_maxsize = pool_size
        return cls(client.ApiClient(configuration), **kw)

    @classmethod
    def in_cluster(cls, pool_size: int = DEFAULT_POOL_SIZE, **kw: Any) -> KubeCluster:
        """From the pod's service account (token, CA and KUBERNETES_SERVICE_HOST)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        load: Any = config.load_incluster_config
        try:
            load(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as exc:
            raise KubeConfigError(f"in-cluster configuration: {exc}") from None
        configuration.connection_pool_maxsize = pool_size
        return cls(client.ApiClient(configuration), **kw)

    @classmethod
    def from_url(
        cls, url: str, token: str | None = None, pool_size: int = DEFAULT_POOL_SIZE, **kw: Any
    ) -> KubeCluster:
        """A server reached by URL, e.g. `katalyst apiserver` on http://127.0.0.1:PORT."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = url.rstrip("/")
        if token:
            configuration.api_key = {"BearerToken": f"Bearer {token}"}
        configuration.connection_pool_maxsize = pool_size
        return cls(client.ApiClient(configuration), **kw)

    def close(self) -> None:
        """Close the watches this client opened, then its connections."""
        for w in list(self._watches):
            w.close()
        self._client.close()

    @property
    def host(self) -> str:
        return str(self._client.configuration.host)

    # --- HTTP -----------------------------------------------------------------------------

    @staticmethod
    def path(
        kind: Kind,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        parts = ["/api/" + kind.version if not kind.group else f"/apis/{kind.group}/{kind.version}"]
        if kind.namespaced and namespace:
            parts.append("/namespaces/" + quote(namespace, safe=""))
        parts.append("/" + kind.plural)
        if name is not None:
            if not name:
                raise BadRequest(f"{kind.kind}: name must not be empty")
            parts.append("/" + quote(name, safe=""))
        if subresource:
            parts.append("/" + subresource)
        return "".join(parts)

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Any = None,
    ) -> Any:
        """Send one request; return the open response (a 2xx) or raise the typed error."""
        self.limiter.acquire()
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(
                *request, _request_timeout=timeout or self.request_timeout
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(
                f"{method} {path}: no answer from the API server at {self.host}: {exc}",
                "ServiceUnavailable",
                503,
            ) from exc
        if not 200 <= response.status <= 299:
            data = response.read()
            raise error_from_response(response.status, data, response.getheader("Retry-After"))
        return response

    def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        response = self._send(method, path, query, body, content_type)
        data = response.read()
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise ApiError(
                f"{method} {path}: the server answered with something that is not JSON",
                "InternalError",
                500,
            ) from exc

    def _namespace(self, kind: Kind, namespace: str | None, obj: JSON | None = None) -> str | None:
        if not kind.namespaced:
            return None
        ns = namespace or ((obj or {}).get("metadata") or {}).get("namespace")
        if not ns:
            raise BadRequest(f"{kind.kind} is namespaced: a namespace is required")
        return str(ns)

    @staticmethod
    def _name(kind: Kind, obj: JSON) -> str:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise Invalid(f"{kind.kind}: metadata.name is required")
        return str(name)

    # --- the Cluster protocol ---------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        ns = self._namespace(kind, namespace)
        obj: JSON = self._call("GET", self.path(kind, ns, name))
        return _with_type(kind, obj)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        ns = namespace if kind.namespaced else None
        doc: JSON = self._call("GET", self.path(kind, ns), query)
        items = [_with_type(kind, item) for item in doc.get("items") or []]
        return ObjectList(items, str((doc.get("metadata") or {}).get("resourceVersion", "")))

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
    ) -> KubeWatch:
        w = KubeWatch(
            self,
            kind,
            namespace if kind.namespaced else None,
            resource_version,
            label_selector,
            field_selector,
            allow_bookmarks,
        )
        self._watches.add(w)
        return w

    def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON:
        ns = self._namespace(kind, namespace, obj)
        body = _with_type(kind, dict(obj))
        meta = body.get("metadata")
        if ns is not None and isinstance(meta, dict) and not meta.get("namespace"):
            # a mismatch between the two is the server's to reject, so it is left alone
            body["metadata"] = {**meta, "namespace": ns}
        created: JSON = self._call("POST", self.path(kind, ns), body=body)
        return _with_type(kind, created)

    def update(self, kind: Kind, obj: JSON) -> JSON:
        ns = self._namespace(kind, None, obj)
        body = _with_type(kind, dict(obj))
        updated: JSON = self._call("PUT", self.path(kind, ns, self._name(kind, obj)), body=body)
        return _with_type(kind, updated)

    def update_status(self, kind: Kind, obj: JSON) -> JSON:
        ns = self._namespace(kind, None, obj)
        body = _with_type(kind, dict(obj))
        path = self.path(kind, ns, self._name(kind, obj), "status")
        updated: JSON = self._call("PUT", path, body=body)
        return _with_type(kind, updated)

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> JSON:
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise BadRequest(
                f"patch_type {patch_type!r} is not supported; use one of "
                f"{', '.join(PATCH_CONTENT_TYPES)}"
            )
        if patch_type == "json" and not isinstance(patch, list):
            raise BadRequest("a JSON patch (RFC 6902) must be a list of operations")
        if patch_type != "json" and not isinstance(patch, dict):
            raise BadRequest(f"a {patch_type} patch must be a JSON object")
        ns = self._namespace(kind, namespace)
        path = self.path(kind, ns, name, subresource)
        patched: JSON = self._call("PATCH", path, body=patch, content_type=content_type)
        return _with_type(kind, patched)

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON | None:
        ns = self._namespace(kind, namespace)
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        response = self._send("DELETE", self.path(kind, ns, name), body=options)
        data = response.read()
        doc = json.loads(data) if data else None
        if not isinstance(doc, dict) or doc.get("kind") == "Status":
            return None
        meta = doc.get("metadata") or {}
        # The server answers with the object in both cases; it is still there only while
        # finalizers or a pod's grace period hold it.
        pending = response.status == 202 or (
            meta.get("deletionTimestamp") is not None
            and (bool(meta.get("finalizers")) or (meta.get("deletionGracePeriodSeconds") or 0) > 0)
        )
        return _with_type(kind, doc) if pending else None

    def delete_collection(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Delete every object of a kind (in `namespace`, matching `label_selector`) in one
        request, as `kubectl delete --all` would object by object."""
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        ns = self._namespace(kind, namespace)
        self._send("DELETE", self.path(kind, ns), query, body=options).read()

    def get_raw(self, path: str) -> bytes:
        """The body of a GET on a path that is not a resource (`/metrics`, `/readyz`)."""
        if not path.startswith("/"):
            raise BadRequest(f"path {path!r}: must start with '/'")
        data: bytes = self._send("GET", path).read()
        return data

    def bind(
        self,
        namespace: str,
        name: str,
        node_name: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        body = binding_body(name, namespace, node_name, annotations)
        path = self.path(_POD, namespace, name, "binding")
        # The answer is a Status (or nothing) on success; it is read and dropped, never
        # decoded into a typed Binding.
        self._send("POST", path, body=body).read()

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        body = eviction_body(name, namespace, grace_period_seconds)
        path = (
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/eviction"
        )
        self._send("POST", path, body=body).read()


class _Failure:
    """Marks the end of a stream in the event queue, carrying the error to raise."""

    __slots__ = ("error",)

    def __init__(self, error: ApiError) -> None:
        self.error = error


def _lines(response: Any) -> Iterator[bytes]:
    buffer = b""
    for chunk in response.stream(65536, decode_content=True):
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class KubeWatch:
    """A watch over HTTP. A thread reads the chunked stream into a queue; when the server
    ends the stream (its timeoutSeconds) or the connection drops, the thread reconnects from
    the last resourceVersion it saw (bookmarks included), so callers see one unbroken
    stream. A 410 from the server ends the watch with `Gone`: the caller re-lists."""

    # reconnect attempts after transport errors before the watch gives up
    MAX_RETRIES = 5

    def __init__(
        self,
        cluster: KubeCluster,
        kind: Kind,
        namespace: str | None,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        allow_bookmarks: bool,
    ) -> None:
        self._cluster = cluster
        self._kind = kind
        self._namespace = namespace
        self.resource_version = resource_version
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._allow_bookmarks = allow_bookmarks
        self._queue: queue.Queue[WatchEvent | _Failure] = queue.Queue()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._failure: ApiError | None = None
        self._user_closed = False
        self.connections = 0  # how many requests this watch has made (reconnects + 1)
        # The first request is made here, so that a bad selector or a stale version fails
        # the call that asked for the watch, as on an in-memory cluster.
        first = self._open()
        self._thread = threading.Thread(
            target=self._run, args=(first,), name=f"watch-{kind.plural}", daemon=True
        )
        self._thread.start()

    def _open(self) -> Any:
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("timeoutSeconds", self._cluster.watch_seconds),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        if self._allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if self._label_selector:
            query.append(("labelSelector", self._label_selector))
        if self._field_selector:
            query.append(("fieldSelector", self._field_selector))
        path = KubeCluster.path(self._kind, self._namespace)
        # the read timeout outlasts the server's own end of the stream
        timeout = (self._cluster.request_timeout, self._cluster.watch_seconds + 30.0)
        self.connections += 1
        response = self._cluster._send("GET", path, query, timeout=timeout)
        with self._lock:
            if self._closed.is_set():
                response.response.release_conn()
                raise _Closed
            self._response = response
        return response

    def _run(self, response: Any) -> None:
        failures = 0
        while not self._closed.is_set():
            try:
                if response is None:
                    response = self._open()
                if self._read(response):
                    return
                failures = 0
            except _Closed:
                return
            except Gone as exc:
                self._queue.put(_Failure(exc))
                return
            except ValueError as exc:  # a line that is not a watch event: a server bug
                error = ApiError(f"malformed watch event from the server: {exc}")
                self._queue.put(_Failure(error))
                return
            except (ApiError, urllib3.exceptions.HTTPError, OSError) as exc:
                if self._closed.is_set():
                    return
                failures += 1
                if isinstance(exc, ApiError) and exc.code < 500 and exc.code != 429:
                    self._queue.put(_Failure(exc))
                    return
                if failures > self.MAX_RETRIES:
                    error = exc if isinstance(exc, ApiError) else ApiError(str(exc))
                    self._queue.put(_Failure(error))
                    return
                self._closed.wait(min(0.2 * 2**failures, 5.0))
            finally:
                if response is not None:
                    with self._lock:
                        if self._response is response:
                            self._response = None
                    response.response.release_conn()
                response = None

    def _read(self, response: Any) -> bool:
        """Deliver the events of one stream; True when the watch must stop."""
        for line in _lines(response.response):
            if self._closed.is_set():
                return True
            event = json.loads(line)
            if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                raise ValueError(line[:200].decode("utf-8", "replace"))
            kind = event.get("type")
            obj = event["object"]
            if kind == "ERROR":
                code = int(obj.get("code") or 500)
                body = json.dumps(obj).encode()
                error = error_from_response(code, body)
                if isinstance(error, Gone):
                    raise error
                self._queue.put(_Failure(error))
                return True
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if kind == "BOOKMARK" and not self._allow_bookmarks:
                continue
            if kind != "BOOKMARK":
                _with_type(self._kind, obj)
            self._queue.put(WatchEvent(cast(EventType, kind), obj))
        return self._closed.is_set()

    def next_events(self, timeout: float = 0.0) -> list[WatchEvent]:
        if self._user_closed:
            return []
        if self._failure is not None:
            raise self._failure
        events: list[WatchEvent] = []
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return events
        while True:
            if isinstance(item, _Failure):
                self._failure = item.error
                self._close_stream()
                if events:
                    return events
                raise item.error
            events.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return events

    def _close_stream(self) -> None:
        self._closed.set()
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            # unblocks the reading thread; the stream may have ended on its own meanwhile
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                response.response.shutdown()

    def close(self) -> None:
        self._user_closed = True
        self._close_stream()
        self._thread.join(timeout=5.0)


class _Closed(Exception):
    """The watch was closed while a request was being opened."""
