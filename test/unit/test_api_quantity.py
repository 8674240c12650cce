"""Kubernetes quantities: exact parsing, canonical formatting, arithmetic."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from controller.api import Quantity
from controller.api.quantity import PATTERN


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("10Gi", 10 * 2**30),
        ("1Ki", 1024),
        ("1.5Gi", Fraction(3, 2) * 2**30),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("2e3", 2000),
        ("5E-3", Fraction(5, 1000)),
        ("96", 96),
        ("+3", 3),
        ("1k", 1000),
        ("8Ti", 8 * 2**40),
        ("250n", Fraction(250, 10**9)),
        ("0", 0),
        (96, 96),
        (0, 0),
    ],
)
def test_parse_is_exact(text: str | int, amount: Fraction | int) -> None:
    assert Quantity.parse(text).amount == amount


@pytest.mark.parametrize(
    "bad", ["-1", "1.5.5", "10GB", "", "abc", "1Gi ", "Gi", "1e1.5", -3, 1.5, True, None]
)
def test_parse_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        Quantity.parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10Gi", "10Gi"),
        ("1.5Gi", "1536Mi"),
        ("1024Mi", "1Gi"),
        ("1000Mi", "1000Mi"),
        ("0.5", "500m"),
        ("1500m", "1500m"),
        ("1000m", "1"),
        ("96", "96"),
        ("1e3", "1e3"),
        ("2000", "2k"),
        ("0.5Ki", "512"),
        ("1.5Ki", "1536"),
        ("1n", "1n"),
        ("0", "0"),
    ],
)
def test_canonical_string(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical
    assert Quantity.parse(canonical) == Quantity.parse(text)


def test_multiply_per_gpu_sizes() -> None:
    assert str(Quantity.parse("2048Mi") * 4) == "8Gi"
    assert str(8 * Quantity.parse("10Gi")) == "80Gi"
    assert str(Quantity.parse("1.5Gi") * 3) == "4608Mi"
    assert Quantity.parse("250m") * 4 == Quantity.parse("1")
    assert Quantity.parse("2Gi") * 0 == Quantity.parse("0")


def test_compare_and_add_by_amount() -> None:
    assert Quantity.parse("1Gi") == Quantity.parse(str(2**30))
    assert hash(Quantity.parse("1Gi")) == hash(Quantity.parse("1024Mi"))
    assert Quantity.parse("1G") < Quantity.parse("1Gi")
    assert Quantity.parse("500m") <= Quantity.parse("0.5")
    assert Quantity.parse("1Ti") > Quantity.parse("1000Gi")
    assert str(Quantity.parse("1Gi") + Quantity.parse("512Mi")) == "1536Mi"
    assert Quantity.parse("1") != 1


def test_values_round_up_like_apimachinery() -> None:
    assert Quantity.parse("1.5").value() == 2
    assert Quantity.parse("1500m").milli_value() == 1500
    assert Quantity.parse("1n").milli_value() == 1
    assert Quantity.parse("10Gi").value() == 10 * 2**30
    assert Quantity.parse("0").is_zero()


def test_schema_pattern_agrees_with_parser() -> None:
    regex = re.compile(PATTERN)
    for text in ["10Gi", "500m", "1.5", "2e3", ".5", "+1"]:
        assert regex.match(text)
        Quantity.parse(text)
    for text in ["-1", "10GB", "1.5.5", "1e1.5"]:
        assert not regex.match(text)
