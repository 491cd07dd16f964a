"""Delegated authorization, as every aggregated API server does it: for each request the
aggregation layer proxies, ask kube-apiserver (a SubjectAccessReview) whether the user it
named may do what the request does, and answer 403 when not.

The request's attributes follow kube-apiserver's own reading of a path: a metric in a
namespace is the verb `list` on the resource `<metric>` of `external.metrics.k8s.io` in that
namespace (what the HPA controller's bootstrap role grants); discovery paths are
non-resource URLs read with `get`. Answers are cached for `ttl_s` (10 s, the
delegated authorizer's default for both outcomes), keyed by the user, its groups and extra,
and the attributes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.api import names
from pykatalyst.cluster.protocol import JSON

GROUP = names.EXTERNAL_METRICS_GROUP
VERSION = names.EXTERNAL_METRICS_VERSION


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the aggregation layer says is calling."""

    user: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Attributes:
    """What the request does: a resource verb (`resource` set) or a non-resource path."""

    verb: str
    path: str = ""
    resource: str = ""
    namespace: str = ""
    group: str = GROUP
    version: str = VERSION

    def review_spec(self) -> JSON:
        if self.resource:
            attrs: JSON = {
                "verb": self.verb,
                "group": self.group,
                "version": self.version,
                "resource": self.resource,
            }
            if self.namespace:
                attrs["namespace"] = self.namespace
            return {"resourceAttributes": attrs}
        return {"nonResourceAttributes": {"verb": self.verb, "path": self.path}}

    def refusal(self, user: str) -> str:
        """kube-apiserver's wording of a refusal."""
        if self.resource:
            where = (
                f" in the namespace {self.namespace!r}"
                if self.namespace
                else " at the cluster scope"
            )
            return (
                f"{self.resource}.{self.group} is forbidden: User {user!r} cannot {self.verb} "
                f"resource {self.resource!r} in API group {self.group!r}{where}"
            )
        return f"forbidden: User {user!r} cannot {self.verb} path {self.path!r}"


def attributes(method: str, path: str) -> Attributes:
    """The attributes kube-apiserver would authorize for this request to the metrics API."""
    verb = {"GET": "get", "HEAD": "get"}.get(method.upper(), method.lower())
    prefix = f"/apis/{GROUP}/{VERSION}/namespaces/"
    if path.startswith(prefix):
        parts = path[len(prefix) :].strip("/").split("/")
        if len(parts) == 2 and all(parts):
            # a GET of the collection of one metric: kube-apiserver's "list"
            return Attributes(
                "list" if verb == "get" else verb, resource=parts[1], namespace=parts[0]
            )
    return Attributes(verb, path=path)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


def review_body(caller: Caller, attrs: Attributes) -> JSON:
    spec: JSON = {"user": caller.user, "groups": list(caller.groups), **attrs.review_spec()}
    if caller.extra:
        spec["extra"] = {k: list(v) for k, v in caller.extra}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def decision(reviewed: Mapping[str, Any]) -> Decision:
    status = reviewed.get("status") or {}
    allowed = bool(status.get("allowed")) and not status.get("denied")
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return Decision(allowed, reason)


Submit = Callable[[JSON], JSON]


@dataclass
class AccessReviewer:
    """Asks kube-apiserver through `submit` (a create of a SubjectAccessReview) and caches
    each answer for `ttl_s` by the injected clock. An ApiError from `submit` propagates:
    the caller answers 500, as kube-apiserver's own filter does when authorization fails."""

    submit: Submit
    now: Callable[[], float]
    ttl_s: float = 10.0
    max_entries: int = 4096
    _cache: OrderedDict[tuple[Caller, Attributes], tuple[float, Decision]] = field(
        default_factory=OrderedDict
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)
    reviews: int = 0  # SubjectAccessReviews sent (for tests and the log)

    def review(self, caller: Caller, attrs: Attributes) -> Decision:
        key = (caller, attrs)
        now = self.now()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        got = decision(self.submit(review_body(caller, attrs)))
        with self._lock:
            self.reviews += 1
            self._cache[key] = (now, got)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return got
