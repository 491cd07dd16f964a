"""Who may call a component's HTTP server: a bearer token, TLS, client certificates.

`bearer_middleware(token)` answers 401 to a request without `Authorization: Bearer
<token>` (compared in constant time); the probe paths stay open so a kubelet can check
liveness without credentials. `new_server_context` is the one TLS context every HTTPS
server here starts from, and `trust_clients` adds client-certificate checks against a CA;
`server_ssl_context` builds a server's from its files: with a client CA it requires a
client certificate signed by that CA, as kube-scheduler's extender `tlsConfig`
(certFile/keyFile) presents. The webhook and metrics APIs build theirs the same way and
reload the pair when it changes (`webhook/server.py`).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Unauthorized = Callable[[str], web.StreamResponse]


def load_token(path: Path) -> str:
    """The first line of a token file; an empty or unreadable file is an error."""
    try:
        token = path.read_text().strip().splitlines()
    except OSError as exc:
        raise ValueError(f"--token-file {path}: cannot read it: {exc}") from None
    if not token or not token[0].strip():
        raise ValueError(f"--token-file {path}: the file is empty (expected one token)")
    return token[0].strip()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _plain_unauthorized(message: str) -> web.StreamResponse:
    return web.json_response({"Error": message}, status=401)


def bearer_middleware(token: str, unauthorized: Unauthorized = _plain_unauthorized) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.rstrip("/") in OPEN_PATHS:
            return await handler(request)
        given = request.headers.get("Authorization", "").encode()
        if not given:
            return unauthorized("Unauthorized: no bearer token (Authorization: Bearer <token>)")
        if not hmac.compare_digest(given, expected):
            return unauthorized("Unauthorized: the bearer token is not valid")
        return await handler(request)

    return check


class TLSError(ValueError):
    """A certificate, key or CA file cannot be loaded; the message names the file."""


def new_server_context() -> ssl.SSLContext:
    """The TLS context every HTTPS server here starts from: server side, TLS 1.2 or later."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def trust_clients(ctx: ssl.SSLContext, client_ca_file: Path, *, required: bool = True) -> None:
    """Verify client certificates against `client_ca_file`: required at the handshake, or
    (not `required`) checked when one is given, so probes connect and the routes decide."""
    try:
        ctx.load_verify_locations(cafile=str(client_ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise TLSError(f"--client-ca-file {client_ca_file}: {exc}") from None
    ctx.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL


def server_ssl_context(
    cert_file: Path | None, key_file: Path | None, client_ca_file: Path | None = None
) -> ssl.SSLContext | None:
    """None without a certificate; an error when only half a key pair, or a client CA
    without a serving certificate, is given."""
    if cert_file is None and key_file is None:
        if client_ca_file is not None:
            raise ValueError("--client-ca-file needs --tls-cert-file and --tls-private-key-file")
        return None
    if cert_file is None or key_file is None:
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    ctx = new_server_context()
    try:
        ctx.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise TLSError(f"--tls-cert-file {cert_file}: cannot load the key pair: {exc}") from None
    if client_ca_file is not None:
        trust_clients(ctx, client_ca_file)
    return ctx
