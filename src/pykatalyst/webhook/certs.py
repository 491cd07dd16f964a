"""Development certificates: a CA and a serving pair signed by it, made with `openssl`
(the `cryptography` package is not among the project's dependencies)."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class CertError(Exception):
    """openssl is missing or failed."""


@dataclass(frozen=True, slots=True)
class CertFiles:
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path


def _run(args: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(
            args, cwd=cwd, capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as exc:
        raise CertError(f"cannot run openssl: {exc}") from None
    if done.returncode != 0:
        raise CertError(f"openssl {args[1]} failed: {done.stderr.strip()}")


def _san(hosts: list[str]) -> str:
    entries = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            entries.append(f"IP:{h}")
        except ValueError:
            entries.append(f"DNS:{h}")
    return ",".join(entries)


def generate(directory: Path, hosts: list[str], days: int = 365) -> CertFiles:
    """Write ca.crt/ca.key and tls.crt/tls.key (for `hosts`: names and IPs) into
    `directory`; the CA's certificate is the caBundle of the webhook configurations."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertError("openssl is not on PATH; install it or pass --tls-cert-file")
    if not hosts:
        raise CertError("at least one host name or IP is needed for the certificate")
    directory.mkdir(parents=True, exist_ok=True)
    files = CertFiles(
        directory / "ca.crt", directory / "ca.key", directory / "tls.crt", directory / "tls.key"
    )
    ext = directory / "tls.ext"
    ext.write_text(
        f"subjectAltName={_san(hosts)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    key_args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run(
        [
            openssl,
            "req",
            "-x509",
            *key_args,
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            str(days),
            "-subj",
            "/CN=katalyst-webhook-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        directory,
    )
    _run(
        [
            openssl,
            "req",
            "-new",
            *key_args,
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            f"/CN={hosts[0]}",
        ],
        directory,
    )
    _run(
        [
            openssl,
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            str(days),
            "-extfile",
            "tls.ext",
        ],
        directory,
    )
    for leftover in ("tls.csr", "tls.ext", "ca.srl"):
        (directory / leftover).unlink(missing_ok=True)
    for key in (files.ca_key, files.key):
        key.chmod(0o600)
    return files


def generate_client(directory: Path, common_name: str, days: int = 365) -> tuple[Path, Path]:
    """Write client.crt/client.key for `common_name`, signed by the CA in `directory` (from
    `generate`), for kube-apiserver to present to a webhook run with `--client-ca-file`."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertError("openssl is not on PATH; install it to make a client certificate")
    if not common_name:
        raise CertError("the client certificate needs a name (its CN), e.g. kube-apiserver")
    if not (directory / "ca.crt").exists() or not (directory / "ca.key").exists():
        raise CertError(f"no CA in {directory}: ca.crt and ca.key are written by generate")
    ext = directory / "client.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    request = ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    request += ["-nodes", "-keyout", "client.key", "-out", "client.csr"]
    _run([openssl, *request, "-subj", f"/CN={common_name}"], directory)
    sign = ["x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key"]
    sign += ["-CAcreateserial", "-out", "client.crt", "-days", str(days)]
    _run([openssl, *sign, "-extfile", "client.ext"], directory)
    for leftover in ("client.csr", "client.ext", "ca.srl"):
        (directory / leftover).unlink(missing_ok=True)
    (directory / "client.key").chmod(0o600)
    return directory / "client.crt", directory / "client.key"
