"""The scheduler: informers in, bindings and Events out, one pod per `schedule_one(now)`.

It reads nodes, CNRs and pods through informers over any `Cluster`, keeps the numpy node
snapshot current from their events, and writes only `pods/binding`, the pod's
PodScheduled condition when it cannot be placed, and Events. Time comes from the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    Cluster,
    Conflict,
    EventType,
    NotFound,
)
from pykatalyst.cluster.retry import retry_on_conflict
from pykatalyst.scheduler.config import SchedulerConfig, default_config
from pykatalyst.scheduler.framework import CycleResult, Framework
from pykatalyst.scheduler.podinfo import PodInfo, pod_info
from pykatalyst.scheduler.queue import QueuedPod, RequeueHint, SchedulingQueue
from pykatalyst.scheduler.registry import Registry
from pykatalyst.scheduler.snapshot import NodeSnapshot, NUMAReservation

log = logging.getLogger(__name__)

REASON_UNSCHEDULABLE: Final = "Unschedulable"
EVENT_FAILED_SCHEDULING: Final = "FailedScheduling"
EVENT_SCHEDULED: Final = "Scheduled"
CONDITION_POD_SCHEDULED: Final = "PodScheduled"
# the outcome of a cycle whose bind was sent and has not completed yet
REASON_BINDING: Final = "Binding"


@dataclass(frozen=True, slots=True)
class ScheduleOutcome:
    """What one scheduling attempt did. `node` is None when the pod was not bound."""

    pod: str
    uid: str
    node: str | None
    reason: str = ""
    message: str = ""
    feasible: int = 0
    numa: NUMAReservation | None = None
    # weighted score per plugin of the chosen node (empty when only one node was feasible)
    scores: Mapping[str, int] = dataclasses.field(default_factory=dict)
    profile: str = ""  # the pod's schedulerName


@dataclass(frozen=True, slots=True)
class _Binding:
    """A bind in flight: what releases the pod's node if it fails."""

    entry: QueuedPod
    fw: Framework
    result: CycleResult
    future: futures.Future[None]


