"""Import circles in the package: the module graph from every ``import`` statement.

Walks ``src/pykatalyst`` with ``ast``, draws an edge from a module to each pykatalyst module it
imports (at module level, in functions and under ``TYPE_CHECKING`` alike, unless told
otherwise: a circle broken only by a late import is still a circle in the design), and lists
the strongly connected components of more than one module, largest first.

    python benchmarks/imports.py [--top-level] [--no-type-checking] [--root src/pykatalyst]

Summary line: ``import_circles: <n> modules_in_circles: <m>``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "pykatalyst"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _in_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _skipped(node: ast.AST, top_level: bool, type_checking: bool) -> bool:
    if isinstance(node, ast.If) and _in_type_checking(node):
        return not type_checking
    return top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))


def _imports(tree: ast.AST, top_level: bool, type_checking: bool) -> Iterator[ast.stmt]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            elif not _skipped(child, top_level, type_checking):
                stack.append(child)


def _targets(stmt: ast.stmt, here: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            yield alias.name
        return
    assert isinstance(stmt, ast.ImportFrom)
    base = stmt.module or ""
    if stmt.level:
        parts = here.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (stmt.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    for alias in stmt.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in modules else base


def graph(root: Path, top_level: bool, type_checking: bool) -> dict[str, set[str]]:
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for stmt in _imports(tree, top_level, type_checking):
            for target in _targets(stmt, name, is_package, modules):
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name and target.startswith(PACKAGE):
                    edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively; only those of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("src") / PACKAGE)
    parser.add_argument("--top-level", action="store_true", help="skip imports inside functions")
    parser.add_argument(
        "--no-type-checking", action="store_true", help="skip imports under TYPE_CHECKING"
    )
    args = parser.parse_args(argv)
    edges = graph(args.root, args.top_level, not args.no_type_checking)
    found = circles(edges)
    for component in found:
        print(f"{len(component)}: " + " ".join(m.removeprefix(PACKAGE + ".") for m in component))
    print(f"import_circles: {len(found)} modules_in_circles: {sum(map(len, found))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
