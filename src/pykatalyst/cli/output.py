"""Printing helpers shared by the commands: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def console(stderr: bool = False) -> Console:
    # Wide enough that tables do not wrap into unreadable columns when piped.
    return Console(stderr=stderr, width=200, soft_wrap=False, highlight=False)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console().print(table)


def print_json(data: Any) -> None:
    # Plain print: rich would re-wrap and colour it, which breaks piping into jq.
    print(json.dumps(data, indent=2, sort_keys=False))


def print_message(text: str, *, stderr: bool = False, style: str | None = None) -> None:
    # Messages name files and fields: keep each on one line so they can be grepped.
    console(stderr).print(text, style=style, markup=False, soft_wrap=True)
