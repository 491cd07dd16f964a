"""The package's modules import one another without circles: each layer imports only from
the layers below it, so a module can be read, tested and changed without the ones above.
The graph is the one `benchmarks/imports.py` draws (every import statement, late imports
and TYPE_CHECKING imports included)."""

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
