"""Kubernetes resource quantities ("10Gi", "500m", "1.5", "2e3"), exact.

`Quantity` keeps the amount as a `Fraction`, so `sizePerGPU × GPUs` and comparisons never lose
precision, and remembers the notation it was written in (binary `Ki`..`Ei`, decimal `n`..`E`, or
an `e` exponent) so that `str()` writes it back the way Kubernetes would canonicalise it:
`1.5Gi` → `1536Mi`, `0.5` → `500m`, `2048Mi × 4` → `8Gi`. Like apimachinery, amounts finer than
a nano-unit are rounded up when written.

Only non-negative quantities are accepted: every quantity in our API is a size or a count.
`PATTERN` is the one regular expression both the CRD schema and `Quantity.parse` use.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

# Non-negative Kubernetes quantity: digits, optional fraction, optional suffix or integer exponent.
PATTERN: Final = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_RE: Final = re.compile(PATTERN)

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_BY_POWER: Final = {power: suffix for suffix, power in _BINARY.items()}
_DECIMAL_BY_EXPONENT: Final = {exp: suffix for suffix, exp in _DECIMAL.items()}


class QuantityFormat(enum.Enum):
    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


@dataclass(frozen=True, eq=False)
class Quantity:
    """An exact non-negative amount; equality, ordering and hashing look at the amount only."""

    amount: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    @classmethod
    def parse(cls, value: str | int | Quantity) -> Quantity:
        """Parse a quantity as it appears in JSON (a string, or an integer for plain counts)."""
        if isinstance(value, Quantity):
            return value
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"quantity must be a string or an integer, not {type(value).__name__}")
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"quantity {value} is negative")
            return cls(Fraction(value))
        match = _RE.match(value)
        if match is None:
            raise ValueError(f'"{value}" is not a non-negative quantity such as 10Gi, 500m or 1.5')
        number, suffix = Fraction(match.group(1)), match.group(3) or ""
        if suffix in _BINARY:
            return cls(number * 1024 ** _BINARY[suffix], QuantityFormat.BINARY_SI)
        if suffix in _DECIMAL:
            return cls(number * Fraction(10) ** _DECIMAL[suffix], QuantityFormat.DECIMAL_SI)
        return cls(number * Fraction(10) ** int(suffix[1:]), QuantityFormat.DECIMAL_EXPONENT)

    def value(self) -> int:
        """The amount in whole units, rounded up (apimachinery's `Value()`): bytes, cores, GPUs."""
        return math.ceil(self.amount)

    def milli_value(self) -> int:
        """The amount in thousandths, rounded up (apimachinery's `MilliValue()`): millicores."""
        return math.ceil(self.amount * 1000)

    def is_zero(self) -> bool:
        return self.amount == 0

    def __mul__(self, factor: int) -> Quantity:
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 0:
            return NotImplemented
        return Quantity(self.amount * factor, self.format)

    __rmul__ = __mul__

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.amount + other.amount, self.format)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def __lt__(self, other: Quantity) -> bool:
        return self.amount < other.amount

    def __le__(self, other: Quantity) -> bool:
        return self.amount <= other.amount

    def __gt__(self, other: Quantity) -> bool:
        return self.amount > other.amount

    def __ge__(self, other: Quantity) -> bool:
        return self.amount >= other.amount

    def __str__(self) -> str:
        if self.format is QuantityFormat.BINARY_SI and self.amount >= 1024 and self.amount.denominator == 1:
            return _format_binary(self.amount.numerator)
        return _format_decimal(self.amount, exponent_notation=self.format is QuantityFormat.DECIMAL_EXPONENT)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _format_binary(amount: int) -> str:
    power = 0
    while power < 6 and amount % 1024 == 0:
        amount //= 1024
        power += 1
    return f"{amount}{_BINARY_BY_POWER.get(power, '')}"


def _format_decimal(amount: Fraction, *, exponent_notation: bool) -> str:
    digits = math.ceil(amount * 10**9)  # whole nano-units; finer amounts round up
    if digits == 0:
        return "0"
    exponent = -9
    while exponent < 18 and digits % 1000 == 0:
        digits //= 1000
        exponent += 3
    if exponent_notation:
        return f"{digits}e{exponent}" if exponent else str(digits)
    return f"{digits}{_DECIMAL_BY_EXPONENT[exponent]}"
