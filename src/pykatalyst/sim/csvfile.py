"""A column of numbers from a CSV file (a scenario's demand curve), read once per file
and column, with an error naming the file, line and column for anything else."""

from __future__ import annotations

import csv
import math
from functools import cache


@cache
def read_csv_column(path: str, column: str) -> tuple[float, ...]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return _csv_column(csv.DictReader(fh), path, column)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: not a CSV file: {exc}") from None


def _csv_column(reader: csv.DictReader[str], path: str, column: str) -> tuple[float, ...]:
    if reader.fieldnames is None or column not in reader.fieldnames:
        have = ", ".join(reader.fieldnames or [])
        raise ValueError(f"{path}: no column {column!r} (columns: {have})")
    values = []
    for row in reader:
        lineno = reader.line_num
        try:
            value = float(row[column])
        except (TypeError, ValueError):
            raise ValueError(
                f"{path}:{lineno}: column {column!r} holds {row[column]!r}, not a number"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{path}:{lineno}: column {column!r} holds {row[column]!r}; "
                "a finite number >= 0 is accepted"
            )
        values.append(value)
    if not values:
        raise ValueError(f"{path}: column {column!r} has no rows")
    return tuple(values)
