"""Who may call a component's server: HTTPS, client certificates, bearer tokens."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from pykatalyst.cluster.auth import bearer_middleware, load_token, server_ssl_context

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _pki(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", "san.ext",
                 "-out", f"{who}.crt", cwd=d)  # fmt: skip


@pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command to make certificates")
def test_https_with_a_client_ca_admits_only_signed_clients(tmp_path: Path) -> None:
    _pki(tmp_path)
    ctx = server_ssl_context(tmp_path / "server.crt", tmp_path / "server.key", tmp_path / "ca.crt")
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="in")

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/x", ok)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = runner.addresses[0][1]
        url = f"https://127.0.0.1:{port}/x"
        trust = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        try:
            async with aiohttp.ClientSession() as s:
                with pytest.raises(aiohttp.ClientError):
                    async with s.get(url, ssl=trust) as resp:
                        await resp.text()
                trust.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
                async with s.get(url, ssl=trust) as resp:
                    assert await resp.text() == "in"
        finally:
            await runner.cleanup()

    asyncio.run(run())


def test_tls_flags_are_checked_together(tmp_path: Path) -> None:
    assert server_ssl_context(None, None) is None
    with pytest.raises(ValueError, match="go together"):
        server_ssl_context(tmp_path / "a.crt", None)
    with pytest.raises(ValueError, match="--client-ca-file needs"):
        server_ssl_context(None, None, tmp_path / "ca.crt")
    with pytest.raises(ValueError, match="cannot load the key pair"):
        server_ssl_context(tmp_path / "a.crt", tmp_path / "a.key")


def test_a_token_file_must_hold_a_token(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        load_token(f)
    f.write_text("abc\n")
    assert load_token(f) == "abc"
    with pytest.raises(ValueError, match="cannot read"):
        load_token(tmp_path / "none")


def test_bearer_middleware_leaves_only_the_probes_open() -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="in")

    async def run() -> None:
        app = web.Application(middlewares=[bearer_middleware("t0k")])
        app.router.add_get("/{p:.*}", ok)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{base}/api/v1/pods") as resp:
                    assert resp.status == 401
                async with s.get(f"{base}/readyz") as resp:
                    assert resp.status == 200
                hdr = {"Authorization": "Bearer t0k"}
                async with s.get(f"{base}/api/v1/pods", headers=hdr) as resp:
                    assert resp.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(run())
