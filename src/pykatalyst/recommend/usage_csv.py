"""Reading a usage export: CSV (optionally gzip) with one row per sample, streamed.

Header and columns (any column order, extra columns ignored): ``workload``, ``container``,
``timestamp`` (Unix seconds), ``cpu`` (cores, the mean over the sample's interval),
``memory`` (bytes, the peak over the interval). Rows may come in any order; each
container's samples are sorted by time, and two samples of one container at the same time
are an error.

Memory stays bounded whatever the file's size: rows are parsed one at a time into compact
per-container numpy buffers; samples at or after ``at`` are skipped, and only the last
``history_s`` before the newest sample of each container are kept (older ones are dropped
as the buffers fill). ``max_samples`` caps what is held in all. Any bad row stops the read
with a ``UsageFileError`` naming the line, the field, the value and what is accepted.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from pykatalyst.recommend.model import UsageSeries

COLUMNS = ("workload", "container", "timestamp", "cpu", "memory")
DEFAULT_HISTORY_S = 30 * 86400.0
DEFAULT_MAX_SAMPLES = 20_000_000
_CHUNK = 4096


class UsageFileError(ValueError):
    """A usage file that cannot be read: where, which field, and what is accepted."""

    def __init__(
        self, path: str, line: int | None, field: str, value: str | None, accepted: str
    ) -> None:
        where = f"{path}:{line}" if line is not None else path
        shown = f" {value!r}" if value is not None else ""
        super().__init__(f"{where}: field {field}{shown}: accepted: {accepted}")
        self.path, self.line, self.field, self.value, self.accepted = (
            path,
            line,
            field,
            value,
            accepted,
        )


@dataclass(slots=True)
class _Buffer:
    """One container's samples as they arrive: flat numpy chunks, trimmed when full."""

    times: np.ndarray = field(default_factory=lambda: np.empty(_CHUNK))
    cpu: np.ndarray = field(default_factory=lambda: np.empty(_CHUNK))
    memory: np.ndarray = field(default_factory=lambda: np.empty(_CHUNK))
    lines: np.ndarray = field(default_factory=lambda: np.empty(_CHUNK, dtype=np.int64))
    size: int = 0
    newest: float = -math.inf

    def append(self, t: float, cpu: float, memory: float, line: int) -> None:
        if self.size == self.times.size:
            self._grow()
        i = self.size
        self.times[i], self.cpu[i], self.memory[i], self.lines[i] = t, cpu, memory, line
        self.size += 1
        self.newest = max(self.newest, t)

    def _grow(self) -> None:
        n = self.times.size * 2
        for name in ("times", "cpu", "memory", "lines"):
            old = getattr(self, name)
            new = np.empty(n, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def trim(self, history_s: float) -> int:
        """Drop samples older than ``history_s`` before the newest; returns how many."""
        keep = self.times[: self.size] >= self.newest - history_s
        kept = int(np.count_nonzero(keep))
        dropped = self.size - kept
        if dropped:
            for name in ("times", "cpu", "memory", "lines"):
                array = getattr(self, name)
                array[:kept] = array[: self.size][keep]
            self.size = kept
        return dropped


def _open_text(path: Path) -> IO[str]:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


def _number(path: str, line: int, name: str, text: str, *, non_negative: bool) -> float:
    accepted = "a finite number >= 0" if non_negative else "a finite number"
    try:
        value = float(text)
    except ValueError:
        raise UsageFileError(path, line, name, text, accepted) from None
    if not math.isfinite(value) or (non_negative and value < 0):
        raise UsageFileError(path, line, name, text, accepted)
    return value


def _header(path: str, reader: Iterator[list[str]]) -> dict[str, int]:
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise UsageFileError(path, 1, "header", None, ", ".join(COLUMNS)) from None
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in COLUMNS if c not in index]
    if missing:
        raise UsageFileError(
            path,
            1,
            "header",
            ",".join(header),
            f"columns {', '.join(COLUMNS)} (missing {', '.join(missing)})",
        )
    return index


Row = tuple[str, str, float, float, float]


def _rows(
    name: str, reader: Iterator[list[str]], index: dict[str, int], at: float | None
) -> Iterator[tuple[int, Row]]:
    """Checked rows (workload, container, time, cpu, memory) with their line numbers."""
    cols = [index[c] for c in COLUMNS]
    width = max(cols) + 1
    for row in reader:
        line = reader.line_num  # type: ignore[attr-defined]
        if not row:
            continue
        if len(row) < width:
            missing = COLUMNS[[c >= len(row) for c in cols].index(True)]
            raise UsageFileError(name, line, missing, None, "a value in every column")
        workload, container, ts, cpu, memory = (row[c].strip() for c in cols)
        if not workload or not container:
            empty = "workload" if not workload else "container"
            raise UsageFileError(name, line, empty, "", "a non-empty name")
        t = _number(name, line, "timestamp", ts, non_negative=False)
        if at is not None and t >= at:
            continue
        c = _number(name, line, "cpu", cpu, non_negative=True)
        m = _number(name, line, "memory", memory, non_negative=True)
        yield line, (workload, container, t, c, m)


def read_usage_csv(
    path: Path | str,
    *,
    at: float | None = None,
    history_s: float = DEFAULT_HISTORY_S,
    max_samples: int = DEFAULT_MAX_SAMPLES,
) -> dict[tuple[str, str], UsageSeries]:
    """The usage series per (workload, container) in the file, streamed (see the module)."""
    path = Path(path)
    name = str(path)
    buffers: dict[tuple[str, str], _Buffer] = {}
    held = 0
    try:
        with _open_text(path) as handle:
            reader = csv.reader(handle)
            index = _header(name, reader)
            for line, row in _rows(name, reader, index, at):
                buffer = buffers.setdefault((row[0], row[1]), _Buffer())
                buffer.append(row[2], row[3], row[4], line)
                held += 1
                if buffer.size == buffer.times.size:
                    held -= buffer.trim(history_s)
                if held > max_samples:
                    raise UsageFileError(
                        name,
                        line,
                        "rows",
                        None,
                        f"at most {max_samples} samples within the history kept "
                        f"({history_s / 86400:g} days per container); narrow it with --at",
                    )
    except (UnicodeDecodeError, csv.Error, EOFError, OSError, zlib.error) as error:
        raise UsageFileError(name, None, "file", None, f"UTF-8 CSV or gzip ({error})") from None
    return {key: _finish(name, key, buffer, history_s) for key, buffer in buffers.items()}


def _finish(path: str, key: tuple[str, str], buffer: _Buffer, history_s: float) -> UsageSeries:
    buffer.trim(history_s)
    n = buffer.size
    order = np.argsort(buffer.times[:n], kind="stable")
    times = buffer.times[:n][order]
    same = np.flatnonzero(np.diff(times) == 0)
    if same.size:
        line = int(buffer.lines[:n][order][same[0] + 1])
        raise UsageFileError(
            path,
            line,
            "timestamp",
            repr(float(times[same[0]])),
            f"one sample per time for workload {key[0]!r} container {key[1]!r}",
        )
    return UsageSeries(times, buffer.cpu[:n][order].copy(), buffer.memory[:n][order].copy())
