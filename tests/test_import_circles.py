"""The package's modules import one another without circles: each layer imports only from
the layers below it, so a module can be read, tested and changed without the ones above.
The embedded API server is a layer of its own: the components reach a cluster only through
`pykatalyst.cluster`, whichever server is behind it. The graph is the one
`benchmarks/imports.py` draws (every import statement, late imports and TYPE_CHECKING
imports included)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _imports() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imports_bench", ROOT / "benchmarks/imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Who may import the embedded API server: what runs one (the runtime, the simulator, the
# command line) and the server itself. What the server itself may import.
RUNS_THE_SERVER = frozenset({"apiserver", "runtime", "sim", "cli"})
SERVER_IMPORTS = frozenset({"apiserver", "cluster", "api"})


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def apiserver_breaches(edges: dict[str, set[str]]) -> list[str]:
    """Every arrow that crosses the embedded API server's walls, as "a -> b"."""
    found = []
    for here, targets in sorted(edges.items()):
        for there in sorted(targets):
            into = _package(there) == "apiserver" and _package(here) not in RUNS_THE_SERVER
            out = _package(here) == "apiserver" and _package(there) not in {"", *SERVER_IMPORTS}
            if into or out:
                found.append(f"{here} -> {there}")
    return found


def test_only_what_runs_the_server_imports_it() -> None:
    bench = _imports()
    edges = bench.graph(ROOT / "src/pykatalyst", False, True)
    assert "pykatalyst.apiserver.memory" in edges["pykatalyst.runtime.apiserver"]
    assert apiserver_breaches(edges) == []
    # `katalyst apiserver` serves a cluster; it runs no simulation
    assert not {m for m in edges["pykatalyst.runtime.apiserver"] if _package(m) == "sim"}


def test_the_server_wall_sees_a_component_and_the_client_door(tmp_path: Path) -> None:
    pkg = tmp_path / "pykatalyst"
    for sub in ("apiserver", "cluster", "webhook", "sim", "topology"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "apiserver/memory.py").write_text("from pykatalyst.cluster import protocol\n")
    (pkg / "apiserver/grid.py").write_text("from pykatalyst.topology import cpuset\n")
    (pkg / "topology/cpuset.py").write_text("")
    (pkg / "cluster/protocol.py").write_text("")
    (pkg / "cluster/connect.py").write_text(
        "def embedded():\n    from pykatalyst.apiserver.memory import MemoryCluster\n"
    )
    (pkg / "webhook/service.py").write_text(
        textwrap.dedent(
            """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pykatalyst.apiserver import memory
            """
        )
    )
    (pkg / "sim/runner.py").write_text("from pykatalyst.apiserver.memory import MemoryCluster\n")
    bench = _imports()
    assert apiserver_breaches(bench.graph(pkg, False, True)) == [
        "pykatalyst.apiserver.grid -> pykatalyst.topology.cpuset",
        "pykatalyst.cluster.connect -> pykatalyst.apiserver.memory",
        "pykatalyst.webhook.service -> pykatalyst.apiserver.memory",
    ]


def test_no_import_circles() -> None:
    bench = _imports()
    found = bench.circles(bench.graph(ROOT / "src/pykatalyst", False, True))
    assert found == [], f"import circles: {found}"


def test_the_graph_sees_a_circle_through_a_late_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pykatalyst"
    (pkg / "api").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "api/__init__.py").write_text("")
    (pkg / "api/a.py").write_text("from pykatalyst.api.b import thing\n")
    (pkg / "api/b.py").write_text(
        textwrap.dedent(
            """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pykatalyst.api import c
            def thing():
                from . import a
            """
        )
    )
    (pkg / "api/c.py").write_text("import pykatalyst.api.b\n")
    bench = _imports()
    assert bench.circles(bench.graph(pkg, False, True)) == [
        ["pykatalyst.api.a", "pykatalyst.api.b", "pykatalyst.api.c"]
    ]
    assert bench.circles(bench.graph(pkg, True, False)) == []
