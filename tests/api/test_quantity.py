"""Quantities must read and print exactly as the Kubernetes API server does."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api.quantity import (
    QUANTITY_PATTERN,
    Quantity,
    QuantityError,
    QuantityFormat,
    format_quantity,
    parse_quantity,
)

# Canonical strings the API server stores for these inputs.
CANONICAL = [
    ("0", "0"),
    ("0m", "0"),
    ("0Gi", "0"),
    ("-0", "0"),
    ("1", "1"),
    ("1500m", "1500m"),
    ("1.5", "1500m"),
    ("0.1", "100m"),
    (".5", "500m"),
    ("1.", "1"),
    ("1.G", "1G"),
    ("1000", "1k"),
    ("50k", "50k"),
    ("1000M", "1G"),
    ("0.001T", "1G"),
    ("1.08", "1080m"),
    ("1080000000n", "1080m"),
    ("100.035k", "100035"),
    ("10.035M", "10035k"),
    ("+1k", "1k"),
    ("-1500m", "-1500m"),
    ("1024Mi", "1Gi"),
    ("307200Ki", "300Mi"),
    ("1025024Mi", "1001Gi"),
    ("1024Gi", "1Ti"),
    ("6Ki", "6Ki"),
    ("1.5Gi", "1536Mi"),
    ("0.5Mi", "512Ki"),
    ("0.5Ki", "512"),
    ("1.5Ki", "1536"),
    ("-1Ki", "-1Ki"),
    ("1e3", "1e3"),
    ("1E6", "1e6"),
    ("12E-3", "12e-3"),
    ("1.5e3", "1500"),
    ("1.3E+6", "1300e3"),
    ("0.5e-9", "1e-9"),
    ("1E", "1E"),
    ("12E", "12E"),
    # rounding up to the nano-unit, and the int64 cap
    ("3.001n", "4n"),
    ("0.0000000001", "1n"),
    ("0.00000012345", "124n"),
    ("0.000000000001Ki", "2n"),
    ("9Ei", "9223372036854775807"),
    # short decimals are kept as written, even past int64; long ones are clamped
    ("1e30", "1e30"),
    ("12345678901234567890", "9223372036854775807"),
]


@pytest.mark.parametrize(("text", "canonical"), CANONICAL)
def test_canonical_form_matches_kubernetes(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical
    assert format_quantity(text) == canonical


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "12 Gi",
        "1.5.5",
        "1.1.M",
        "1+1.0M",
        "Gi",
        "1gi",
        "1K",
        "0.1mi",
        "1i",
        "--1",
        "+-1",
        "-",
        ".",
        "e3",
        "1e",
        "-3.01e-",
        "1e3.5",
        "aoeu",
        "1\n",
        "١",  # a non-ASCII digit
    ],
)
def test_invalid_strings_are_rejected_with_the_value_and_the_forms(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        Quantity.parse(text)
    message = str(info.value)
    assert repr(text) in message
    assert "Ki" in message and "e<exponent>" in message
    assert isinstance(info.value, ValueError)


def test_format_family_is_remembered() -> None:
    assert Quantity.parse("1Gi").format is QuantityFormat.BINARY_SI
    assert Quantity.parse("1G").format is QuantityFormat.DECIMAL_SI
    assert Quantity.parse("1e9").format is QuantityFormat.DECIMAL_EXPONENT
    # binary amounts below one unit are written in decimal, as the API server does
    assert Quantity.parse("0.000000000001Ki").format is QuantityFormat.DECIMAL_SI


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("1500m", 2, 1500),
        ("1", 1, 1000),
        ("1n", 1, 1),
        ("999999n", 1, 1),
        ("1000001n", 1, 2),
        ("0", 0, 0),
        ("-1500m", -2, -1500),
        ("1Gi", 2**30, 2**30 * 1000),
    ],
)
def test_value_and_milli_value_round_away_from_zero(text: str, value: int, milli: int) -> None:
    q = Quantity.parse(text)
    assert q.value() == value
    assert q.milli_value() == milli


def test_equality_and_hash_ignore_notation() -> None:
    assert Quantity.parse("1") == Quantity.parse("1000m")
    assert Quantity.parse("1Ki") == Quantity.parse("1024")
    assert Quantity.parse("1e3") == Quantity.parse("1k")
    assert hash(Quantity.parse("1")) == hash(Quantity.parse("1000m"))
    assert len({Quantity.parse("2"), Quantity.parse("2000m"), Quantity.parse("2e0")}) == 1
    assert Quantity.parse("1") != Quantity.parse("1001m")
    assert Quantity.parse("1") != "1"


def test_arithmetic_keeps_left_format_unless_left_is_zero() -> None:
    total = Quantity.parse("1Gi") + Quantity.parse("512Mi")
    assert str(total) == "1536Mi"
    assert str(Quantity.parse("0") + Quantity.parse("1Gi")) == "1Gi"
    assert str(Quantity.parse("2") - Quantity.parse("500m")) == "1500m"
    assert str(Quantity.parse("100m") * 3) == "300m"
    assert str(-Quantity.parse("1Ki")) == "-1Ki"


def test_constructors() -> None:
    assert str(Quantity.from_milli(1500)) == "1500m"
    assert str(Quantity.from_int(4)) == "4"
    assert str(Quantity.from_bytes(2**31)) == "2Gi"
    assert Quantity.zero().is_zero()
    with pytest.raises(QuantityError):
        Quantity.from_milli(1.5)  # type: ignore[arg-type]
    with pytest.raises(QuantityError):
        Quantity.from_int(True)


def test_parse_quantity_accepts_yaml_scalars() -> None:
    assert parse_quantity(2) == Quantity.parse("2")
    assert parse_quantity(0.5) == Quantity.parse("500m")
    assert parse_quantity(0.1) == Quantity.parse("100m")
    assert parse_quantity(1e-9) == Quantity.parse("1n")
    q = Quantity.parse("3Gi")
    assert parse_quantity(q) is q
    for bad in (1e-10, 0.1234567891, math.inf, math.nan, True, None, [1]):
        with pytest.raises(QuantityError):
            parse_quantity(bad)  # type: ignore[arg-type]


def test_pydantic_models_can_hold_quantities() -> None:
    from pydantic import BaseModel, ValidationError

    class Limits(BaseModel):
        memory: Quantity

    model = Limits.model_validate({"memory": "1024Mi"})
    assert model.memory == Quantity.parse("1Gi")
    assert model.model_dump(mode="json") == {"memory": "1Gi"}
    with pytest.raises(ValidationError, match="invalid quantity"):
        Limits.model_validate({"memory": "1 Gi"})
    schema = Limits.model_json_schema()["properties"]["memory"]
    assert schema["x-kubernetes-int-or-string"] is True


def test_sum_of_quantities() -> None:
    parts = [Quantity.parse("1"), Quantity.parse("500m"), Quantity.parse("250m")]
    assert str(sum(parts)) == "1750m"
    with pytest.raises(TypeError):
        _ = 1 + Quantity.parse("1")  # type: ignore[operator]


def test_huge_written_exponents_are_refused() -> None:
    with pytest.raises(QuantityError, match="exponent above 1000"):
        Quantity.parse("1e1001")
    assert str(Quantity.parse("1e-999999999999")) == "1e-9"


# -- properties --------------------------------------------------------------------

_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantity_strings(draw: st.DrawFn) -> str:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(min_value=0, max_value=10**7))
    frac = draw(st.one_of(st.none(), st.text(alphabet="0123456789", min_size=1, max_size=6)))
    kind = draw(st.sampled_from(["suffix", "exponent"]))
    if kind == "suffix":
        suffix = draw(st.sampled_from(_SUFFIXES))
    else:
        suffix = draw(st.sampled_from("eE")) + str(draw(st.integers(-12, 12)))
    number = str(whole) if frac is None else f"{whole}.{frac}"
    return f"{sign}{number}{suffix}"


nanos = st.integers(min_value=-(10**24), max_value=10**24)
formats = st.sampled_from(list(QuantityFormat))


@given(quantity_strings())
def test_canonical_string_round_trips(text: str) -> None:
    q = Quantity.parse(text)
    again = Quantity.parse(str(q))
    assert again == q
    assert str(again) == str(q)


@given(quantity_strings())
def test_accepted_strings_match_the_published_pattern(text: str) -> None:
    Quantity.parse(text)
    assert re.fullmatch(QUANTITY_PATTERN, text)


@given(nanos, formats)
def test_canonical_strings_match_the_published_pattern(n: int, fmt: QuantityFormat) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, str(Quantity(n, fmt)))


@given(nanos, formats)
def test_any_amount_prints_parseably(n: int, fmt: QuantityFormat) -> None:
    q = Quantity(n, fmt)
    assert Quantity.parse(str(q)) == q


@given(quantity_strings())
def test_parse_rounds_up_to_the_nano_unit(text: str) -> None:
    """Parsed value is the written value rounded away from zero to 1e-9.

    Binary amounts are clamped at 2**63-1 units; short decimal ones are kept as written.
    """
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    exact = _exact_value(body)
    q = Quantity.parse(text)
    capped = math.ceil(exact * 10**9)
    if body.endswith("i"):
        capped = min(capped, (2**63 - 1) * 10**9)
    assert q.nanos == sign * capped


def _exact_value(body: str) -> Fraction:
    for suffix, factor in [
        ("Ki", 2**10),
        ("Mi", 2**20),
        ("Gi", 2**30),
        ("Ti", 2**40),
        ("Pi", 2**50),
        ("Ei", 2**60),
    ]:
        if body.endswith(suffix):
            return Fraction(body[: -len(suffix)]) * factor
    exponent_form = re.fullmatch(r"([0-9.]+)[eE]([+-]?[0-9]+)", body)
    if exponent_form:
        return Fraction(exponent_form.group(1)) * Fraction(10) ** int(exponent_form.group(2))
    powers = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
    if body[-1] in powers:
        return Fraction(body[:-1]) * Fraction(10) ** powers[body[-1]]
    return Fraction(body)


@given(nanos, nanos, nanos)
def test_arithmetic_is_exact(a: int, b: int, c: int) -> None:
    qa, qb, qc = Quantity(a), Quantity(b), Quantity(c)
    assert (qa + qb).as_fraction() == qa.as_fraction() + qb.as_fraction()
    assert (qa - qb).as_fraction() == qa.as_fraction() - qb.as_fraction()
    assert (qa + qb) + qc == qa + (qb + qc)
    assert qa + qb - qb == qa


@given(st.lists(st.sampled_from(["0.1", "100m", "0.3", "1n", "1Ki", "2.5"]), max_size=40))
def test_many_small_sums_do_not_drift(parts: list[str]) -> None:
    total = Quantity.zero()
    for part in parts:
        total = total + Quantity.parse(part)
    assert total.as_fraction() == sum((Quantity.parse(p).as_fraction() for p in parts), Fraction(0))


@given(nanos)
def test_milli_and_unit_values_never_round_down(n: int) -> None:
    q = Quantity(n)
    exact = q.as_fraction()
    if n >= 0:
        assert q.milli_value() == math.ceil(exact * 1000)
        assert q.value() == math.ceil(exact)
    else:
        assert q.milli_value() == -math.ceil(-exact * 1000)
        assert q.value() == -math.ceil(-exact)


@given(nanos, formats, nanos, formats)
def test_ordering_agrees_with_exact_values(
    a: int, fa: QuantityFormat, b: int, fb: QuantityFormat
) -> None:
    qa, qb = Quantity(a, fa), Quantity(b, fb)
    fa_, fb_ = qa.as_fraction(), qb.as_fraction()
    assert (qa < qb) == (fa_ < fb_)
    assert (qa <= qb) == (fa_ <= fb_)
    assert (qa > qb) == (fa_ > fb_)
    assert (qa == qb) == (fa_ == fb_)
    if qa == qb:
        assert hash(qa) == hash(qb)
