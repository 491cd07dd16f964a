"""A pydantic model's refusal, said one way in every config pykatalyst reads: each problem
as `field.path[index]: what is wrong (got value)`.

Paths are the fields the user wrote — pydantic's own steps (validator and union-branch
names) are left out; "unknown field" replaces pydantic's "Extra inputs are not permitted";
the value is shown when it is a scalar (a whole sub-document is named by its path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

NO_VALUE: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class FieldProblem:
    path: str
    message: str
    value: Any = NO_VALUE

    def show(self) -> str:
        shown = "" if self.value is NO_VALUE else f" (got {self.value!r})"
        return f"{self.path}: {self.message}{shown}" if self.path else f"{self.message}{shown}"


def field_path(
    loc: Iterable[int | str], skip: Callable[[list[str], str], bool] | None = None
) -> str:
    """`spec.items[0].name` from a pydantic location; `skip(parts_so_far, item)` drops
    further steps a caller's models add (union tags)."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item.startswith(("function-", "constrained-")) or (skip and skip(parts, item)):
            continue
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts).replace(".[", "[")


def field_problems(
    exc: ValidationError,
    prefix: str = "",
    skip: Callable[[list[str], str], bool] | None = None,
) -> list[FieldProblem]:
    out: list[FieldProblem] = []
    for err in exc.errors(include_url=False):
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be")
        value = err.get("input", NO_VALUE)
        if err["type"] == "missing" or isinstance(value, dict | list):
            value = NO_VALUE
        path = field_path(err["loc"], skip)
        if prefix:
            path = f"{prefix}.{path}" if path and not path.startswith("[") else prefix + path
        out.append(FieldProblem(path or "(top level)", msg, value))
    return out


def one_line(exc: ValidationError, prefix: str = "") -> str:
    """Every problem, `; `-separated."""
    return "; ".join(p.show() for p in field_problems(exc, prefix))
