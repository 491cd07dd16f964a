"""Kubernetes resource quantities, read and written the way the API server does.

Grammar (the same one the API server's OpenAPI schema publishes)::

    quantity  ::= [sign] number [suffix]
    sign      ::= "+" | "-"
    number    ::= digits | digits "." [digits] | "." digits
    suffix    ::= binarySI | decimalSI | exponent
    binarySI  ::= "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"          (powers of 1024)
    decimalSI ::= "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"  (powers of 1000)
    exponent  ::= ("e" | "E") [sign] digits                          (power of ten)

Parsing follows Kubernetes: a non-zero amount finer than one nano-unit is rounded away
from zero to the next nano-unit (asking for a sliver of a resource still gets some).
Inputs that the API server has to take through its arbitrary-precision path (more than
18 significant digits, finer than a nano-unit, or a binary suffix that could overflow)
are clamped to 2**63-1 units in magnitude; short decimal inputs such as ``12E`` or
``1e30`` are kept exactly as written, as the API server keeps them. Written exponents
above 1000 are refused. Internally a quantity is an exact integer count of nano-units,
so sums and differences never drift.

Every quantity remembers the *format family* of the text it came from, because the
canonical string depends on it:

* decimal SI (no suffix or n/u/m/k/M/G/T/P/E): trailing zeros are moved into an exponent
  that is a multiple of three, choosing the largest such exponent that keeps the mantissa
  an integer: ``1.5`` -> ``1500m``, ``1000`` -> ``1k``, ``0.1`` -> ``100m``.
* decimal exponent (``1e3``, ``12E-3``): same mantissa rule, written as ``e<exp>``:
  ``1e3`` -> ``1e3``, ``12E-3`` -> ``12e-3``, ``1.5e3`` -> ``1500``.
* binary SI: written with the largest power of 1024 that divides the value exactly
  (``1024Mi`` -> ``1Gi``). Values strictly between -1024 and 1024, and values that are
  not whole units, are written in decimal SI instead so that nothing is rounded
  (``0.5Ki`` -> ``512``, ``1.5Ki`` -> ``1536``).

Zero is always ``0``. ``milli_value()`` and ``value()`` round to the integer that is
never smaller in magnitude (ceiling for positive amounts), because a request of
``1500m`` cpu must count as two whole cpus, never one. The result of ``a + b`` keeps
``a``'s format unless ``a`` is zero, as Kubernetes' ``Add`` does.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = [
    "QUANTITY_PATTERN",
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "format_quantity",
    "parse_quantity",
]


class QuantityError(ValueError):
    """A string (or number) that is not a Kubernetes quantity."""

    def __init__(self, value: object, reason: str = "") -> None:
        self.value = value
        self.reason = reason
        detail = f" ({reason})" if reason else ""
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "..."
        super().__init__(
            f"invalid quantity {shown}{detail}: expected [+-]<number>[suffix] where number is "
            "digits with an optional fraction (e.g. 1, 1.5, .5) and suffix is one of "
            "n, u, m, k, M, G, T, P, E (powers of 1000), Ki, Mi, Gi, Ti, Pi, Ei "
            "(powers of 1024) or e<exponent> (e.g. 1e3, 12E-3); no spaces"
        )


class QuantityFormat(enum.StrEnum):
    """The notation family a quantity is written back in."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


NANO: Final = 10**9
MAX_UNITS: Final = 2**63 - 1
_MAX_NANOS: Final = MAX_UNITS * NANO

