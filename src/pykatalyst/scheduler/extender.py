"""The kube-scheduler extender protocol over this scheduler's plugins.

A stock kube-scheduler configured with this service as an extender POSTs to
`<urlPrefix>/<verb>`. The JSON keys are the Go field names of
`k8s.io/kube-scheduler/extender/v1` (no json tags, so capitalised): requests carry
`ExtenderArgs{Pod, Nodes, NodeNames}` or `ExtenderBindingArgs{PodName, PodNamespace,
PodUID, Node}`; replies are `ExtenderFilterResult{Nodes, NodeNames, FailedNodes,
FailedAndUnresolvableNodes, Error}`, `HostPriorityList[{Host, Score}]` with scores in
0..10 (kube multiplies them by the extender's weight and by 10), and
`ExtenderBindingResult{Error}`.

`ExtenderService` is plain functions of JSON; `make_app` puts them behind aiohttp.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from aiohttp import web

from pykatalyst.api import names
from pykatalyst.cluster.auth import bearer_middleware
from pykatalyst.cluster.protocol import ApiError, NotFound
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.framework import CycleResult, Diagnosis, Framework
from pykatalyst.scheduler.plugins.base import CycleState
from pykatalyst.scheduler.podinfo import PodInfo, pod_info
from pykatalyst.scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)

# Filters whose rejection no preemption can undo (UnschedulableAndUnresolvable upstream).
UNRESOLVABLE = frozenset(
    {reg.NODE_UNSCHEDULABLE, reg.NODE_NAME, reg.TAINT_TOLERATION, reg.NODE_AFFINITY}
)
NOT_IN_CACHE = "node not found in the extender's node cache"


DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


class NotInCluster(ValueError):
    """A well-formed call about a pod the cluster does not have."""


def filter_error(message: str) -> dict[str, Any]:
    """An ExtenderFilterResult that says why the call could not be answered."""
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": message,
    }


def _error_reply(verb: str, message: str, status: int) -> web.Response:
    body = filter_error(message) if verb == "filter" else {"Error": message}
    return web.json_response(body, status=status)


class ExtenderService:
    def __init__(self, scheduler: Scheduler, profile: str | None = None) -> None:
        self.scheduler = scheduler
        name = profile or scheduler.config.profiles[0].scheduler_name
        if name not in scheduler.frameworks:
            known = ", ".join(scheduler.frameworks)
            raise ValueError(f"no profile named {name!r} in the configuration (have: {known})")
        self.framework: Framework = scheduler.frameworks[name]

    # --- helpers --------------------------------------------------------------------------

    def _candidates(self, args: Mapping[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
        """The candidate node names and, when the caller sent Node objects, those objects
        by name (echoed back for the nodes that pass). The decision always uses this
        scheduler's own cache, filled from the cluster: a caller's node objects never
        overwrite it, so a forged node cannot make later pods fit."""
        nodes = args.get("Nodes")
        if isinstance(nodes, Mapping):
            items = nodes.get("items")
            if items is not None and not isinstance(items, list):
                raise ValueError("ExtenderArgs.Nodes.items is not a list")
            by_name: dict[str, Any] = {}
            for item in items or []:
                if not isinstance(item, Mapping):
                    raise ValueError("ExtenderArgs.Nodes.items holds a non-object")
                meta = item.get("metadata")
                name = meta.get("name") if isinstance(meta, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise ValueError("ExtenderArgs.Nodes.items[].metadata.name is missing")
                by_name[name] = item
            return list(by_name), by_name
        if nodes is not None:
            raise ValueError("ExtenderArgs.Nodes is not a NodeList object")
        names_ = args.get("NodeNames")
        if names_ is None:
            return [], None
        if not isinstance(names_, list) or not all(isinstance(n, str) for n in names_):
            raise ValueError("ExtenderArgs.NodeNames is not a list of node names")
        return list(names_), None

    def _pod(self, args: Mapping[str, Any]) -> PodInfo:
        """The pod as this scheduler's informer knows it: a pod the cluster does not have
        (or has under another uid) is refused."""
        pod = args.get("Pod")
        if not isinstance(pod, Mapping):
            raise ValueError("ExtenderArgs.Pod is missing or not an object")
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            raise ValueError("ExtenderArgs.Pod.metadata.name is missing")
        name, namespace = meta["name"], str(meta.get("namespace") or "default")
        known = self.scheduler.pods.get(name, namespace)
        if known is None:
            raise NotInCluster(f"pod {namespace}/{name} not found in the cluster")
        info = pod_info(dict(known))
        uid = meta.get("uid")
        if uid and info.uid != uid:
            raise NotInCluster(f"pod {namespace}/{name} has uid {info.uid}, not {uid}")
        return info

    # --- verbs ----------------------------------------------------------------------------

    def filter(self, args: Mapping[str, Any], now: float) -> dict[str, Any]:
        self.scheduler.sync(now)
        candidates, node_objects = self._candidates(args)  # ValueError: malformed, a 400
        try:
            pod = self._pod(args)
        except NotInCluster as exc:
            return filter_error(str(exc))
        snap = self.scheduler.snapshot
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passing: list[str] = []
        if pod.problem:
            unresolvable = dict.fromkeys(candidates, pod.problem)
        else:
            state = CycleState()
            alive, diag = self.framework.run_filters(pod, state, snap)
            reasons = diag.node_reasons(pod, state, snap)
            first_plugin: dict[int, str] = {}
            for plugin, idx in diag.rejected:
                for slot in idx.tolist():
                    first_plugin[slot] = plugin.name
            for name in candidates:
                slot = snap.index.get(name)
                if slot is None:
                    failed[name] = NOT_IN_CACHE
                elif diag.pre_filter_message:
                    failed[name] = diag.pre_filter_message
                elif alive[slot]:
                    passing.append(name)
                else:
                    text = ", ".join(reasons.get(slot, ()))
                    if first_plugin.get(slot) in UNRESOLVABLE:
                        unresolvable[name] = text
                    else:
                        failed[name] = text
        result: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if node_objects is not None:
            result["Nodes"] = {
                "apiVersion": "v1",
                "kind": "NodeList",
                "metadata": {},
                "items": [node_objects[n] for n in passing],
            }
        else:
            result["NodeNames"] = passing
        return result

    def prioritize(self, args: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
        self.scheduler.sync(now)
        pod = self._pod(args)  # ValueError: a 400 with {"Error"} (a HostPriorityList has none)
        candidates, _ = self._candidates(args)
        snap = self.scheduler.snapshot
        known = [(n, snap.index[n]) for n in candidates if n in snap.index]
        scores: dict[str, int] = dict.fromkeys(candidates, 0)
        if known and not pod.problem and self.framework.max_total > 0:
            idx = np.array([slot for _, slot in known], np.intp)
            total, _ = self.framework.score(pod, CycleState(), snap, idx)
            scaled = total * reg.MAX_EXTENDER_PRIORITY // self.framework.max_total
            for (name, _), s in zip(known, scaled.tolist(), strict=True):
                scores[name] = int(min(max(s, 0), reg.MAX_EXTENDER_PRIORITY))
        return [{"Host": n, "Score": scores[n]} for n in candidates]

    def bind(self, args: Mapping[str, Any], now: float) -> dict[str, Any]:
        self.scheduler.sync(now)
        name = str(args.get("PodName") or "")
        namespace = str(args.get("PodNamespace") or "")
        uid = str(args.get("PodUID") or "")
        node = str(args.get("Node") or "")
        if not name or not node:
            return {"Error": "ExtenderBindingArgs needs PodName and Node"}
        try:
            raw = self.scheduler.cluster.get(names.POD, name, namespace)
        except NotFound:
            return {"Error": f"pod {namespace}/{name} not found"}
        except ApiError as exc:
            return {"Error": exc.message}
        info = pod_info(raw)
        if uid and info.uid != uid:
            return {"Error": f"pod {namespace}/{name} has uid {info.uid}, not {uid}"}
        bound_to = (raw.get("spec") or {}).get("nodeName")
        if bound_to:
            return {"Error": f"pod {namespace}/{name} is already bound to node {bound_to}"}
        snap = self.scheduler.snapshot
        if node not in snap.index:
            return {"Error": f"node {node} not found in the cluster"}
        result = CycleResult(node, 1, Diagnosis(snap.n), CycleState())
        refused = self.framework.reserve(info, result, snap)
        if refused:
            return {"Error": f"node {node}: {refused}"}
        snap.assume(info, node, result.numa, result.gpu, result.nic, result.vf)
        try:
            self.scheduler.cluster.bind(namespace, name, node, result.annotations or None)
        except ApiError as exc:
            self.framework.unreserve(info, result, snap)
            snap.forget_pod(info.uid)
            return {"Error": exc.message}
        return {"Error": ""}


def make_app(
    service: ExtenderService,
    now: Callable[[], float],
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> web.Application:
    """An aiohttp app answering `<any prefix>/filter|prioritize|bind`. The runtime serves
    it and adds `/healthz`, `/readyz` and `/metrics`. With `token`, every call but the
    probes needs `Authorization: Bearer <token>`. Bodies over `max_body_bytes` get a 413
    with the verb's result type saying so."""

    async def handle(request: web.Request) -> web.Response:
        verb = request.match_info["tail"].rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize", "bind"):
            return web.json_response(
                {"Error": f"unknown verb {verb!r}; served: filter, prioritize, bind"}, status=404
            )
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            message = (
                f"request body is over the extender's limit of {max_body_bytes} bytes "
                "(katalyst scheduler --extender-max-body-bytes)"
            )
            return _error_reply(verb, message, 413)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, 5000-digit numbers
            return _error_reply(verb, f"request body is not JSON: {exc}", 400)
        if not isinstance(body, Mapping):
            return _error_reply(verb, "request body is not a JSON object", 400)
        try:
            if verb == "filter":
                return web.json_response(service.filter(body, now()))
            if verb == "prioritize":
                return web.json_response(service.prioritize(body, now()))
            return web.json_response(service.bind(body, now()))
        except ValueError as exc:
            return _error_reply(verb, str(exc), 400)

    middlewares = [bearer_middleware(token)] if token else []
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app.router.add_post("/{tail:.*}", handle)
    return app
