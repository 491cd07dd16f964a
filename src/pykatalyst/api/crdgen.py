"""The CRDs in deploy/crds, emitted from compact descriptions in `pykatalyst/data/crds/`.

One YAML file per kind names the kind (group, plural, short names, scope, versions, the
storage version, subresources, printer columns) and describes its schema in a shorthand:

- a mapping is an object with those properties; a key ending in ``!`` is required; the key
  ``"*"`` gives the schema of every other key (a map); the key ``"~"`` holds options of the
  object itself (``open`` keeps unknown fields, ``map=atomic``);
- a list ``[item]`` is an array of ``item``; a second element holds the array's options
  (``list=map keys=name``, ``minItems=1``);
- a string is a leaf: its type (``string``, ``integer``, ``number``, ``boolean``,
  ``quantity`` — a Kubernetes resource quantity, ``int-or-string``, ``object`` — an object
  whose fields are not checked, ``any`` — any value) followed by options ``format=int64``,
  ``min=0``, ``max=100``, ``enum=a|b``, ``default=<JSON>``, ``pattern=<the rest>``.

``schema`` describes every version; ``schemas`` (version -> description) the versions whose
fields differ.

`python -m pykatalyst.api.crdgen deploy/crds` writes the CRDs; a test checks that the files
there are what this module emits.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_SCALARS = {"string", "integer", "number", "boolean"}
_NUMERIC_OPTIONS = {"min": "minimum", "max": "maximum", "minItems": "minItems"}


class CRDSpecError(ValueError):
    """A compact description that does not say what it means."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    """One kind's compact description, as read from its file."""

    kind: str
    group: str
    plural: str
    short_names: tuple[str, ...]
    scope: str
    versions: tuple[str, ...]
    storage: str
    subresources: dict[str, Any]
    columns: tuple[dict[str, Any], ...]
    schemas: dict[str, Any]
    description: str

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


def _options(tokens: list[str], where: str) -> Schema:
    out: Schema = {}
    for i, token in enumerate(tokens):
        key, sep, value = token.partition("=")
        if not sep:
            raise CRDSpecError(f"{where}: option {token!r} is not key=value")
        if key == "pattern":
            out["pattern"] = " ".join([value, *tokens[i + 1 :]])
            break
        if key in _NUMERIC_OPTIONS:
            out[_NUMERIC_OPTIONS[key]] = json.loads(value)
        elif key == "format":
            out["format"] = value
        elif key == "enum":
            out["enum"] = value.split("|")
        elif key == "default":
            out["default"] = json.loads(value)
        elif key == "list":
            out["x-kubernetes-list-type"] = value
        elif key == "keys":
            out["x-kubernetes-list-map-keys"] = value.split(",")
        elif key == "map":
            out["x-kubernetes-map-type"] = value
        else:
            raise CRDSpecError(f"{where}: unknown option {key!r}")
    return out


