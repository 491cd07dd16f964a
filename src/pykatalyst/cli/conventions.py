"""The command line's conventions, and the helpers that keep every command to them.

- One spelling per concept: what a daemon serves (health, metrics, an API) listens at
  `--listen HOST:PORT`; time between passes is `--interval`; `--stop-after` ends a run.
- Durations in Go form (`--interval 2s`, `--lease-duration 15s`), metavar `DURATION`; a bare
  number of seconds is still read, with a deprecation warning.
- `--leader-elect/--no-leader-elect`, on by default, on every daemon that elects.
- `-o/--output` only for output formats (table, json).
- Daemons (commands that serve, run against a cluster until stopped, or loop) take `--once`
  and `--dry-run`, or `LOOP_EXEMPTIONS` says why not.
- Old spellings stay for a release as hidden options listed in `DEPRECATED`, each warning
  when used (`deprecated_option`).

`tests/cli/test_conventions.py` walks every command of `katalyst` and checks these, so a
command added later is held to them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from pykatalyst.api import duration
from pykatalyst.cli.listen import parse_listen
from pykatalyst.cli.output import print_message

DURATION = "DURATION"
LISTEN = "HOST:PORT"
NOT_SERVED = "none"


@dataclass(frozen=True, slots=True)
class Deprecated:
    """An old spelling kept for a release: `old` on `command`, and what replaces it."""

    command: str
    old: str
    new: str
    example: str  # a value the old option accepts ("" for a flag)


DEPRECATED: tuple[Deprecated, ...] = (
    Deprecated("agent", "--port", "--listen HOST:PORT", "9316"),
    Deprecated("agent", "--bind-address", "--listen HOST:PORT", "0.0.0.0"),
    Deprecated("controller", "--metrics-port", "--listen HOST:PORT", "9090"),
    Deprecated("controller", "--metrics-address", "--listen HOST:PORT", "0.0.0.0"),
    Deprecated("controller", "--period", "--interval DURATION", "30s"),
    Deprecated("scheduler", "--max-seconds", "--stop-after DURATION", "10"),
    Deprecated("webhook", "--max-seconds", "--stop-after DURATION", "10"),
    Deprecated("apiserver", "--bookmark-seconds", "--bookmark-interval DURATION", "60"),
    Deprecated("recommend", "--history-days", "--history DURATION", "8"),
    Deprecated("sim", "-o", "--out/-d DIR (-o is for output formats)", "out"),
    Deprecated("demo", "-o", "--out/-d DIR (-o is for output formats)", "out"),
)

# Daemons without --once or --dry-run, and why.
LOOP_EXEMPTIONS: dict[tuple[str, str], str] = {
    ("metrics", "--once"): (
        "it serves the external metrics API to the HPA until stopped: there is no pass to run "
        "once (--stop-after ends a run)"
    ),
    ("metrics", "--dry-run"): "it only reads SPDs and answers queries: it changes nothing",
    ("scheduler", "--dry-run"): (
        "a scheduler that binds nothing leaves each pod pending, to be placed again at the "
        "next pass; --print-config shows what it would use, `katalyst explain pod` why a "
        "pod waits"
    ),
    ("webhook", "--once"): (
        "it answers admission requests as kube-apiserver sends them: there is no pass to "
        "run once (--stop-after ends a run)"
    ),
    ("webhook", "--dry-run"): (
        "it changes nothing itself (sideEffects: None); kube-apiserver's dry-run requests "
        "reach it marked as such"
    ),
    ("device-plugin", "--dry-run"): (
        "what it changes (the cards a container gets, a pod's gpu_selection_result) it "
        "changes in answer to the kubelet's Allocate calls, which come only once it has "
        "registered; --once reads the cards and shows what it would advertise, registering "
        "nothing"
    ),
    ("dra-plugin", "--dry-run"): (
        "it changes nothing but its checkpoint, in answer to the kubelet's "
        "NodePrepareResources calls, which come only once it has registered; --once shows "
        "the devices the agent publishes and where it would register, serving nothing"
    ),
    ("apiserver", "--once"): "it serves the embedded cluster until stopped: no pass to run",
    ("apiserver", "--dry-run"): "it is the cluster: a dry run is the client's (kubectl --dry-run)",
}


def _warn(old: str, new: str) -> None:
    print_message(
        f"warning: {old} is deprecated and will be removed in a future release; use {new}",
        stderr=True,
    )


def deprecated_option(old: str, new: str) -> Any:
    """A click callback for a hidden old spelling: warns when it is given."""

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        source = ctx.get_parameter_source(param.name or "")
        if source is not None and source.name == "COMMANDLINE":
            _warn(old, new)
        return value

    return callback


def old_option(command: str, old: str) -> Any:
    """The hidden typer option (for `Annotated[T | None, old_option(...)] = None`) of the old
    spelling `old` of `command` (in `DEPRECATED`)."""
    entry = next(d for d in DEPRECATED if d.command == command and d.old == old)
    return typer.Option(
        old,
        hidden=True,
        callback=deprecated_option(old, entry.new),
        help=f"Deprecated: use {entry.new}.",
    )


def parse_duration(text: str, option: str) -> float:
    """Seconds of a Go duration ("100ms", "30s", "1h30m"); a bare number of seconds is read
    with a deprecation warning; a bad one ends the command naming the option."""
    try:
        seconds = duration.parse_duration(text)
    except duration.DurationError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if _bare_number(text) and seconds != 0:
        _warn(f"{option} {text} (a bare number of seconds)", f"{option} {_go(seconds)}")
    return seconds


def _bare_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _go(seconds: float) -> str:
    """The short Go form a user would write: 100ms, 30s, 10m, 1h30m."""
    text = duration.format_duration(seconds)
    return text[:-2] if text.endswith("m0s") else text


def optional_duration(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option)


def listen_option(value: str | None, option: str = "--listen") -> tuple[str, int] | None:
    """`HOST:PORT`, or None for `none` (not served); a bad one ends the command (exit 2)."""
    if value is None or value.strip().lower() in (NOT_SERVED, ""):
        return None
    try:
        return parse_listen(value, option)
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=2) from None


def listen_from_old(listen: str | None, host: str | None, port: int | None) -> str | None:
    """`--listen` with the old separate address and port flags folded in (port 0: not
    served, as the old flags meant)."""
    if host is None and port is None:
        return listen
    if port == 0:
        return NOT_SERVED
    current = listen_option(listen) if listen is not None else None
    old_host, old_port = current if current is not None else ("127.0.0.1", None)
    final_port = port if port is not None else old_port
    if final_port is None:
        print_message("error: --bind-address/--metrics-address need a port", stderr=True)
        raise typer.Exit(code=2)
    final_host = host if host is not None else old_host
    return f"[{final_host}]:{final_port}" if ":" in final_host else f"{final_host}:{final_port}"
