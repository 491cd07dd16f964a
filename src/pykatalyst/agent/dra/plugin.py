"""The kubelet DRA plugin of the driver `dra.katalyst.kubewharf.io`: registered with the
kubelet through a socket in its plugin registration directory, it answers
`NodePrepareResources` and `NodeUnprepareResources` (the `v1.DRAPlugin` service of
Kubernetes 1.34).

Preparing a claim reads its allocation from the API server and answers the devices of
this driver and node the scheduler gave it; what was prepared is checkpointed to a file
before the answer, so a restarted plugin answers the same devices and unprepares what an
earlier run prepared. No CDI device ids are answered: the devices are accounted and
paired by the scheduler, and the container learns its devices from the claim's status.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykatalyst.agent.dra import proto
from pykatalyst.agent.host.kubelet import _protobuf
from pykatalyst.api import names
from pykatalyst.cluster.protocol import ApiError, Cluster

log = logging.getLogger("pykatalyst.dra")
CHECKPOINT_VERSION = 1


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    request: str
    pool: str
    device: str


def allocated_devices(
    claim: Mapping[str, Any], uid: str, driver: str, pool: str
) -> tuple[list[PreparedDevice], str]:
    """The devices of `driver` in `pool` allocated to `claim`, or an error saying why there
    are none to prepare (another claim of that name, no allocation)."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != uid:
        return [], f"the claim now has uid {meta.get('uid')}, not {uid}: it was replaced"
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    )
    if not isinstance(results, list):
        return [], "the claim is not allocated"
    out = [
        PreparedDevice(str(r.get("request", "")), pool, str(r.get("device", "")))
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver and r.get("pool") == pool
    ]
    return out, ""


