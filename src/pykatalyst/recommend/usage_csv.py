"""Reading a usage export: CSV (optionally gzip) with one row per sample, streamed.

Header and columns (any column order, extra columns ignored): ``workload``, ``container``,
``timestamp`` (Unix seconds), ``cpu`` (cores, the mean over the sample's interval),
``memory`` (bytes, the peak over the interval). Rows may come in any order; each
container's samples are sorted by time, and two samples of one container at the same time
are an error.

Memory stays bounded whatever the file's size: rows are parsed one at a time into flat
numpy columns shared by all containers (about 36 bytes a sample; a container costs its
name and an id, no buffer of its own); samples at or after ``at`` are skipped, and only
the last ``history_s`` before the newest sample of each container are kept (older ones
are dropped whenever the columns fill). ``max_samples`` caps what is held in all. The
answer is a ``UsageTable``: a read-only mapping whose series are views into one set of
sorted columns (24 bytes a sample), made when asked for. Any bad row stops the read with
a ``UsageFileError`` naming the line, the field, the value and what is accepted.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import numpy as np

from pykatalyst.recommend.model import UsageSeries

COLUMNS = ("workload", "container", "timestamp", "cpu", "memory")
DEFAULT_HISTORY_S = 30 * 86400.0
DEFAULT_MAX_SAMPLES = 10_000_000  # about 0.4 GB of numpy columns at most
_FIRST_CAPACITY = 1024
_EMPTY = np.empty(0)


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


class _Columns:
    """Every sample as it arrives, in flat numpy columns tagged with its container's id;
    full columns are trimmed to each container's history, then doubled. About 36 bytes a
    sample and no per-container buffer, so a million containers cost what their samples
    and names do."""

    def __init__(self, capacity: int = _FIRST_CAPACITY) -> None:
        self.t: np.ndarray = np.empty(capacity)
        self.cpu: np.ndarray = np.empty(capacity)
        self.memory: np.ndarray = np.empty(capacity)
        self.line: np.ndarray = np.empty(capacity, dtype=np.int64)
        self.who: np.ndarray = np.empty(capacity, dtype=np.int32)
        self.size = 0

    @property
    def capacity(self) -> int:
        return int(self.t.size)

    def append(self, who: int, t: float, cpu: float, memory: float, line: int) -> None:
        i = self.size
        self.t[i], self.cpu[i], self.memory[i], self.line[i], self.who[i] = (
            t,
            cpu,
            memory,
            line,
            who,
        )
        self.size = i + 1

    def _columns(self) -> tuple[str, ...]:
        return ("t", "cpu", "memory", "line", "who")

    def trim(self, newest: np.ndarray, history_s: float) -> None:
        """Drop the samples older than ``history_s`` before their container's newest."""
        n = self.size
        keep = self.t[:n] >= newest[self.who[:n]] - history_s
        kept = int(np.count_nonzero(keep))
        if kept < n:
            for name in self._columns():
                column = getattr(self, name)
                column[:kept] = column[:n][keep]
            self.size = kept

    def resize(self, capacity: int) -> None:
        for name in self._columns():
            old = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)


class _Reader:
    """The state of one read: container ids, each container's newest time, the columns."""

    def __init__(self, name: str, history_s: float, max_samples: int) -> None:
        self.name, self.history_s, self.max_samples = name, history_s, max_samples
        self.ids: dict[tuple[str, str], int] = {}
        self.newest = np.full(_FIRST_CAPACITY, -math.inf)
        self.columns = _Columns()

    def add(self, line: int, row: Row) -> None:
        key = (row[0], row[1])
        who = self.ids.get(key)
        if who is None:
            who = self.ids[key] = len(self.ids)
            if who == self.newest.size:
                self.newest = np.concatenate([self.newest, np.full(who, -math.inf)])
        if row[2] > self.newest[who]:
            self.newest[who] = row[2]
        if self.columns.size == self.columns.capacity:
            self._room(line)
        self.columns.append(who, row[2], row[3], row[4], line)

    def _room(self, line: int) -> None:
        cols = self.columns
        cols.trim(self.newest, self.history_s)
        cap = self.max_samples + 1
        if cols.size >= cap:
            raise UsageFileError(
                self.name,
                line,
                "rows",
                None,
                f"at most {self.max_samples} samples within the history kept "
                f"({self.history_s / 86400:g} days per container); narrow it with --at",
            )
        if 2 * cols.size > cols.capacity and cols.capacity < cap:
            cols.resize(min(2 * cols.capacity, cap))


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
        c = _number(name, line, "cpu", cpu, non_negative=True)
        m = _number(name, line, "memory", memory, non_negative=True)
        if at is not None and t >= at:
            continue  # checked all the same: a bad file is bad whatever --at says
        yield line, (workload, container, t, c, m)


def read_usage_csv(
    path: Path | str,
    *,
    at: float | None = None,
    history_s: float = DEFAULT_HISTORY_S,
    max_samples: int = DEFAULT_MAX_SAMPLES,
) -> UsageTable:
    """The usage series per (workload, container) in the file, streamed (see the module)."""
    path = Path(path)
    name = str(path)
    reader = _Reader(name, history_s, max_samples)
    try:
        with _open_text(path) as handle:
            rows = csv.reader(handle)
            index = _header(name, rows)
            for line, row in _rows(name, rows, index, at):
                reader.add(line, row)
    except (UnicodeDecodeError, csv.Error, EOFError, OSError, zlib.error) as error:
        raise UsageFileError(name, None, "file", None, f"UTF-8 CSV or gzip ({error})") from None
    return _finish(reader)


class UsageTable(Mapping[tuple[str, str], UsageSeries]):
    """The series of every container, read-only, in the order containers first appeared.
    Each series is a view into one set of sorted columns, built when asked for."""

    def __init__(
        self,
        ids: dict[tuple[str, str], int],
        starts: np.ndarray,
        columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        self._ids = ids  # in the order containers first appeared: id 0, 1, ...
        self._starts = starts
        self._columns = columns

    def __getitem__(self, key: tuple[str, str]) -> UsageSeries:
        i = self._ids[key]
        lo, hi = int(self._starts[i]), int(self._starts[i + 1])
        t, cpu, memory = self._columns
        return UsageSeries(t[lo:hi], cpu[lo:hi], memory[lo:hi])

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _finish(reader: _Reader) -> UsageTable:
    """Sort the columns by container then time (stable), one column at a time, freeing each
    unsorted column as its sorted copy is made; two samples of one container at one time
    name the second line."""
    cols = reader.columns
    cols.trim(reader.newest, reader.history_s)
    n = cols.size
    order = np.lexsort((cols.t[:n], cols.who[:n]))
    who, t = cols.who[:n][order], cols.t[:n][order]
    cols.who = cols.t = _EMPTY
    same = np.flatnonzero((np.diff(t) == 0) & (np.diff(who) == 0))
    if same.size:
        i = int(same[0]) + 1
        key = next(k for k, v in reader.ids.items() if v == int(who[i]))
        raise UsageFileError(
            reader.name,
            int(cols.line[order[i]]),
            "timestamp",
            repr(float(t[i])),
            f"one sample per time for workload {key[0]!r} container {key[1]!r}",
        )
    cols.line = _EMPTY
    cpu = cols.cpu[:n][order]
    cols.cpu = _EMPTY
    memory = cols.memory[:n][order]
    cols.memory = _EMPTY
    starts = np.searchsorted(who, np.arange(len(reader.ids) + 1), side="left")
    return UsageTable(reader.ids, starts, (t, cpu, memory))
