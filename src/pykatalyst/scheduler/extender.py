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

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from aiohttp import web

from pykatalyst.api import names
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
        nodes = args.get("Nodes")
        if isinstance(nodes, Mapping):
            items = [n for n in nodes.get("items") or [] if isinstance(n, Mapping)]
            by_name: dict[str, Any] = {}
            for item in items:
                name = str((item.get("metadata") or {}).get("name", ""))
                if name:
                    # the nodes kube-scheduler sends are its freshest view of them
                    self.scheduler.snapshot.upsert_node(item)
                    by_name[name] = item
            return list(by_name), by_name
        names_ = args.get("NodeNames")
        if isinstance(names_, list):
            return [str(n) for n in names_], None
        return [], None

    def _pod(self, args: Mapping[str, Any]) -> PodInfo:
        pod = args.get("Pod")
        if not isinstance(pod, Mapping):
            raise ValueError("ExtenderArgs.Pod is missing or not an object")
        return pod_info(dict(pod))

    # --- verbs ----------------------------------------------------------------------------

    def filter(self, args: Mapping[str, Any], now: float) -> dict[str, Any]:
        self.scheduler.sync(now)
        try:
            pod = self._pod(args)
        except ValueError as exc:
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": str(exc),
            }
        candidates, node_objects = self._candidates(args)
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
        pod = self._pod(args)
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
        snap = self.scheduler.snapshot
        reservation = None
        if node in snap.index:
            result = CycleResult(node, 1, Diagnosis(snap.n), CycleState())
            refused = self.framework.reserve(info, result, snap)
            if refused:
                return {"Error": f"node {node}: {refused}"}
            reservation = result.numa
        snap.assume(info, node, reservation)
        try:
            self.scheduler.cluster.bind(namespace, name, node)
        except ApiError as exc:
            snap.forget_pod(info.uid)
            return {"Error": exc.message}
        return {"Error": ""}


def make_app(service: ExtenderService, now: Callable[[], float]) -> web.Application:
    """An aiohttp app answering `<any prefix>/filter|prioritize|bind`. The runtime serves
    it and adds `/healthz`, `/readyz` and `/metrics`."""

    async def handle(request: web.Request) -> web.Response:
        verb = request.match_info["tail"].rstrip("/").rsplit("/", 1)[-1]
        try:
            body = await request.json()
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, 5000-digit numbers
            return web.json_response({"Error": f"request body is not JSON: {exc}"}, status=400)
        if not isinstance(body, Mapping):
            return web.json_response({"Error": "request body is not a JSON object"}, status=400)
        try:
            if verb == "filter":
                return web.json_response(service.filter(body, now()))
            if verb == "prioritize":
                return web.json_response(service.prioritize(body, now()))
            if verb == "bind":
                return web.json_response(service.bind(body, now()))
        except ValueError as exc:
            return web.json_response({"Error": str(exc)}, status=400)
        return web.json_response(
            {"Error": f"unknown verb {verb!r}; served: filter, prioritize, bind"}, status=404
        )

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    return app
