"""`katalyst webhook`: the HTTPS admission server (pods: validate and mutate; nodes/status:
overcommit)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from pykatalyst.cli.conventions import DURATION, old_option, optional_duration
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    EMBEDDED_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.listen import listen_address
from pykatalyst.cli.output import print_message
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime.host import ServeError
from pykatalyst.runtime.webhook import run_webhook
from pykatalyst.webhook.certs import CertError, generate, generate_client
from pykatalyst.webhook.server import TLSError, TLSFiles
from pykatalyst.webhook.service import MUTATE_NODES, MUTATE_PODS, VALIDATE_PODS, WebhookService

# Only kube-apiserver should reach the webhook: it listens beyond this machine when told to
# (deploy/ passes --listen=0.0.0.0:9443 behind its Service).
DEFAULT_LISTEN = "127.0.0.1:9443"


def _self_signed(directory: Path, hosts: list[str], client_cert: str | None) -> None:
    """Make (once) the CA and serving pair, and the client pair when asked for."""
    try:
        if not (directory / "tls.crt").exists() or not (directory / "tls.key").exists():
            files = generate(directory, hosts)
            print_message(f"wrote a CA and serving pair to {directory} (caBundle: {files.ca_cert})")
        if client_cert is not None and not (directory / "client.crt").exists():
            crt, _ = generate_client(directory, client_cert)
            print_message(f"wrote a client pair for {client_cert!r} signed by the CA: {crt}")
    except CertError as exc:
        print_message(f"error: --self-signed {directory}: {exc}", stderr=True)
        raise typer.Exit(code=1) from None


def _tls(
    cert: Path | None,
    key: Path | None,
    client_ca: Path | None,
    self_signed: Path | None,
    hosts: list[str],
    client_cert: str | None = None,
) -> TLSFiles:
    if self_signed is not None and cert is None and key is None:
        _self_signed(self_signed, hosts, client_cert)
        cert, key = self_signed / "tls.crt", self_signed / "tls.key"
    if cert is None or key is None:
        print_message(
            "error: --tls-cert-file and --tls-private-key-file are required "
            "(or --self-signed DIR for development)",
            stderr=True,
        )
        raise typer.Exit(code=2)
    try:
        return TLSFiles(cert, key, client_ca)
    except TLSError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None


def webhook(
    listen: str = typer.Option(
        DEFAULT_LISTEN, "--listen", metavar="HOST:PORT", help="Where the HTTPS server listens."
    ),
    tls_cert_file: Path | None = typer.Option(  # noqa: B008 - typer reads options from defaults
        None,
        "--tls-cert-file",
        metavar="FILE",
        help="Serving certificate (PEM); reloaded when it changes.",
    ),
    tls_private_key_file: Path | None = typer.Option(  # noqa: B008
        None, "--tls-private-key-file", metavar="FILE", help="Its private key (PEM)."
    ),
    client_ca_file: Path | None = typer.Option(  # noqa: B008
        None,
        "--client-ca-file",
        metavar="FILE",
        help="Require on admission routes a client certificate signed by this CA.",
    ),
    self_signed: Path | None = typer.Option(  # noqa: B008
        None,
        "--self-signed",
        metavar="DIR",
        help="Development: make (once) and serve a CA + serving pair in DIR (openssl).",
    ),
    cert_hosts: list[str] = typer.Option(  # noqa: B008
        [],
        "--cert-host",
        metavar="NAME",
        help="With --self-signed: a further name or IP for the certificate (repeatable), "
        "e.g. katalyst-webhook.katalyst-system.svc.",
    ),
    certs_only: bool = typer.Option(
        False, "--certs-only", help="With --self-signed: write the pair and exit."
    ),
    client_cert: str | None = typer.Option(
        None,
        "--client-cert",
        metavar="NAME",
        help="With --self-signed: also write client.crt/client.key for NAME, signed by the "
        "CA, for kube-apiserver to present (pair with --client-ca-file DIR/ca.crt).",
    ),
    stop_after: str | None = typer.Option(
        None,
        "--stop-after",
        metavar=DURATION,
        help="Stop after this long (default: run until stopped).",
    ),
    old_max_seconds: Annotated[str | None, old_option("webhook", "--max-seconds")] = None,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
    embedded: bool = EMBEDDED_OPTION,
) -> None:
    """Admission webhooks with Katalyst's semantics: refuse pods with QoS declarations no node
    can run (warn of what Katalyst ignores), set the SPD reference, and apply the node
    overcommit ratios to nodes/status."""
    address = listen_address(listen)
    stop_s = optional_duration(old_max_seconds or stop_after, "--stop-after")
    hosts = list(dict.fromkeys([*cert_hosts, address[0], "localhost", "127.0.0.1"]))
    for flag, given in (("--certs-only", certs_only), ("--client-cert", client_cert is not None)):
        if given and self_signed is None:
            print_message(f"error: {flag} needs --self-signed DIR", stderr=True)
            raise typer.Exit(code=2)
    tls = _tls(tls_cert_file, tls_private_key_file, client_ca_file, self_signed, hosts, client_cert)
    if certs_only:
        return
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    clock = RealClock()
    cluster, _ = daemon_cluster("webhook", kubeconfig, in_cluster, context, embedded, clock)
    service = WebhookService(cluster)

    def listening() -> None:
        routes = ", ".join((VALIDATE_PODS, MUTATE_PODS, MUTATE_NODES))
        print_message(f"webhook listening on https://{address[0]}:{address[1]} ({routes})")

    try:
        run_webhook(service, tls, clock, listen=address, on_ready=listening, max_seconds=stop_s)
    except ServeError as exc:
        print_message(f"error: --listen {listen}: {exc}", stderr=True)
        raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    app.command(name="webhook")(webhook)
