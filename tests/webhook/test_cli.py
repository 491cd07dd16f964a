"""`katalyst webhook` options: what it refuses and what --self-signed --certs-only writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pykatalyst.cli.main import app


def test_serving_needs_a_pair() -> None:
    result = CliRunner().invoke(app, ["webhook", "--stop-after", "0s"])
    assert result.exit_code == 2
    assert "--tls-cert-file" in result.output


def test_a_pair_that_does_not_load_is_refused_naming_the_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    args = ["webhook", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert str(cert) in result.output


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_certs_only_writes_a_pair_for_the_service_name_signed_by_the_ca(tmp_path: Path) -> None:
    svc = "katalyst-webhook.katalyst-system.svc"
    args = ["webhook", "--self-signed", str(tmp_path), "--cert-host", svc, "--certs-only"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    text = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"DNS:{svc}" in text and "IP Address:127.0.0.1" in text
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o600"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_client_cert_writes_a_client_pair_the_ca_verifies_for_client_auth(tmp_path: Path) -> None:
    args = ["webhook", "--self-signed", str(tmp_path), "--client-cert", "kube-apiserver"]
    result = CliRunner().invoke(app, [*args, "--certs-only"])
    assert result.exit_code == 0, result.output
    ca, crt = str(tmp_path / "ca.crt"), str(tmp_path / "client.crt")
    verify = subprocess.run(
        ["openssl", "verify", "-purpose", "sslclient", "-CAfile", ca, crt],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "client.crt"), "-noout", "-subject"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "CN = kube-apiserver" in subject or "CN=kube-apiserver" in subject
    assert oct((tmp_path / "client.key").stat().st_mode & 0o777) == "0o600"


def test_client_cert_needs_self_signed() -> None:
    result = CliRunner().invoke(app, ["webhook", "--client-cert", "kube-apiserver"])
    assert result.exit_code == 2 and "--client-cert needs --self-signed" in result.output
