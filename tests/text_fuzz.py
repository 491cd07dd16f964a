"""Hostile *text*: YAML and CSV made of the pieces that break readers (explicit tags with
empty or wrong values, anchors, aliases and merge keys, odd numbers, brackets, quotes,
directives, non-UTF-8 bytes), for the fuzz tests and `benchmarks/fuzz.py`.

`TEXT_READERS` lists every reader of a user's file; each must return or raise its own
clear error (a ValueError naming the file), never anything else."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from pathlib import Path

from pykatalyst.agent.config import ConfigError
from pykatalyst.agent.config import parse_config as parse_agent_config
from pykatalyst.api.manifests import ManifestError, load_documents
from pykatalyst.api.yamlio import YAMLInputError, load_yaml_all
from pykatalyst.scheduler.config import SchedulerConfigError, load_config_text
from pykatalyst.sim.csvfile import read_csv_column
from pykatalyst.sim.scenario import ScenarioError, parse_scenario

YAML_TOKENS: tuple[str, ...] = (
    "!!int", "!!float", "!!bool", "!!null", "!!str", "!!map", "!!seq", "!!merge", "!!binary",
    "!!timestamp", "!!set", "!!python/object:os.system", "!x", "!<tag:yaml.org,2002:int>",
    "&a ", "*a", "&b ", "*b", "<<: ", "<<: *a", "a: ", "b: ", "kind: ", "name: ", "nodes:",
    "- ", "[", "]", "{", "}", ", ", "'", '"', '""', "''", ".nan", ".inf", "-.inf", "0x1F",
    "0o7", "1e9", "1_0", "-", "~", "null", "yes", "on", "\n", "\n  ", " ", "? ", ": ", "|",
    ">", "#c", "%YAML 1.1\n---\n", "---\n", "...\n", "0", "12", "x", "9" * 120, "\t",
    "\ufeff", "\x00", "2024-01-01",
)  # fmt: skip
CSV_TOKENS: tuple[str, ...] = (
    "requests", "cpu", ",", "\n", "\r\n", '"', '""', "1", "0.5", "-1", "nan", "inf", "-inf",
    "1e400", "", " ", "x", "\x00", "\t", "9" * 50,
)  # fmt: skip
# the same documents under the prefixes that steer each reader into its deeper checks
YAML_PREFIXES: tuple[str, ...] = (
    "",
    "kind: KubeSchedulerConfiguration\n",
    "name: s\nnodes:\n",
    "apiVersion: v1\nkind: Pod\n",
    "advisor:\n  ",
)


def random_text(rng: random.Random, tokens: tuple[str, ...], most: int = 16) -> str:
    return "".join(rng.choice(tokens) for _ in range(rng.randint(1, most)))


def _yaml_documents(text: str) -> None:
    docs: list[object] = []
    with contextlib.suppress(YAMLInputError):
        docs = load_yaml_all(text, "fuzz.yaml")
    for doc in docs:
        with contextlib.suppress(ConfigError):
            parse_agent_config(doc)
        with contextlib.suppress(ScenarioError):
            parse_scenario(doc)


def _scheduler_config(text: str) -> None:
    with contextlib.suppress(SchedulerConfigError):
        load_config_text(text, "fuzz.yaml")


def read_yaml_file(path: Path) -> None:
    """What `katalyst validate -f` does first with a file."""
    with contextlib.suppress(ManifestError):
        load_documents(path)


def read_csv_file(path: Path) -> None:
    """The simulator's demand curves (`kind: csv` services)."""
    read_csv_column.cache_clear()
    with contextlib.suppress(ValueError):
        read_csv_column(str(path), "requests")


TEXT_READERS: dict[str, Callable[[str], None]] = {
    "yaml and config parsers": _yaml_documents,
    "scheduler configuration": _scheduler_config,
}
FILE_READERS: dict[str, Callable[[Path], None]] = {
    "manifests": read_yaml_file,
}
CSV_READERS: dict[str, Callable[[Path], None]] = {
    "demand csv": read_csv_file,
}
