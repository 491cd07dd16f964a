"""`katalyst apiserver`: serve the embedded cluster over the Kubernetes REST API, so that
`kubectl` and `--kubeconfig` runs of the other commands can use it. A local development and
test server: no TLS; beyond loopback it requires a bearer token (`--token-file`, else one
it generates and prints)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml

from pykatalyst.api.names import CRD
from pykatalyst.api.yamlio import load_yaml_all
from pykatalyst.apiserver.http import DEFAULT_MAX_BODY_BYTES, kubeconfig_for
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.conventions import DURATION, LISTEN, old_option, parse_duration
from pykatalyst.cli.listen import parse_listen
from pykatalyst.cli.output import print_message
from pykatalyst.cluster.auth import is_loopback, load_token, new_token
from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.protocol import AlreadyExists, ApiError
from pykatalyst.runtime.apiserver import ApiServer, save_snapshot
from pykatalyst.runtime.host import ServeError


def load_state(path: Path) -> MemoryCluster:
    clock = RealClock()
    if not path.exists():
        return MemoryCluster(clock=clock)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--state {path}: cannot read a cluster snapshot: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("kinds"), list):
        raise ValueError(f"--state {path}: not a cluster snapshot (no 'kinds' list)")
    try:
        return MemoryCluster.from_snapshot(data, clock=clock)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"--state {path}: damaged snapshot: {exc}") from None


def save_state(cluster: MemoryCluster, path: Path) -> None:
    """Write atomically and durably (see `runtime.apiserver.save_snapshot`)."""
    save_snapshot(cluster, path)


def install_crds(cluster: MemoryCluster, path: Path) -> list[str]:
    """Create the CRDs found in a YAML file or a folder of them; returns the names created."""
    files = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"--crds {path}: no YAML files there")
    created: list[str] = []
    for file in files:
        try:
            docs = load_yaml_all(file.read_text(), str(file))
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"--crds {file}: {exc}") from None
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != CRD.kind:
                continue
            try:
                cluster.create(CRD, doc)
            except AlreadyExists:
                continue
            except ApiError as exc:
                raise ValueError(f"--crds {file}: {exc}") from None
            created.append(str(doc["metadata"]["name"]))
    return created


def apiserver(
    listen: Annotated[
        str,
        typer.Option("--listen", metavar=LISTEN, help="Where to serve (port 0: pick a free one)."),
    ] = "127.0.0.1:8080",
    state: Annotated[
        Path | None,
        typer.Option(
            "--state",
            help="Load the cluster from this snapshot file if it exists; save it there "
            "(fsync'd) within a second of every change, and on exit.",
        ),
    ] = None,
    write_kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--write-kubeconfig",
            help="Write a kubeconfig for this server here (for kubectl and --kubeconfig).",
        ),
    ] = None,
    crds: Annotated[
        Path | None,
        typer.Option(
            "--crds",
            help="Install the CustomResourceDefinitions in this file or folder (e.g. "
            "deploy/crds) before serving; ones already present are kept.",
        ),
    ] = None,
    bookmark_interval: Annotated[
        str,
        typer.Option(
            "--bookmark-interval",
            metavar=DURATION,
            help="How often watches that asked for bookmarks get one.",
        ),
    ] = "1m",
    old_bookmark_seconds: Annotated[
        str | None, old_option("apiserver", "--bookmark-seconds")
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Require 'Authorization: Bearer <the token in this file>'. Off loopback "
            "a token is always required: without this file one is generated and printed.",
        ),
    ] = None,
    max_request_bytes: Annotated[
        int,
        typer.Option(
            "--max-request-bytes",
            min=1024,
            help="The largest request body accepted (413 beyond), as kube-apiserver's flag.",
        ),
    ] = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve the embedded cluster over HTTP (local development and tests)."""
    bookmark_seconds = parse_duration(
        old_bookmark_seconds or bookmark_interval, "--bookmark-interval"
    )
    try:
        token = load_token(token_file) if token_file is not None else None
        host, port = parse_listen(listen)
        cluster = load_state(state) if state is not None else MemoryCluster(clock=RealClock())
        installed = install_crds(cluster, crds) if crds is not None else []
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(2) from None
    generated = token is None and not is_loopback(host)
    if generated:
        token = new_token()
    server = ApiServer(
        cluster,
        host,
        port,
        bookmark_seconds=bookmark_seconds,
        finalize_pods=True,
        token=token,
        state=state,
        max_body_bytes=max_request_bytes,
    )

    def ready() -> None:
        print_message(f"serving the embedded cluster at {server.url}")
        if installed:
            print_message(f"installed CRDs: {', '.join(installed)}")
        if write_kubeconfig is not None:
            write_kubeconfig.write_text(yaml.safe_dump(kubeconfig_for(server.url, token=token)))
            write_kubeconfig.chmod(0o600)  # it may hold the token
            print_message(f"kubeconfig: {write_kubeconfig}")
        print_message(f"try: kubectl --server {server.url} get pods,nodes -A")
        if generated:
            print_message(f"bearer token (generated; required on every request): {token}")
        elif token is not None:
            print_message(f"bearer token required (from {token_file})")
        else:
            print_message("no authentication: loopback only")
        if state is not None:
            print_message(f"saving the cluster to {state} within a second of each change")
        sys.stdout.flush()

    try:
        server.run(ready)
    except ServeError as exc:
        print_message(f"error: --listen {listen}: {exc}", stderr=True)
        raise typer.Exit(1) from None
    if state is not None:
        print_message(f"saved the cluster to {state}")


def register(app: typer.Typer) -> None:
    app.command("apiserver")(apiserver)
