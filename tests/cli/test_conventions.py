"""Every command's options keep the command line's conventions (cli/conventions.py).

The walk starts at the `katalyst` app, so a command added later is checked without being
named here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import Enum
from typing import Any

import pytest
import typer

from pykatalyst.cli.conventions import (
    DEPRECATED,
    DURATION,
    LISTEN,
    LOOP_EXEMPTIONS,
    _go,
    listen_from_old,
    parse_duration,
)
from pykatalyst.cli.main import app

KEBAB = re.compile(r"^--[a-z][a-z0-9]*(-[a-z0-9]+)*$")
# names that say "an amount of time": such an option takes a Go duration
TIME_WORDS = re.compile(
    r"(seconds|-s$|days|interval|period|timeout|after$|duration|deadline|grace)"
)
# names that say "where a server listens": spelled --listen HOST:PORT
SERVE_WORDS = re.compile(r"(^--port$|-port$|^--bind-address$|-address$)")


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        path = f"{prefix} {name}".strip()
        yield path, cmd
        yield from _commands(cmd, path)


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if getattr(p, "opts", None) and p.opts[0].startswith("-")]


def _visible(cmd: Any) -> list[Any]:
    return [p for p in _options(cmd) if not getattr(p, "hidden", False) and p.name != "help"]


def _flags(cmd: Any) -> set[str]:
    return {o for p in _options(cmd) for o in [*p.opts, *p.secondary_opts]}


def _annotation(param: Any) -> Any:
    return param.type_descriptor.annotation


def _daemon(cmd: Any) -> bool:
    """A command that runs until stopped: it serves (`--listen`), may run on a cluster of its
    own (`--embedded`), has a pass to run `--once`, or talks to a cluster (`--kubeconfig`)
    without printing a report (a command that reads a cluster once prints one, `-o`)."""
    flags = _flags(cmd)
    if {"--listen", "--embedded", "--once"} & flags:
        return True
    return "--kubeconfig" in flags and not {"-o", "--output"} & flags


def test_the_walk_finds_every_command() -> None:
    expected = {"agent", "apiserver", "controller", "demo", "explain", "explain node"}
    assert expected | {"explain pod", "scheduler", "sim", "validate", "webhook"} <= set(COMMANDS)


def test_every_daemon_is_held_to_the_loop_rule() -> None:
    daemons = {path for path, cmd in COMMANDS.items() if _daemon(cmd)}
    assert daemons == {
        "agent",
        "apiserver",
        "controller",
        "device-plugin",
        "dra-plugin",
        "metrics",
        "scheduler",
        "webhook",
    }


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_options_are_spelled_one_way(path: str) -> None:
    cmd = COMMANDS[path]
    for param in _visible(cmd):
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("--"):
                assert KEBAB.match(opt), f"{path} {opt}: options are lower-case kebab-case"
        long = param.opts[0]
        assert param.help, f"{path} {long}: every option says what it does"
        if param.metavar != "URL":  # a server it talks to (Katalyst's flag names), not its own
            assert not SERVE_WORDS.search(long), f"{path} {long}: serving address is --listen"
        if long == "--listen":
            assert param.metavar == LISTEN, f"{path} --listen takes {LISTEN}"
        if TIME_WORDS.search(long):
            assert param.metavar == DURATION, f"{path} {long}: durations are Go durations"
        if param.metavar == DURATION:
            assert _annotation(param) in (str, str | None), f"{path} {long}: read as a string"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_o_and_output_are_only_for_output_formats(path: str) -> None:
    for param in _visible(COMMANDS[path]):
        spelled = set(param.opts)
        kind = _annotation(param)
        is_format = (
            isinstance(kind, type) and issubclass(kind, Enum) and "json" in {e.value for e in kind}
        )
        if spelled & {"-o", "--output"}:
            assert is_format, f"{path} {sorted(spelled)}: -o/--output name an output format"
        if is_format:
            assert spelled == {"-o", "--output"}, f"{path}: an output format is -o/--output"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_leader_election_is_on_by_default_everywhere(path: str) -> None:
    for param in _visible(COMMANDS[path]):
        if "--leader-elect" in param.opts:
            assert param.secondary_opts == ["--no-leader-elect"]
            assert param.default is True, f"{path}: --leader-elect is on by default"


@pytest.mark.parametrize("path", sorted(p for p, c in COMMANDS.items() if _daemon(c)))
def test_daemons_run_once_and_dry_or_say_why_not(path: str) -> None:
    flags = _flags(COMMANDS[path])
    for flag in ("--once", "--dry-run"):
        if flag not in flags:
            assert (path, flag) in LOOP_EXEMPTIONS, f"{path}: {flag}, or a reason why not"
    if "--embedded" in flags:
        assert {"--kubeconfig", "--in-cluster", "--context"} <= flags


def test_every_exemption_is_about_a_daemon_that_lacks_the_flag() -> None:
    for path, flag in LOOP_EXEMPTIONS:
        assert path in COMMANDS and _daemon(COMMANDS[path]), path
        assert flag not in _flags(COMMANDS[path]), f"{path} has {flag}: drop its exemption"


def test_hidden_options_are_exactly_the_deprecated_spellings() -> None:
    hidden = {
        (path, p.opts[0])
        for path, cmd in COMMANDS.items()
        for p in _options(cmd)
        if getattr(p, "hidden", False)
    }
    assert hidden == {(d.command, d.old) for d in DEPRECATED}


@pytest.mark.parametrize("old", DEPRECATED, ids=lambda d: f"{d.command} {d.old}")
def test_an_old_spelling_still_parses_and_warns(
    old: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd = COMMANDS[old.command]
    args = [old.old, old.example] if old.example else [old.old]
    args += ["x.yaml"] if old.command == "sim" else []
    ctx = cmd.make_context(old.command, args)  # parses (and runs callbacks), runs nothing
    assert any(v is not None for v in ctx.params.values())
    err = capsys.readouterr().err
    assert f"warning: {old.old} is deprecated" in err and old.new.split()[0] in err


@pytest.mark.parametrize(
    ("text", "seconds", "warned"),
    [
        ("100ms", 0.1, False),
        ("2s", 2.0, False),
        ("1h30m", 5400.0, False),
        ("0", 0.0, False),
        ("0.1", 0.1, True),
        ("30", 30.0, True),
    ],
)
def test_durations_are_go_durations_and_bare_seconds_warn(
    text: str, seconds: float, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_duration(text, "--interval") == pytest.approx(seconds)
    err = capsys.readouterr().err
    assert ("deprecated" in err) is warned
    if warned:
        assert f"use --interval {_go(seconds)}" in err


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.1, "100ms"), (30, "30s"), (90, "1m30s"), (600, "10m"), (5400, "1h30m")]
)
def test_the_suggested_spelling_is_the_short_go_form(seconds: float, text: str) -> None:
    assert _go(seconds) == text


def test_old_address_and_port_fold_into_listen() -> None:
    assert listen_from_old("127.0.0.1:9316", None, None) == "127.0.0.1:9316"
    assert listen_from_old("127.0.0.1:9316", "0.0.0.0", None) == "0.0.0.0:9316"
    assert listen_from_old("127.0.0.1:9316", None, 19316) == "127.0.0.1:19316"
    assert listen_from_old(None, "fd00::1", 9090) == "[fd00::1]:9090"
    assert listen_from_old("127.0.0.1:9316", None, 0) == "none"


def test_the_cli_page_lists_every_old_spelling() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for old in DEPRECATED:
        assert f"`{old.old}" in page and old.new.split()[0] in page, old
