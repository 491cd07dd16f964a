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


_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _signed(
    openssl: str, directory: Path, name: str, common_name: str, extensions: str, days: int
) -> None:
    """<name>.key and <name>.crt for `common_name` with `extensions`, signed by the CA in
    `directory` (the request, extensions and serial files are removed)."""
    (directory / f"{name}.ext").write_text(extensions)
    request = ["req", "-new", *_NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr"]
    _run([openssl, *request, "-subj", f"/CN={common_name}"], directory)
    sign = ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key"]
    sign += ["-CAcreateserial", "-out", f"{name}.crt", "-days", str(days)]
    _run([openssl, *sign, "-extfile", f"{name}.ext"], directory)
    for leftover in (f"{name}.csr", f"{name}.ext", "ca.srl"):
        (directory / leftover).unlink(missing_ok=True)


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
    ca = ["req", "-x509", *_NEW_KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(days)]
    ca += ["-subj", "/CN=katalyst-webhook-ca", "-addext", "basicConstraints=critical,CA:TRUE"]
    _run([openssl, *ca, "-addext", "keyUsage=critical,keyCertSign,cRLSign"], directory)
    extensions = (
        f"subjectAltName={_san(hosts)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _signed(openssl, directory, "tls", hosts[0], extensions, days)
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
    extensions = (
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _signed(openssl, directory, "client", common_name, extensions, days)
    (directory / "client.key").chmod(0o600)
    return directory / "client.crt", directory / "client.key"
