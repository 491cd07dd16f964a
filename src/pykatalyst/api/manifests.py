"""Reading manifest files and finding the pod templates inside them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pykatalyst.api.yamlio import load_json, load_yaml_all

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# kind -> where its pod template sits, as a path of keys
_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
WORKLOAD_KINDS = tuple(_TEMPLATE_PATHS)


class ManifestError(ValueError):
    """A file that cannot be read as Kubernetes manifests."""

    def __init__(self, path: Path, message: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = message
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Document:
    """One object of a manifest file; `index` counts documents from 0."""

    path: Path
    index: int
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return str(meta.get("name", "")) if isinstance(meta, dict) else ""

    @property
    def namespace(self) -> str:
        meta = self.obj.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        return str(ns) if ns else ""

    @property
    def label(self) -> str:
        """`Kind namespace/name` as a user would name the object."""
        key = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind or '<no kind>'} {key or f'#{self.index}'}"


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A pod template found in a document, with the path of the template in the object."""

    document: Document
    field_prefix: str
    pod: dict[str, Any]


def find_manifest_files(paths: Iterable[Path | str]) -> list[Path]:
    """Files named on the command line, and manifest files found under named folders."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES
            )
            if not found:
                accepted = ", ".join(f"*{s}" for s in sorted(MANIFEST_SUFFIXES))
                raise ManifestError(path, f"a folder with no manifests ({accepted})")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise ManifestError(path, "no such file or folder")
    return out


def load_documents(path: Path) -> list[Document]:
    """Every object in a file; a `List` kind is unpacked into its items."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, f"cannot read: {exc}") from exc
    raw_docs: list[Any]
    if path.suffix == ".json":
        try:
            raw_docs = [load_json(text)]
        except json.JSONDecodeError as exc:
            raise ManifestError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
        except ValueError as exc:
            raise ManifestError(path, f"invalid JSON: {exc}") from exc
    else:
        try:
            raw_docs = load_yaml_all(text, str(path))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise ManifestError(path, f"invalid YAML: {problem}", line) from exc
    docs: list[Document] = []
    index = 0
    for raw in raw_docs:
        if raw is None:
            continue
        if not isinstance(raw, dict):
            raise ManifestError(
                path, f"document {index} is a {type(raw).__name__}, not a Kubernetes object"
            )
        items = raw.get("items") if str(raw.get("kind", "")).endswith("List") else None
        for obj in items if isinstance(items, list) else [raw]:
            if not isinstance(obj, dict):
                raise ManifestError(path, f"document {index} holds a non-object list item")
            docs.append(Document(path, index, obj))
            index += 1
    return docs


def pod_template(document: Document) -> PodTemplate | None:
    """The pod template of a workload document, or None for kinds that hold no pods."""
    keys = _TEMPLATE_PATHS.get(document.kind)
    if keys is None:
        return None
    node: Any = document.obj
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return PodTemplate(document, ".".join(keys), {})
    return PodTemplate(document, ".".join(keys), node)


def iter_documents(paths: Iterable[Path | str]) -> Iterator[Document]:
    for path in find_manifest_files(paths):
        yield from load_documents(path)
