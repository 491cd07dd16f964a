"""The one YAML reader of the project: YAML's core schema, with bounded cost.

Kubernetes reads YAML by turning it into JSON, so only what JSON can hold is accepted:
mappings, sequences, strings, integers, floats, booleans and null, plus merge keys
(``<<``). Other tags (``!!timestamp``, ``!!binary``, ``!!set``, ``!python/...``, custom
``!tags``) are refused, and a date written bare stays a string, as Kubernetes keeps it.

Hostile files cannot make a reader spend much: nesting deeper than `MAX_DEPTH`, aliases
that would expand past `MAX_ALIAS_NODES` nodes (the "billion laughs"), and numbers of more
than `MAX_NUMBER_DIGITS` digits are refused. Every error is a `YAMLInputError` naming the
source and the line and column; it is a `yaml.YAMLError`, so callers that already handle
PyYAML's errors keep working.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_NUMBER_DIGITS",
    "YAMLInputError",
    "load_yaml",
    "load_yaml_all",
]

MAX_DEPTH: Final = 100
MAX_ALIAS_NODES: Final = 100_000
MAX_NUMBER_DIGITS: Final = 100

_CORE_TAGS: Final = frozenset(
    "tag:yaml.org,2002:" + t for t in ("null", "bool", "int", "float", "str", "seq", "map", "merge")
)
_ACCEPTED: Final = "YAML's core schema: maps, lists, strings, numbers, true/false, null"


class YAMLInputError(yaml.YAMLError, ValueError):
    """A YAML text that cannot be read; `line` and `column` count from 1."""

    def __init__(self, source: str, reason: str, mark: yaml.Mark | None = None) -> None:
        self.source = source
        self.reason = reason
        self.problem = reason
        self.problem_mark = mark
        self.line = mark.line + 1 if mark is not None else None
        self.column = mark.column + 1 if mark is not None else None
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source or "<input>"
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        return f"{where}: invalid YAML: {self.reason}"


def _construct_int(loader: _Loader, node: ScalarNode) -> int:
    text = str(node.value)
    digits = sum(ch.isdigit() for ch in text)
    if digits > MAX_NUMBER_DIGITS:
        raise _refuse(f"a number of more than {MAX_NUMBER_DIGITS} digits", node)
    try:
        return int(yaml.SafeLoader.construct_yaml_int(loader, node))
    except (ValueError, TypeError, IndexError):  # IndexError: an empty `!!int ""`
        raise _refuse(f"{text!r} is not an integer", node) from None


def _construct_float(loader: _Loader, node: ScalarNode) -> float:
    text = str(node.value)
    if len(text) > MAX_NUMBER_DIGITS + 20:
        raise _refuse(f"a number of more than {MAX_NUMBER_DIGITS} digits", node)
    try:
        return float(yaml.SafeLoader.construct_yaml_float(loader, node))
    except (ValueError, TypeError, OverflowError, IndexError):
        raise _refuse(f"{text!r} is not a number", node) from None


def _construct_bool(loader: _Loader, node: ScalarNode) -> bool:
    value = str(node.value).lower()
    if value not in ("true", "false", "yes", "no", "on", "off"):
        raise _refuse(f"{node.value!r} is not a boolean", node)
    return bool(yaml.SafeLoader.construct_yaml_bool(loader, node))


def _construct_null(loader: _Loader, node: ScalarNode) -> None:
    if str(node.value) not in ("", "~", "null", "Null", "NULL"):
        raise _refuse(f"{node.value!r} is not null", node)
    return None


def _construct_undefined(loader: _Loader, node: Node) -> Any:
    raise _refuse(f"the tag {node.tag!r} is not accepted", node)


class _Refused(yaml.constructor.ConstructorError):
    pass


def _refuse(reason: str, node: Node) -> _Refused:
    return _Refused(None, None, reason, node.start_mark)


class _Resolver(yaml.resolver.Resolver):
    """The safe resolver without timestamps: a bare date stays a string, as in Kubernetes."""


_Resolver.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in pairs if tag != "tag:yaml.org,2002:timestamp"]
    for first, pairs in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}


class _Loader(yaml.composer.Composer, yaml.constructor.SafeConstructor, _Resolver):
    """The composer, with depth and alias bounds, over a parser of YAML events."""

    # provided by the event parser this is combined with
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]

    def _start(self) -> None:
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._depth = 0
        self._alias_nodes = 0
        self._sizes: dict[int, int] = {}

    def compose_document(self) -> Node | None:
        self._alias_nodes = 0
        self._sizes = {}
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._alias_nodes += self._size(target)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise _Refused(
                        None,
                        None,
                        f"aliases expand to more than {MAX_ALIAS_NODES} nodes",
                        event.start_mark,
                    )
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and node.tag not in _CORE_TAGS:
            raise _refuse(f"the tag {node.tag!r} is not accepted; use {_ACCEPTED}", node)
        return node

    def _size(self, node: Node) -> int:
        """The number of nodes `node` stands for once every alias under it is expanded."""
        key = id(node)
        known = self._sizes.get(key)
        if known is not None:
            return known
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._size(k) + self._size(v) for k, v in node.value)
        self._sizes[key] = size
        return size


class _PyLoader(_Loader, yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's own scanner and parser, for when libyaml is not there."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        self._start()

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # Refused while scanning: PyYAML's scanner looks ahead over every open bracket,
        # which costs quadratic time on "[[[[...".
        if self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()
            raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        super().fetch_flow_collection_start(token_class)


_CParser: Any
try:
    _CParser = importlib.import_module("yaml.cyaml").CParser
except (ImportError, AttributeError):  # PyYAML built without libyaml
    _CParser = None
_EVENT_PARSERS: list[type[Any]] = [_PyLoader]
if _CParser is not None:

    class _CLoader(_Loader, _CParser):  # type: ignore[misc]
        """libyaml's scanner and parser (a hundred times faster), under the same bounds."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            self._start()

    _EVENT_PARSERS.insert(0, _CLoader)


