"""The device plugin over gRPC: one server per resource on a unix socket in the kubelet's
device-plugin directory, registered with the kubelet, and the loop that keeps them so.

The kubelet empties its device-plugin directory when it starts: a socket of ours gone,
or a new `kubelet.sock`, means the kubelet restarted, and the servers start again and
register again. A plugin restarted rebuilds nothing by itself: what containers hold is
read from pod-resources at every answer, so no card is given twice and none is leaked.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

from pykatalyst.agent.deviceplugin import proto
from pykatalyst.agent.deviceplugin.ledger import AllocationRefused
from pykatalyst.agent.deviceplugin.plugin import Advertised, ContainerAnswer
from pykatalyst.agent.host.kubelet import KubeletUnavailable, _protobuf
from pykatalyst.api import names

log = logging.getLogger("pykatalyst.deviceplugin")

SOCKETS = {
    names.RESOURCE_NVIDIA_GPU: "katalyst-gpu.sock",
    names.RESOURCE_GPU_MEMORY: "katalyst-gpu-memory.sock",
}
SRIOV_SOCKETS = {names.RESOURCE_SRIOV_NIC: "katalyst-sriov-nic.sock"}


class Served(Protocol):
    """What a resource server asks of the plugin behind it (GpuPlugin, SriovPlugin)."""

    def poll(self) -> bool: ...

    def advertised(self, resource: str) -> list[Advertised]: ...

    def preferred(self, resource: str, available: Sequence[str], size: int) -> list[str]: ...

    def allocate(self, resource: str, ids: Sequence[str]) -> ContainerAnswer: ...


class ResourceServer:
    """The DevicePlugin service of one resource."""

    def __init__(
        self, plugin: Served, resource: str, socket_dir: str, endpoint: str | None = None
    ) -> None:
        self.plugin = plugin
        self.resource = resource
        self.socket_dir = Path(socket_dir)
        self.endpoint = endpoint or SOCKETS[resource]
        self.path = self.socket_dir / self.endpoint
        self._server: Any = None
        self._cond = threading.Condition()
        self._version = 0
        self._stopped = False
        self.inode: int | None = None

    # --- RPCs ------------------------------------------------------------------------------

    def _options(self, request: Any, context: Any) -> Any:
        return proto.messages()["DevicePluginOptions"](get_preferred_allocation_available=True)

    def _list(self) -> Any:
        m = proto.messages()
        resp = m["ListAndWatchResponse"]()
        for a in self.plugin.advertised(self.resource):
            d = resp.devices.add(ID=a.id, health=proto.HEALTHY if a.healthy else proto.UNHEALTHY)
            if a.numa >= 0:
                d.topology.nodes.add(ID=a.numa)
        return resp

    def _list_and_watch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        while not self._stopped and context.is_active():
            with self._cond:
                if self._version == seen:
                    self._cond.wait(timeout=1.0)
                if self._version == seen:
                    continue
                seen = self._version
            yield self._list()

    def _preferred(self, request: Any, context: Any) -> Any:
        m = proto.messages()
        resp = m["PreferredAllocationResponse"]()
        for c in request.container_requests:
            ids = self.plugin.preferred(
                self.resource, list(c.available_deviceIDs), c.allocation_size
            )
            resp.container_responses.add(deviceIDs=ids)
        return resp

    def _allocate(self, request: Any, context: Any) -> Any:
        grpc = _protobuf("grpc")
        m = proto.messages()
        resp = m["AllocateResponse"]()
        for c in request.container_requests:
            try:
                answer = self.plugin.allocate(self.resource, list(c.devices_ids))
            except AllocationRefused as exc:
                log.warning("refused %s %s: %s", self.resource, list(c.devices_ids), exc)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            out = resp.container_responses.add()
            for k, v in answer.envs.items():
                out.envs[k] = v
            for k, v in answer.annotations.items():
                out.annotations[k] = v
            for inside, host in answer.devices:
                out.devices.add(container_path=inside, host_path=host, permissions="rw")
        return resp

    def _prestart(self, request: Any, context: Any) -> Any:
        return proto.messages()["PreStartContainerResponse"]()

    # --- lifecycle ---------------------------------------------------------------------------

    def notify(self) -> None:
        """The advertised ids changed: every ListAndWatch stream sends them again."""
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    def start(self) -> None:
        grpc = _protobuf("grpc")
        m = proto.messages()
        self.path.unlink(missing_ok=True)

        def unary(fn: Callable[[Any, Any], Any], req: str, resp: str) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=m[req].FromString,
                response_serializer=m[resp].SerializeToString,
            )

        handlers = {
            "GetDevicePluginOptions": unary(self._options, "Empty", "DevicePluginOptions"),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self._list_and_watch,
                request_deserializer=m["Empty"].FromString,
                response_serializer=m["ListAndWatchResponse"].SerializeToString,
            ),
            "GetPreferredAllocation": unary(
                self._preferred, "PreferredAllocationRequest", "PreferredAllocationResponse"
            ),
            "Allocate": unary(self._allocate, "AllocateRequest", "AllocateResponse"),
            "PreStartContainer": unary(
                self._prestart, "PreStartContainerRequest", "PreStartContainerResponse"
            ),
        }
        self._stopped = False
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(proto.DEVICE_PLUGIN, handlers),)
        )
        server.add_insecure_port(f"unix://{self.path}")
        server.start()
        self._server = server
        self.inode = self.path.stat().st_ino

    def stop(self) -> None:
        self._stopped = True
        self.notify()
        if self._server is not None:
            self._server.stop(grace=1).wait()
            self._server = None

    def alive(self) -> bool:
        """Our socket is still there (the kubelet removes it when it restarts)."""
        try:
            return self.path.stat().st_ino == self.inode
        except OSError:
            return False

    def register(self, timeout_s: float = 5.0) -> None:
        grpc = _protobuf("grpc")
        m = proto.messages()
        kubelet = self.socket_dir / proto.KUBELET_SOCKET
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            call = channel.unary_unary(
                f"/{proto.REGISTRATION}/Register",
                request_serializer=m["RegisterRequest"].SerializeToString,
                response_deserializer=m["Empty"].FromString,
            )
            req = m["RegisterRequest"](
                version=proto.VERSION, endpoint=self.endpoint, resource_name=self.resource
            )
            req.options.get_preferred_allocation_available = True
            try:
                call(req, timeout=timeout_s)
            except grpc.RpcError as exc:
                raise KubeletUnavailable(
                    f"registering {self.resource} with {kubelet}: {exc}"
                ) from None


def _kubelet_id(socket_dir: Path) -> tuple[int, int] | None:
    try:
        st = (socket_dir / proto.KUBELET_SOCKET).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class PluginRunner:
    """Serves every resource, re-registers after a kubelet restart, and re-advertises
    when a card's health changes, every `poll_s`, until `stop` is set."""

    def __init__(
        self,
        plugin: Served,
        socket_dir: str,
        poll_s: float,
        sockets: Mapping[str, str] = SOCKETS,
    ) -> None:
        self.plugin = plugin
        self.socket_dir = Path(socket_dir)
        self.poll_s = poll_s
        self.sockets = dict(sockets)
        self.servers = [ResourceServer(plugin, r, socket_dir, e) for r, e in self.sockets.items()]
        self.registrations = 0
        self._kubelet: tuple[int, int] | None = None
        self._up = False
        self._waiting = False

    def step(self) -> str:
        """One round: what happened (for logs and tests)."""
        changed = self.plugin.poll()
        kubelet = _kubelet_id(self.socket_dir)
        if kubelet is None:
            if not self._waiting:
                log.info("waiting for the kubelet's %s", self.socket_dir / proto.KUBELET_SOCKET)
            self._waiting = True
            self._down()
            return "waiting for the kubelet"
        self._waiting = False
        if self._up and kubelet == self._kubelet and all(s.alive() for s in self.servers):
            if changed:
                for s in self.servers:
                    s.notify()
                return "re-advertised"
            return "serving"
        self._down()
        try:
            for s in self.servers:
                s.start()
            for s in self.servers:
                s.register()
        except KubeletUnavailable as exc:
            log.warning("%s; trying again", exc)
            self._down()
            return "registration failed"
        self._kubelet = kubelet
        self._up = True
        self.registrations += 1
        log.info("registered %s with the kubelet", ", ".join(self.sockets))
        return "registered"

    def _down(self) -> None:
        if self._up:
            for s in self.servers:
                s.stop()
        self._up = False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(self.poll_s)
        self._down()
        for s in self.servers:
            if s.path.exists() and s.alive():
                os.unlink(s.path)