_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXP: Final[dict[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
_BINARY_BY_POWER: Final[tuple[str, ...]] = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_MAX_DECIMAL_EXP: Final = 18

# The validation pattern of Kubernetes' published OpenAPI schema for quantities.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
# Exponents beyond this can only produce 0-rounded-up or capped values; bounding them
# keeps a hostile "1e999999999" from building a gigantic integer.
_EXP_LIMIT: Final = 64
# Larger written exponents are refused rather than expanded into enormous integers.
_MAX_WRITTEN_EXP: Final = 1000
# Up to this many significant digits the API server keeps the written value as is;
# longer or finer-than-nano values take its arbitrary-precision path, which caps.
_FAST_DIGITS: Final = 18
# Longer numbers are refused before any arithmetic: no quantity needs them, and reading
# them would cost quadratic time (and hit Python's limit on integer digits).
_MAX_DIGITS: Final = 1000


def _ceil_div_away(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded away from zero (denominator > 0)."""
    q, r = divmod(abs(numerator), denominator)
    if r:
        q += 1
    return -q if numerator < 0 else q


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity: ``nanos`` nano-units written in ``format``.

    Equality, ordering and hashing look only at the amount, so ``1`` == ``1000m``.
    """

    nanos: int
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    # -- construction -----------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Read a quantity string exactly as the API server would."""
        if not isinstance(text, str):
            raise QuantityError(text, "not a string")
        # Quantities are immutable and clusters repeat the same few strings ("100m",
        # "1Gi") in every pod, so remembered parses are shared.
        return _parse_cached(text)

    @classmethod
    def _parse(cls, text: str) -> Quantity:
        m = _QUANTITY_RE.fullmatch(text)
        if m is None:
            raise QuantityError(text)
        int_part = m.group("int")
        frac_part = m.group("frac") or ""
        if not int_part and not frac_part:
            raise QuantityError(text, "no digits")
        suffix = m.group("suffix") or ""
        if len(int_part) + len(frac_part) > _MAX_DIGITS or len(suffix) > _MAX_DIGITS:
            raise QuantityError(text, f"more than {_MAX_DIGITS} digits")
        negative = m.group("sign") == "-"
        mantissa = int(int_part or "0") * 10 ** len(frac_part) + int(frac_part or "0")
        decimal_exp = -len(frac_part)
        binary_power = 0
        fmt = QuantityFormat.DECIMAL_SI
        if suffix in _BINARY_SUFFIXES:
            fmt = QuantityFormat.BINARY_SI
            binary_power = _BINARY_SUFFIXES[suffix]
        elif suffix in _DECIMAL_SUFFIXES:
            decimal_exp += _DECIMAL_SUFFIXES[suffix]
        else:
            fmt = QuantityFormat.DECIMAL_EXPONENT
            decimal_exp += int(suffix[1:])
        if decimal_exp > _MAX_WRITTEN_EXP:
            raise QuantityError(text, f"exponent above {_MAX_WRITTEN_EXP}")
        nanos = _to_nanos(mantissa, decimal_exp, binary_power, cap=_caps(m, fmt, decimal_exp))
        if fmt is QuantityFormat.BINARY_SI and 0 < nanos < NANO:
            fmt = QuantityFormat.DECIMAL_SI
        return cls(-nanos if negative else nanos, fmt)

    @classmethod
    def from_int(cls, value: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Whole units (bytes, cpus, pods), like ``resource.NewQuantity``."""
        _require_int(value)
        return cls(value * NANO, fmt)

    @classmethod
    def from_milli(cls, milli: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Thousandths of a unit (millicpu), like ``resource.NewMilliQuantity``."""
        _require_int(milli)
        return cls(milli * 10**6, fmt)

    @classmethod
    def from_bytes(cls, value: int) -> Quantity:
        """A byte count that prints in binary SI (``1Gi``) when it divides evenly."""
        return cls.from_int(value, QuantityFormat.BINARY_SI)

    @classmethod
    def zero(cls) -> Quantity:
        return cls(0)

    # -- reading ----------------------------------------------------------------------

    def value(self) -> int:
        """Whole units, rounded away from zero (ceil for positive amounts)."""
        return _ceil_div_away(self.nanos, NANO)

    def milli_value(self) -> int:
        """Thousandths of a unit, rounded away from zero (ceil for positive amounts)."""
        return _ceil_div_away(self.nanos, 10**6)

    def scaled_value(self, exponent: int) -> int:
        """The amount in units of ``10**exponent``, rounded away from zero."""
        shift = exponent + 9
        if shift <= 0:
            factor: int = 10 ** (-shift)
            return self.nanos * factor
        return _ceil_div_away(self.nanos, 10**shift)

    def as_fraction(self) -> Fraction:
        return Fraction(self.nanos, NANO)

    def as_float(self) -> float:
        """Approximate value for display and plotting only; never for accounting."""
        return self.nanos / NANO

    def is_zero(self) -> bool:
        return self.nanos == 0

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def __bool__(self) -> bool:
        return self.nanos != 0

    # -- arithmetic -------------------------------------------------------------------

    def _result_format(self, other: Quantity) -> QuantityFormat:
        return other.format if self.nanos == 0 else self.format

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos + other.nanos, self._result_format(other))

    def __radd__(self, other: int) -> Quantity:
        """Only so that ``sum(quantities)`` works: its implicit start is the integer 0."""
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos - other.nanos, self._result_format(other))

    def __mul__(self, factor: int) -> Quantity:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        return Quantity(self.nanos * factor, self.format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity(-self.nanos, self.format)

    def __abs__(self) -> Quantity:
        return Quantity(abs(self.nanos), self.format)

    # -- comparison -------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos < other.nanos

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos <= other.nanos

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos > other.nanos

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos >= other.nanos

    # -- writing ----------------------------------------------------------------------

    def __str__(self) -> str:
        return _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def to_json(self) -> str:
        return str(self)

    # -- pydantic ---------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """Let pydantic models hold quantities: accept str/int, dump the canonical string."""
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            _pydantic_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The schema Kubernetes publishes for quantities (int or string, this pattern)."""
        return {
            "anyOf": [{"type": "integer"}, {"type": "string", "pattern": QUANTITY_PATTERN}],
            "x-kubernetes-int-or-string": True,
        }


def _pydantic_validate(value: Any) -> Quantity:
    return parse_quantity(value)


def _require_int(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuantityError(value, "an integer is required")


def _to_nanos(mantissa: int, decimal_exp: int, binary_power: int, cap: bool) -> int:
    """|mantissa * 10**decimal_exp * 2**binary_power| in nano-units, rounded up (and capped)."""
    if mantissa == 0:
        return 0
    shift = decimal_exp + 9
    if shift < -_EXP_LIMIT - len(str(mantissa)):
        return 1
    numerator = mantissa << binary_power
    if shift >= 0:
        nanos: int = numerator * 10**shift
    else:
        nanos = _ceil_div_away(numerator, 10 ** (-shift))
    return min(nanos, _MAX_NANOS) if cap else nanos


def _caps(m: re.Match[str], fmt: QuantityFormat, decimal_exp: int) -> bool:
    """Whether the API server would clamp this input at 2**63-1 units.

    It stores short decimal inputs verbatim (so ``12E`` stays 12E) and only clamps those
    that go through its arbitrary-precision path: binary suffixes whose value could
    overflow, and decimals with many digits or finer than a nano-unit.
    """
    digits = len((m.group("int") or "").lstrip("0") or "0") + len(m.group("frac") or "")
    if fmt is QuantityFormat.BINARY_SI:
        return True  # binary amounts that fit never reach the cap anyway
    return digits > _FAST_DIGITS or decimal_exp < -9


def _strip_factor(value: int, base: int) -> tuple[int, int]:
    times = 0
    while value % base == 0:
        value //= base
        times += 1
    return value, times


def _canonical(nanos: int, fmt: QuantityFormat) -> str:
    if nanos == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI and abs(nanos) >= 1024 * NANO and nanos % NANO == 0:
        amount, power = _strip_factor(nanos // NANO, 1024)
        if power >= len(_BINARY_BY_POWER):
            amount *= 1024 ** (power - len(_BINARY_BY_POWER) + 1)
            power = len(_BINARY_BY_POWER) - 1
        return f"{amount}{_BINARY_BY_POWER[power]}"
    amount, times = _strip_factor(nanos, 10)
    exponent = times - 9
    remainder = exponent % 3
    amount *= 10**remainder
    exponent -= remainder
    if fmt is QuantityFormat.DECIMAL_EXPONENT:
        return f"{amount}e{exponent}" if exponent else str(amount)
    if exponent > _MAX_DECIMAL_EXP:
        # Only reachable through arithmetic past the parse cap; stay parseable.
        amount *= 10 ** (exponent - _MAX_DECIMAL_EXP)
        exponent = _MAX_DECIMAL_EXP
    return f"{amount}{_DECIMAL_BY_EXP[exponent]}"


def parse_quantity(value: str | int | float | Quantity) -> Quantity:
    """Read a quantity from manifest-shaped input.

    YAML hands over ``cpu: 2`` as an int and ``cpu: 0.5`` as a float; both are accepted
    when they denote an exact decimal with at most nine fractional digits, so a float
    never smuggles binary rounding error into accounting.
    """
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise QuantityError(value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Quantity.parse(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, "not a finite number")
        try:
            dec = Decimal(repr(value))
        except InvalidOperation as exc:  # pragma: no cover - repr of a finite float parses
            raise QuantityError(value) from exc
        exp = dec.as_tuple().exponent
        if not isinstance(exp, int) or exp < -9:
            raise QuantityError(value, "more than nine decimal places; write it as a string")
        return Quantity.parse(format(dec, "f"))
    if isinstance(value, str):
        return Quantity.parse(value)
    raise QuantityError(value, f"unsupported type {type(value).__name__}")


def format_quantity(value: Quantity | str | int) -> str:
    """The canonical string the API server would store for ``value``."""
    return str(parse_quantity(value))


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str) -> Quantity:
    return Quantity._parse(text)