class Checkpoint:
    """What is prepared, by claim uid, in a JSON file written whole (temp file, rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.load()

    def load(self) -> None:
        try:
            body = json.loads(self.path.read_text())
            claims = body["claims"] if body.get("version") == CHECKPOINT_VERSION else None
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("checkpoint %s unreadable (%s): starting empty", self.path, exc)
            return
        if isinstance(claims, dict):
            self.claims = {str(k): v for k, v in claims.items() if isinstance(v, dict)}

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": CHECKPOINT_VERSION, "claims": self.claims}))
        os.replace(tmp, self.path)

    def get(self, uid: str) -> list[PreparedDevice] | None:
        with self._lock:
            entry = self.claims.get(uid)
        if entry is None:
            return None
        return [PreparedDevice(*d) for d in entry.get("devices", [])]

    def put(self, uid: str, namespace: str, name: str, devices: list[PreparedDevice]) -> None:
        with self._lock:
            self.claims[uid] = {
                "namespace": namespace,
                "name": name,
                "devices": [[d.request, d.pool, d.device] for d in devices],
            }
            self._save()

    def drop(self, uid: str) -> None:
        with self._lock:
            if self.claims.pop(uid, None) is not None:
                self._save()


class Preparer:
    """NodePrepareResources / NodeUnprepareResources, one claim at a time."""

    def __init__(self, node: str, cluster: Cluster, checkpoint: Checkpoint) -> None:
        self.node = node
        self.cluster = cluster
        self.checkpoint = checkpoint

    def prepare(self, namespace: str, name: str, uid: str) -> tuple[list[PreparedDevice], str]:
        done = self.checkpoint.get(uid)
        if done is not None:
            return done, ""
        try:
            claim = self.cluster.get(names.RESOURCE_CLAIM, name, namespace)
        except ApiError as exc:
            return [], f"reading ResourceClaim {namespace}/{name}: {exc}"
        devices, error = allocated_devices(claim, uid, names.DRA_DRIVER, self.node)
        if error:
            return [], error
        self.checkpoint.put(uid, namespace, name, devices)
        log.info("prepared %s/%s: %s", namespace, name, [d.device for d in devices])
        return devices, ""

    def unprepare(self, namespace: str, name: str, uid: str) -> str:
        self.checkpoint.drop(uid)
        log.info("unprepared %s/%s", namespace, name)
        return ""


def _unary(grpc: Any, fn: Callable[[Any, Any], Any], req: Any, resp: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
    )


class DraPluginServer:
    """The DRA service on `<plugin_dir>/<driver>/dra.sock` and the registration service on
    `<registry_dir>/<driver>-reg.sock`, which the kubelet finds and calls."""

    def __init__(self, preparer: Preparer, plugin_dir: str, registry_dir: str) -> None:
        self.preparer = preparer
        self.endpoint = Path(plugin_dir) / names.DRA_DRIVER / "dra.sock"
        self.registration = Path(registry_dir) / f"{names.DRA_DRIVER}-reg.sock"
        self.registered: bool | None = None
        self.registration_error = ""
        self._servers: list[Any] = []

    def _prepare(self, request: Any, context: Any) -> Any:
        resp = proto.dra()["NodePrepareResourcesResponse"]()
        for c in request.claims:
            devices, error = self.preparer.prepare(c.namespace, c.name, c.uid)
            out = resp.claims[c.uid]
            if error:
                out.error = error
            for d in devices:
                out.devices.add(request_names=[d.request], pool_name=d.pool, device_name=d.device)
        return resp

    def _unprepare(self, request: Any, context: Any) -> Any:
        resp = proto.dra()["NodeUnprepareResourcesResponse"]()
        for c in request.claims:
            error = self.preparer.unprepare(c.namespace, c.name, c.uid)
            resp.claims[c.uid].error = error
        return resp

    def _info(self, request: Any, context: Any) -> Any:
        return proto.registration()["PluginInfo"](
            type=proto.PLUGIN_TYPE,
            name=names.DRA_DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=[proto.DRA_VERSION],
        )

    def _status(self, request: Any, context: Any) -> Any:
        self.registered = bool(request.plugin_registered)
        self.registration_error = request.error
        if request.plugin_registered:
            log.info("registered with the kubelet as %s", names.DRA_DRIVER)
        else:
            log.warning("the kubelet refused the registration: %s", request.error)
        return proto.registration()["RegistrationStatusResponse"]()

    def _serve(self, path: Path, service: str, handlers: dict[str, Any]) -> Any:
        grpc = _protobuf("grpc")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        server.add_insecure_port(f"unix://{path}")
        server.start()
        return server

    def start(self) -> None:
        grpc = _protobuf("grpc")
        d, r = proto.dra(), proto.registration()
        dra_handlers = {
            "NodePrepareResources": _unary(
                grpc,
                self._prepare,
                d["NodePrepareResourcesRequest"],
                d["NodePrepareResourcesResponse"],
            ),
            "NodeUnprepareResources": _unary(
                grpc,
                self._unprepare,
                d["NodeUnprepareResourcesRequest"],
                d["NodeUnprepareResourcesResponse"],
            ),
        }
        reg_handlers = {
            "GetInfo": _unary(grpc, self._info, r["InfoRequest"], r["PluginInfo"]),
            "NotifyRegistrationStatus": _unary(
                grpc, self._status, r["RegistrationStatus"], r["RegistrationStatusResponse"]
            ),
        }
        # the DRA endpoint first: the kubelet dials it as soon as it sees the registration
        self._servers = [
            self._serve(self.endpoint, proto.DRA_SERVICE, dra_handlers),
            self._serve(self.registration, proto.REGISTRATION_SERVICE, reg_handlers),
        ]

    def alive(self) -> bool:
        return self.endpoint.exists() and self.registration.exists()

    def stop(self) -> None:
        for s in self._servers:
            s.stop(grace=1).wait()
        self._servers = []
        for p in (self.registration, self.endpoint):
            p.unlink(missing_ok=True)

    def run(self, stop: threading.Event, poll_s: float) -> None:
        """Serve until `stop`; start again when a socket was removed."""
        self.start()
        while not stop.wait(poll_s):
            if not self.alive():
                log.info("a socket of the DRA plugin is gone: serving again")
                self.stop()
                self.start()
        self.stop()
