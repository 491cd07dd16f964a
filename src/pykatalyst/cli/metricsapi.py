"""`katalyst metrics`: the external metrics API (`external.metrics.k8s.io/v1beta1`,
`spd_agg_metrics`) that an APIService registers with kube-apiserver."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import typer

from pykatalyst.api import names as kinds
from pykatalyst.cli.conventions import DURATION, optional_duration
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.listen import listen_address
from pykatalyst.cli.output import print_message
from pykatalyst.cli.webhook import _tls
from pykatalyst.cluster.clock import RealClock
from pykatalyst.metricsapi.authconfig import AuthConfigError, from_cluster, write_ca
from pykatalyst.metricsapi.authz import AccessReviewer
from pykatalyst.metricsapi.server import RequestHeaderAuth
from pykatalyst.runtime.host import ServeError
from pykatalyst.runtime.metricsapi import run_metrics_api

DEFAULT_LISTEN = "127.0.0.1:6443"


def metrics(
    listen: str = typer.Option(
        DEFAULT_LISTEN, "--listen", metavar="HOST:PORT", help="Where the HTTPS server listens."
    ),
    tls_cert_file: Path | None = typer.Option(  # noqa: B008 - typer reads options from defaults
        None, "--tls-cert-file", metavar="FILE", help="Serving certificate (PEM); reloaded."
    ),
    tls_private_key_file: Path | None = typer.Option(  # noqa: B008
        None, "--tls-private-key-file", metavar="FILE", help="Its private key (PEM)."
    ),
    self_signed: Path | None = typer.Option(  # noqa: B008
        None,
        "--self-signed",
        metavar="DIR",
        help="Make (once) and serve a CA + serving pair in DIR; the APIService then needs "
        "that CA as caBundle (or insecureSkipTLSVerify).",
    ),
    cert_hosts: list[str] = typer.Option(  # noqa: B008
        [], "--cert-host", metavar="NAME", help="With --self-signed: a further name or IP."
    ),
    requestheader_client_ca_file: Path | None = typer.Option(  # noqa: B008
        None,
        "--requestheader-client-ca-file",
        metavar="FILE",
        help="The CA of kube-apiserver's proxy client certificate (default: read from "
        "kube-system/extension-apiserver-authentication).",
    ),
    requestheader_allowed_names: str = typer.Option(
        "",
        "--requestheader-allowed-names",
        metavar="NAMES",
        help="Comma-separated common names the proxy certificate may have (default: the "
        "cluster's list; empty: any name signed by the CA).",
    ),
    insecure_no_auth: bool = typer.Option(
        False,
        "--insecure-no-auth",
        help="Development only: serve anyone who reaches the port, without authentication "
        "or authorization.",
    ),
    stop_after: str | None = typer.Option(
        None,
        "--stop-after",
        metavar=DURATION,
        help="Stop after this long, e.g. 30s (default: run until stopped).",
    ),
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Serve spd_agg_metrics (SPD status.aggMetrics: the latest point before now) to the HPA
    through kube-apiserver's aggregation layer, authenticating it by its proxy certificate and
    asking kube-apiserver (SubjectAccessReview) what the user it names may read."""
    address = listen_address(listen)
    hosts = list(dict.fromkeys([*cert_hosts, address[0], "localhost", "127.0.0.1"]))
    clock = RealClock()
    cluster, _ = daemon_cluster(
        "metrics", kubeconfig, in_cluster, context, False, clock, embeddable=False
    )
    auth: RequestHeaderAuth | None = None
    ca = requestheader_client_ca_file
    names = tuple(n for n in requestheader_allowed_names.split(",") if n)
    if not insecure_no_auth:
        if ca is None:
            try:
                found = from_cluster(cluster)
            except AuthConfigError as exc:
                print_message(f"error: {exc}", stderr=True)
                raise typer.Exit(code=1) from None
            ca = write_ca(found, Path(tempfile.mkdtemp(prefix="katalyst-metrics-")))
            names = names or found.allowed_names
            auth = RequestHeaderAuth(
                names, found.username_headers, found.group_headers, found.extra_prefixes
            )
        else:
            auth = RequestHeaderAuth(names)
    authz = None
    if auth is not None:
        # what the named user may do is kube-apiserver's to say (RBAC, or any authorizer)
        authz = AccessReviewer(
            lambda body: cluster.create(kinds.SUBJECT_ACCESS_REVIEW, body), clock.now
        )
    tls = _tls(tls_cert_file, tls_private_key_file, ca, self_signed, hosts)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    def listening() -> None:
        how = (
            "no authentication"
            if auth is None
            else "request-header client certificates, SubjectAccessReview authorization"
        )
        print_message(f"external metrics API on https://{address[0]}:{address[1]} ({how})")

    try:
        run_metrics_api(
            cluster,
            tls,
            clock,
            auth,
            listen=address,
            on_ready=listening,
            max_seconds=optional_duration(stop_after, "--stop-after"),
            authz=authz,
        )
    except ServeError as exc:
        print_message(f"error: --listen {listen}: {exc}", stderr=True)
        raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    app.command(name="metrics")(metrics)
