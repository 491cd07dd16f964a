"""The admission chain as the API server runs it: the mutating plugins, each seeing the
previous one's result, then the validating ones, on every write. What a plugin is asked and
answers is `cluster/admission.py`."""

from __future__ import annotations

from collections.abc import Callable

from pykatalyst.api.names import Kind
from pykatalyst.apiserver.ingest import ingest
from pykatalyst.cluster.admission import (
    AdmissionPlugin,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionResult,
    Operation,
)
from pykatalyst.cluster.patch import PatchError, copy_json, json_patch
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    Forbidden,
    Invalid,
    TooManyRequests,
)


class AdmissionChain:
    """Mutating plugins, in the order added, each seeing the previous one's result; then
    validating plugins. Plugins get copies, so a plugin can never reach into the store."""

    def __init__(self, uid: Callable[[], str]) -> None:
        self._uid = uid
        self.mutating: list[tuple[str, AdmissionPlugin]] = []
        self.validating: list[tuple[str, AdmissionPlugin]] = []

    def add_mutating(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        self.mutating.append((name or str(getattr(fn, "__name__", "mutating")), fn))

    def add_validating(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        self.validating.append((name or str(getattr(fn, "__name__", "validating")), fn))

    def clear(self) -> None:
        self.mutating.clear()
        self.validating.clear()

    def admit(
        self,
        kind: Kind,
        operation: Operation,
        obj: JSON | None,
        old: JSON | None,
        name: str,
        namespace: str,
        sub_resource: str = "",
    ) -> JSON | None:
        """The (possibly mutated) object, or the denial raised as its ApiError."""
        if not self.mutating and not self.validating:
            return obj

        def request(current: JSON | None) -> AdmissionRequest:
            return AdmissionRequest(
                uid=self._uid(),
                kind=kind,
                operation=operation,
                name=name,
                namespace=namespace,
                object=copy_json(current),
                old_object=copy_json(old),
                sub_resource=sub_resource,
            )

        for plugin_name, plugin in self.mutating:
            obj = _mutated(plugin_name, plugin(request(obj)), obj)
        for plugin_name, plugin in self.validating:
            _check_verdict(plugin_name, plugin(request(obj)))
        return obj


def _check_verdict(plugin_name: str, result: AdmissionResult) -> None:
    if not isinstance(result, AdmissionResponse) or result.allowed:
        return
    msg = f'admission webhook "{plugin_name}" denied the request: {result.message}'
    errors: dict[int, type[ApiError]] = {
        422: Invalid,
        429: TooManyRequests,
        400: BadRequest,
        403: Forbidden,
    }
    error = errors.get(result.code)
    if error is not None:
        raise error(msg)
    raise ApiError(msg, "InternalError" if result.code >= 500 else "Forbidden", result.code)


def _mutated(plugin_name: str, result: AdmissionResult, obj: JSON | None) -> JSON | None:
    """What a mutating plugin's answer makes of `obj`."""
    _check_verdict(plugin_name, result)
    if result is None:
        return obj
    patch = result.patch if isinstance(result, AdmissionResponse) else None
    if isinstance(result, list):
        patch = result
    elif isinstance(result, dict):
        mutated = ingest(result)
        if not isinstance(mutated.get("metadata"), dict):
            raise ApiError(
                f'admission webhook "{plugin_name}" returned an object without metadata',
                "InternalError",
                500,
            )
        return dict(mutated)
    if patch and obj is not None:
        try:
            return dict(json_patch(obj, patch))
        except PatchError as e:
            raise ApiError(
                f'admission webhook "{plugin_name}" returned a patch that does not apply: {e}',
                "InternalError",
                500,
            ) from None
    return obj
