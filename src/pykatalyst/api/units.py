"""The field types of pykatalyst's own config files and scenarios, one grammar each:

- `Seconds`: a Go duration as Kubernetes writes one ("30s", "5m", "1h30m", "300ms") or a
  number of seconds; a float of seconds in Python.
- `Cores`: a number of cores or a Kubernetes cpu quantity ("4", "500m"); a float.
- `Bytes`: a number of bytes or a Kubernetes memory quantity ("5Gi", "300Mi"); an int.

All three refuse booleans and negative values, naming what is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from pykatalyst.api.duration import DurationError, parse_duration
from pykatalyst.api.quantity import Quantity, QuantityError, parse_quantity


def to_seconds(value: Any) -> Any:
    """Seconds of a Go duration string or of a number (pydantic checks the rest)."""
    if isinstance(value, bool):
        raise ValueError("a duration is a Go duration such as 30s or 5m, or a number of seconds")
    if isinstance(value, str | int | float):
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise ValueError(str(exc)) from None
    return value


def to_bytes(value: Any) -> Any:
    """Bytes of a memory quantity string ("5Gi") or of a number."""
    if isinstance(value, bool):
        raise ValueError("a memory size is a quantity such as 5Gi or a number of bytes")
    if isinstance(value, str | Quantity):
        try:
            return parse_quantity(value).value()
        except (QuantityError, ValueError) as exc:
            raise ValueError(f"not a memory quantity (e.g. 5Gi, 300Mi): {exc}") from exc
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def to_cores(value: Any) -> Any:
    """Cores of a cpu quantity string ("500m", "4") or of a number."""
    if isinstance(value, bool):
        raise ValueError("a cpu amount is a number of cores or a quantity such as 500m")
    if isinstance(value, str | Quantity):
        try:
            return parse_quantity(value).milli_value() / 1000.0
        except (QuantityError, ValueError) as exc:
            raise ValueError(f"not a cpu quantity (e.g. 4, 500m): {exc}") from exc
    return value


Seconds = Annotated[float, BeforeValidator(to_seconds), Field(ge=0)]
Cores = Annotated[float, BeforeValidator(to_cores), Field(ge=0)]
Bytes = Annotated[int, BeforeValidator(to_bytes), Field(ge=0)]
