"""The wire form of the embedded API server's answers: JSON as kube-apiserver reads and
writes it, `Status` bodies for errors, and the lines of a watch stream."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from pykatalyst.cluster.protocol import JSON, ApiError


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes | str) -> Any:
    """JSON as kube-apiserver's decoder reads it: NaN and Infinity are refused."""
    return json.loads(raw, parse_constant=_refuse_constant)


class UnsupportedMediaType(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(message, "UnsupportedMediaType", 415)


def status_body(code: int, message: str = "", details: Mapping[str, Any] | None = None) -> JSON:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if details:
        body["details"] = dict(details)
    return body


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(doc), status=status, content_type="application/json")


def error_response(error: ApiError) -> web.Response:
    headers = {}
    if error.retry_after_seconds is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after_seconds)))
    return web.Response(
        body=dumps(error.status()),
        status=error.code,
        content_type="application/json",
        headers=headers,
    )


def unauthorized(message: str) -> web.Response:
    return error_response(ApiError(message, "Unauthorized", 401))


async def write_event(response: web.StreamResponse, etype: str, obj: JSON) -> None:
    """One line of a watch stream."""
    await response.write(dumps({"type": etype, "object": obj}) + b"\n")
