"""`katalyst`: the command line. Commands are thin; the logic lives in the components."""

from __future__ import annotations

import typer

from pykatalyst import __version__

app = typer.Typer(
    name="katalyst",
    help="pykatalyst: QoS-aware colocation for shared Kubernetes clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pykatalyst {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """pykatalyst: QoS-aware colocation for shared Kubernetes clusters."""


def _register_commands() -> None:
    # Each command module adds its commands to `app`; keep this list sorted.
    from pykatalyst.cli import (
        agent,
        apiserver,
        controller,
        device_plugin,
        dra_plugin,
        explain,
        metricsapi,
        recommend,
        scheduler,
        sim,
        validate,
        webhook,
    )

    for module in (
        agent,
        apiserver,
        controller,
        device_plugin,
        dra_plugin,
        explain,
        metricsapi,
        recommend,
        scheduler,
        sim,
        validate,
        webhook,
    ):
        module.register(app)


_register_commands()