_Loader.yaml_constructors = dict(yaml.constructor.SafeConstructor.yaml_constructors)
for _tag in list(_Loader.yaml_constructors):
    if _tag not in _CORE_TAGS:
        _Loader.yaml_constructors[_tag] = _construct_undefined
_Loader.yaml_constructors.update(
    {
        "tag:yaml.org,2002:int": _construct_int,
        "tag:yaml.org,2002:float": _construct_float,
        "tag:yaml.org,2002:bool": _construct_bool,
        "tag:yaml.org,2002:null": _construct_null,
        None: _construct_undefined,
    }
)

_LINE_BREAKS: Final = re.compile(r"\s+")


def _wrap(exc: yaml.YAMLError, source: str) -> YAMLInputError:
    if isinstance(exc, YAMLInputError):
        return exc
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    reason = f"{context}: {problem}" if context and not isinstance(exc, _Refused) else problem
    return YAMLInputError(source, _LINE_BREAKS.sub(" ", str(reason)), mark)


def _documents(text: str, source: str) -> Iterator[Any]:
    loader = _EVENT_PARSERS[0](text)
    try:
        while loader.check_data():
            yield loader.get_data()
    except yaml.YAMLError as exc:
        raise _wrap(exc, source) from None
    except RecursionError:
        raise YAMLInputError(source, f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def load_yaml_all(text: str | bytes, source: str = "") -> list[Any]:
    """Every document of a YAML text; `source` (a file name) is named in errors."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YAMLInputError(source, f"not UTF-8 text: {exc.reason}") from None
    return list(_documents(text, source))


def load_yaml(text: str | bytes, source: str = "") -> Any:
    """The single document of a YAML text (None when empty); more than one is an error."""
    docs = load_yaml_all(text, source)
    if len(docs) > 1:
        raise YAMLInputError(source, f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number of more than {MAX_NUMBER_DIGITS} digits")
    return int(text)


def load_json(text: str | bytes) -> Any:
    """A JSON text under the same bounds as YAML: numbers up to `MAX_NUMBER_DIGITS` digits,
    nesting up to Python's recursion limit. Raises ValueError (a `json.JSONDecodeError`
    for syntax errors)."""
    try:
        return json.loads(text, parse_int=_json_int)
    except RecursionError:
        raise ValueError("nested too deeply") from None