def _leaf(text: str, where: str) -> Schema:
    kind, *tokens = text.split()
    if kind in _SCALARS:
        node: Schema = {"type": kind}
    elif kind == "quantity":
        node = {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    elif kind == "int-or-string":
        node = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
        node["x-kubernetes-int-or-string"] = True
    elif kind == "object":
        node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    elif kind == "any":
        node = {"x-kubernetes-preserve-unknown-fields": True}
    else:
        raise CRDSpecError(f"{where}: unknown type {kind!r}")
    node.update(_options(tokens, where))
    if "enum" in node and kind in ("integer", "number"):
        node["enum"] = [json.loads(v) for v in node["enum"]]
    return node


def _object(desc: dict[str, Any], where: str) -> Schema:
    node: Schema = {"type": "object"}
    props: Schema = {}
    required: list[str] = []
    for key, value in desc.items():
        if key == "~":
            for token in str(value).split():
                if token == "open":
                    node["x-kubernetes-preserve-unknown-fields"] = True
                else:
                    node.update(_options([token], where))
        elif key == "*":
            node["additionalProperties"] = schema(value, f"{where}.*")
        else:
            name = key[:-1] if key.endswith("!") else key
            if name != key:
                required.append(name)
            props[name] = schema(value, f"{where}.{name}")
    if props:
        node["properties"] = props
    if required:
        node["required"] = required
    return node


def schema(desc: Any, where: str = "") -> Schema:
    """The OpenAPI v3 schema a compact description stands for."""
    if isinstance(desc, str):
        return _leaf(desc, where)
    if isinstance(desc, list):
        if not 1 <= len(desc) <= 2:
            raise CRDSpecError(f"{where}: a list is [item] or [item, options]")
        node: Schema = {"type": "array", "items": schema(desc[0], f"{where}[]")}
        if len(desc) == 2:
            node.update(_options(str(desc[1]).split(), where))
        return node
    if isinstance(desc, dict):
        return _object(desc, where)
    raise CRDSpecError(f"{where}: {desc!r} is not a mapping, a list or a type")


def _root(spec: KindSpec, version: str) -> Schema:
    body = {
        "apiVersion": "string",
        "kind": "string",
        "metadata": {},
        **(spec.schemas[version] or {}),
    }
    root = schema(body, f"{spec.kind}/{version}")
    root["properties"]["metadata"] = {"type": "object"}
    if spec.description:
        root["description"] = spec.description
    return root


def crd(spec: KindSpec) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    singular = spec.kind.lower()
    versions = [
        {
            "name": version,
            "served": True,
            "storage": version == spec.storage,
            "schema": {"openAPIV3Schema": _root(spec, version)},
            "subresources": spec.subresources,
            "additionalPrinterColumns": list(spec.columns),
        }
        for version in spec.versions
    ]
    names: dict[str, Any] = {
        "kind": spec.kind,
        "listKind": f"{spec.kind}List",
        "plural": spec.plural,
        "singular": singular,
    }
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    names["categories"] = ["katalyst"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{spec.plural}.{spec.group}"},
        "spec": {"group": spec.group, "names": names, "scope": spec.scope, "versions": versions},
    }


def _column(raw: list[Any]) -> dict[str, Any]:
    name, kind, path, *rest = raw
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if rest:
        column["priority"] = rest[0]
    return column


def parse_kind(raw: dict[str, Any], where: str) -> KindSpec:
    try:
        versions = tuple(raw["versions"])
        spec = KindSpec(
            kind=raw["kind"],
            group=raw["group"],
            plural=raw["plural"],
            short_names=tuple(raw.get("shortNames", ())),
            scope=raw["scope"],
            versions=versions,
            storage=raw.get("storage", versions[-1]),
            subresources={k: v or {} for k, v in raw.get("subresources", {"status": {}}).items()},
            columns=tuple(_column(c) for c in raw.get("columns", [])),
            schemas={v: raw.get("schemas", {}).get(v, raw.get("schema", {})) for v in versions},
            description=raw.get("description", ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CRDSpecError(f"{where}: {exc!r}") from None
    if spec.scope not in ("Namespaced", "Cluster") or spec.storage not in versions:
        raise CRDSpecError(f"{where}: scope or storage version is not one of those accepted")
    return spec


def kind_specs() -> list[KindSpec]:
    """Every kind's description shipped with the package, in file-name order."""
    folder = resources.files("pykatalyst") / "data" / "crds"
    out: list[KindSpec] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            out.append(parse_kind(yaml.safe_load(entry.read_text()), entry.name))
    return out


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)

HEADER = "# Emitted by `python -m pykatalyst.api.crdgen deploy/crds` from pykatalyst/data/crds.\n"


def render(spec: KindSpec) -> str:
    text = yaml.dump(crd(spec), Dumper=_Dumper, sort_keys=False, width=100)
    return HEADER + text


def rendered() -> dict[str, str]:
    """File name -> text of every CRD."""
    return {spec.file_name: render(spec) for spec in kind_specs()}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pykatalyst.api.crdgen DIRECTORY", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    files = rendered()
    for stale in out.glob("*.yaml"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (out / name).write_text(text)
    print(f"wrote {len(files)} CRDs to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
