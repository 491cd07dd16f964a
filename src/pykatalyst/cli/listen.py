"""`--listen HOST:PORT`, read one way by every command that serves."""

from __future__ import annotations

import typer

from pykatalyst.cli.output import print_message


def parse_listen(value: str, option: str = "--listen") -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `:PORT` (loopback); ValueError naming the option."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"{option} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit():
        raise ValueError(f"{option} {value!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{option} {value!r}: port {port} is outside 0-65535")
    return host, port


def listen_address(value: str, option: str = "--listen") -> tuple[str, int]:
    """`parse_listen`, ending the command (exit 2) with the message when it is wrong."""
    try:
        return parse_listen(value, option)
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=2) from None