def _same_except_binding(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether only the binding/status/version changed: the scheduling inputs did not."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if om.get("labels") != nm.get("labels") or om.get("annotations") != nm.get("annotations"):
        return False
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if os_ is ns_:
        return True
    keys = set(os_) | set(ns_)
    return all(k == "nodeName" or os_.get(k) == ns_.get(k) for k in keys)


class Scheduler:
    def __init__(
        self,
        cluster: Cluster,
        config: SchedulerConfig | None = None,
        *,
        seed: int = 0,
        record_scheduled_events: bool = True,
        percentage_of_nodes_to_score: int | None = None,
        bind_workers: int = 0,
        registry: Registry | None = None,
        share_watched_objects: bool = False,
    ) -> None:
        """`bind_workers` > 0 sends bindings (and their Scheduled Events) from that many
        threads while the next cycles run, as kube-scheduler binds asynchronously; the
        cluster must then be thread-safe (KubeCluster is). 0 binds within the cycle.
        `registry` maps plugin names to their classes (the in-tree registry if None); the
        configuration should have been resolved against the same one.
        `share_watched_objects`: read a MemoryCluster's watches without copies (the
        scheduler never changes what its informers hold; `informer.Informer`'s `shared`)."""
        if bind_workers < 0:
            raise ValueError(f"bind_workers must be >= 0, got {bind_workers}")
        self.cluster = cluster
        self.config = config or default_config(registry)
        pct = (
            percentage_of_nodes_to_score
            if percentage_of_nodes_to_score is not None
            else self.config.percentage_of_nodes_to_score
        )
        self.frameworks: dict[str, Framework] = {
            p.scheduler_name: Framework(p, pct, seed, registry) for p in self.config.profiles
        }
        self.snapshot = NodeSnapshot()
        self.queue = SchedulingQueue(
            self.config.pod_initial_backoff_seconds, self.config.pod_max_backoff_seconds
        )
        self.record_scheduled_events = record_scheduled_events
        self._binder = (
            futures.ThreadPoolExecutor(bind_workers, thread_name_prefix="bind")
            if bind_workers
            else None
        )
        self._in_flight: dict[str, _Binding] = {}
        self._completed: queue.SimpleQueue[str] = queue.SimpleQueue()  # uids, as binds end
        self._now = 0.0
        self._infos: dict[str, PodInfo] = {}
        # one recorder per profile, made here: binder threads record through them too
        self._recorders: dict[str, EventRecorder] = {
            name: EventRecorder(cluster, name) for name in self.frameworks
        }
        shared = share_watched_objects
        self.nodes = Informer(cluster, names.NODE, shared=shared)
        self.cnrs = Informer(cluster, names.CUSTOM_NODE_RESOURCE, shared=shared)
        self.pods = Informer(cluster, names.POD, shared=shared)
        self.nodes.add_handler(self._on_node)
        self.cnrs.add_handler(self._on_cnr)
        self.pods.add_handler(self._on_pod)

    # --- informer events ------------------------------------------------------------------

    def sync(self, now: float) -> int:
        self._now = now
        return self.nodes.sync() + self.cnrs.sync() + self.pods.sync()

    def _on_node(self, etype: EventType, old: JSON | None, new: JSON | None) -> None:
        if etype == "DELETED":
            if old is not None:
                self.snapshot.remove_node(str(old["metadata"]["name"]))
            return
        if new is None:
            return
        name = str((new.get("metadata") or {}).get("name", ""))
        known = name in self.snapshot.index
        static_gen = self.snapshot.static_gen
        if not self.snapshot.upsert_node(new):
            return
        if not known:
            self.queue.move_all_unschedulable(self._now)  # any pod may fit a new node
        else:
            self._wake(name, static=self.snapshot.static_gen != static_gen)

    def _on_cnr(self, etype: EventType, old: JSON | None, new: JSON | None) -> None:
        static_gen = self.snapshot.static_gen
        if etype == "DELETED":
            if old is not None:
                name = str(old["metadata"]["name"])
                self.snapshot.remove_cnr(name)
                if self.snapshot.static_gen != static_gen:
                    self._wake(name, static=True)  # its taints went with it
        elif new is not None and self.snapshot.upsert_cnr(new):
            # a change of reclaimed capacity, NUMA zones or taints can help a waiting pod
            name = str(new["metadata"]["name"])
            self._wake(name, static=self.snapshot.static_gen != static_gen)

    def _wake(self, node: str, static: bool) -> None:
        """Requeue the unschedulable pods a change on `node` can help: its labels, taints or
        schedulability (`static`), or its free resources (always assumed to have grown)."""
        snap = self.snapshot
        slot = snap.index.get(node)

        def helps(entry: QueuedPod) -> bool:
            hint = entry.hint
            if hint is None or hint.any_event or hint.gen != snap.static_gen:
                return True
            if slot is None or slot >= len(hint.fit):
                return slot is not None
            if static and (hint.static[slot] or hint.fit[slot]):
                return True
            return bool(hint.fit[slot]) and hint.needs.met(snap, slot)

        self.queue.move_unschedulable(self._now, helps)

    def _info(self, old: JSON | None, new: JSON) -> PodInfo:
        meta = new.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        cached = self._infos.get(uid)
        if cached is not None and old is not None and _same_except_binding(old, new):
            info = cached.rebound(new)
        else:
            info = pod_info(new)
        self._infos[info.uid] = info
        return info

    def _on_pod(self, etype: EventType, old: JSON | None, new: JSON | None) -> None:
        if etype == "DELETED":
            gone = old or new
            if gone is None:
                return
            uid = str(gone["metadata"].get("uid", ""))
            self._infos.pop(uid, None)
            self.queue.delete(uid)
            rec = self.snapshot.forget_pod(uid)
            if rec is not None:
                self._wake(rec.node, static=False)
            return
        if new is None:
            return
        info = self._info(old, new)
        if info.node_name:
            was_counted = info.uid in self.snapshot.pods
            shrunk = self.snapshot.observe_pod(info)
            self.queue.done(info.uid)
            if shrunk or (was_counted and not info.counts_on_node):
                # it left its node or gave back part of its requests (an in-place resize)
                self._wake(info.node_name, static=False)
            return
        if info.scheduler_name not in self.frameworks or info.terminal or info.deleting:
            self.queue.delete(info.uid)
            return
        if self.snapshot.is_assumed(info.uid):
            return  # our binding is on its way; this is an older view of the pod
        if info.scheduling_gates:
            self.queue.delete(info.uid)
            return
        if info.uid in self.queue and old is not None and _same_except_binding(old, new):
            self.queue.update(info)
            return
        self.queue.add(info, self._now)

    # --- the cycle ------------------------------------------------------------------------

    def schedule_one(self, now: float) -> ScheduleOutcome | None:
        """Sync, then try the next due pod; None when no pod is due."""
        self.sync(now)
        entry = self.queue.pop(now)
        if entry is None:
            return None
        outcome = self._attempt(entry, now)
        return dataclasses.replace(outcome, profile=entry.info.scheduler_name)

    def _attempt(self, entry: QueuedPod, now: float) -> ScheduleOutcome:
        info = entry.info
        fw = self.frameworks.get(info.scheduler_name)
        if fw is None:
            self.queue.delete(info.uid)
            return ScheduleOutcome(info.key, info.uid, None, "NoProfile")
        if info.problem:
            self._unschedulable(entry, fw, info.problem, now)
            return ScheduleOutcome(info.key, info.uid, None, info.problem_reason, info.problem)
        try:
            result = fw.schedule(info, self.snapshot)
        except Exception as exc:  # one malformed pod must not stop the scheduler
            log.exception("pod %s: scheduling cycle failed", info.key)
            self.queue.retry(entry, now)
            return ScheduleOutcome(info.key, info.uid, None, "Error", f"internal error: {exc}")
        if result.node is None:
            message = result.diagnosis.message(info, result.state, self.snapshot)
            hint = result.diagnosis.requeue_hint(info, self.snapshot)
            self._unschedulable(entry, fw, message, now, hint)
            return ScheduleOutcome(info.key, info.uid, None, REASON_UNSCHEDULABLE, message)
        return self._bind(entry, fw, result, now)

    def _bind(
        self, entry: QueuedPod, fw: Framework, result: CycleResult, now: float
    ) -> ScheduleOutcome:
        info = entry.info
        node = result.node
        assert node is not None
        refused = fw.reserve(info, result, self.snapshot)
        if refused:
            message = f"0/{self.snapshot.n} nodes are available: 1 {refused}."
            self._event(info, fw, "Warning", EVENT_FAILED_SCHEDULING, message, now)
            self.queue.retry(entry, now)
            return ScheduleOutcome(info.key, info.uid, None, REASON_UNSCHEDULABLE, message)
        self.snapshot.assume(info, node, result.numa, result.gpu, result.nic, result.vf)
        if self._binder is None:
            try:
                self._bind_call(info, node, fw, now, result.annotations)
            except ApiError as exc:
                return self._bind_done(entry, fw, result, exc, now)
            return self._bind_done(entry, fw, result, None, now)
        # kube-scheduler's binding cycle: the pod stays assumed on its node while the
        # request is in flight, and the next pod's cycle starts at once
        future = self._binder.submit(self._bind_call, info, node, fw, now, result.annotations)
        self._in_flight[info.uid] = _Binding(entry, fw, result, future)
        uid = info.uid
        future.add_done_callback(lambda _: self._completed.put(uid))
        return ScheduleOutcome(
            info.key, info.uid, node, REASON_BINDING, feasible=result.feasible, numa=result.numa
        )

    def _bind_call(
        self,
        info: PodInfo,
        node: str,
        fw: Framework,
        now: float,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """The binding's I/O (on a binder thread when binds run concurrently): what Reserve
        chose for the pod (its GPU cards) goes with the Binding, which kube-apiserver writes
        onto the pod in the same write (no `patch` right needed, no annotation left on a pod
        whose binding failed)."""
        self.cluster.bind(info.namespace, info.name, node, annotations or None)
        if self.record_scheduled_events:
            message = f"Successfully assigned {info.key} to {node}"
            self._event(info, fw, "Normal", EVENT_SCHEDULED, message, now)

    def _bind_done(
        self,
        entry: QueuedPod,
        fw: Framework,
        result: CycleResult,
        error: ApiError | None,
        now: float,
    ) -> ScheduleOutcome:
        info = entry.info
        node = result.node
        if error is None:
            self.queue.done(info.uid)
            return ScheduleOutcome(
                info.key,
                info.uid,
                node,
                EVENT_SCHEDULED,
                feasible=result.feasible,
                numa=result.numa,
                scores=result.scores,
                profile=info.scheduler_name,
            )
        fw.unreserve(info, result, self.snapshot)
        self.snapshot.forget_pod(info.uid)
        message = f"Binding rejected: {error.message}"
        if isinstance(error, NotFound):
            self.queue.delete(info.uid)
        elif isinstance(error, Conflict) and "already assigned" in error.message:
            self.queue.done(info.uid)
        else:
            self._event(info, fw, "Warning", EVENT_FAILED_SCHEDULING, message, now)
            self.queue.retry(entry, now)
        return ScheduleOutcome(
            info.key, info.uid, None, "BindingFailed", message, profile=info.scheduler_name
        )

    def finish_bindings(self, now: float, wait: float = 0.0) -> list[ScheduleOutcome]:
        """The outcomes of the concurrent binds that have completed (waiting up to `wait`
        seconds for all of them); a failed one releases its node and retries."""
        if not self._in_flight:
            return []
        if wait > 0:
            futures.wait([b.future for b in self._in_flight.values()], timeout=wait)
        out: list[ScheduleOutcome] = []
        while True:
            try:
                uid = self._completed.get_nowait()
            except queue.Empty:
                return out
            b = self._in_flight.pop(uid, None)
            if b is None:
                continue
            error = b.future.exception()
            if error is not None and not isinstance(error, ApiError):
                log.error("pod %s: binding failed: %r", b.entry.info.key, error)
                error = ApiError(f"internal error: {error}")
            out.append(self._bind_done(b.entry, b.fw, b.result, error, now))

    @property
    def relists(self) -> dict[str, int]:
        """How often each informer had to list again (its watch fell too far behind)."""
        return {i.kind.plural: i.relists for i in (self.nodes, self.cnrs, self.pods)}

    @property
    def bindings_in_flight(self) -> int:
        return len(self._in_flight)

    def close(self, timeout: float = 30.0) -> list[ScheduleOutcome]:
        """Wait for the binds in flight (up to `timeout`) and stop the binder threads."""
        out = self.finish_bindings(self._now, wait=timeout)
        if self._binder is not None:
            self._binder.shutdown(wait=False, cancel_futures=True)
        return out

    def run_until_idle(self, now: float, max_attempts: int | None = None) -> list[ScheduleOutcome]:
        """Schedule every pod due at `now`; pods in backoff wait for a later `now`. With
        concurrent binds, the outcomes are those of the binds completed meanwhile (a pod
        whose bind is still in flight is reported by a later call)."""
        out: list[ScheduleOutcome] = []
        attempts = 0
        while max_attempts is None or attempts < max_attempts:
            outcome = self.schedule_one(now)
            if outcome is None:
                break
            attempts += 1
            if outcome.reason != REASON_BINDING:
                out.append(outcome)
            out.extend(self.finish_bindings(now))
        out.extend(self.finish_bindings(now))
        return out

    # --- writing back ---------------------------------------------------------------------

    def _unschedulable(
        self,
        entry: QueuedPod,
        fw: Framework,
        message: str,
        now: float,
        hint: RequeueHint | None = None,
    ) -> None:
        info = entry.info
        self.queue.unschedulable(entry, now, hint)
        self._set_condition(info, message, now)
        self._event(info, fw, "Warning", EVENT_FAILED_SCHEDULING, message, now)

    def _set_condition(self, info: PodInfo, message: str, now: float) -> None:
        try:
            retry_on_conflict(lambda attempt: self._write_condition(info, message, now, attempt), 2)
        except Conflict:
            log.info("pod %s: PodScheduled condition not written (conflict)", info.key)

    def _write_condition(self, info: PodInfo, message: str, now: float, attempt: int) -> None:
        # the informer's copy first (no request); a fresh read after a conflict
        cached = self.pods.get(info.name, info.namespace) if attempt == 0 else None
        try:
            pod = (
                dict(cached)
                if cached is not None
                else self.cluster.get(names.POD, info.name, info.namespace)
            )
        except NotFound:
            return
        if (pod.get("spec") or {}).get("nodeName"):
            return
        status = dict(pod.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions") or []]
        current = next((c for c in conditions if c.get("type") == CONDITION_POD_SCHEDULED), None)
        wanted: dict[str, Any] = {
            "type": CONDITION_POD_SCHEDULED,
            "status": "False",
            "reason": REASON_UNSCHEDULABLE,
            "message": message,
        }
        if current is not None and all(current.get(k) == v for k, v in wanted.items()):
            return
        transition = (
            current.get("lastTransitionTime")
            if current is not None and current.get("status") == "False"
            else None
        )
        wanted["lastProbeTime"] = None
        wanted["lastTransitionTime"] = transition or rfc3339(now)
        conditions = [c for c in conditions if c.get("type") != CONDITION_POD_SCHEDULED]
        conditions.append(wanted)
        status["conditions"] = conditions
        pod["status"] = status
        try:
            self.cluster.update_status(names.POD, pod)
        except Conflict:
            raise
        except ApiError as exc:
            log.warning("pod %s: cannot write PodScheduled condition: %s", info.key, exc)

    def _event(
        self, info: PodInfo, fw: Framework, etype: str, reason: str, message: str, now: float
    ) -> None:
        source = fw.profile.scheduler_name
        recorder = self._recorders.get(source)
        if recorder is None:
            recorder = self._recorders[source] = EventRecorder(self.cluster, source)
        ref = ObjectRef.pod(info.key, info.uid, info.resource_version)
        action = "Scheduling" if reason == EVENT_FAILED_SCHEDULING else "Binding"
        recorder.record(ref, etype, reason, message, now, action=action)
