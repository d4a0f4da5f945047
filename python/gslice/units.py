"""Human units for operators: byte sizes ("4GiB", "512MiB", "1.5GB", 4096)
and GPU shares (0.3, "30%", "0.3")."""
from __future__ import annotations

import decimal
import math
import re

from .errors import InvalidValue

_BYTE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_BYTES_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_BYTES_ACCEPTED = "a whole number of bytes or a size like 4GiB, 512MiB, 1.5GB, 64KiB"
# Largest size the protocol carries (uint64).
MAX_BYTES = 2**64 - 1


def parse_bytes(value: int | float | str) -> int:
    """Bytes from an int or a string with an optional SI/IEC unit; must be > 0."""
    if isinstance(value, bool):
        raise InvalidValue(f"memory size {value!r} is a boolean; expected {_BYTES_ACCEPTED}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InvalidValue(f"memory size {value!r} is not a whole number of bytes; expected {_BYTES_ACCEPTED}")
        number = int(value)
    elif isinstance(value, str):
        match = _BYTES_RE.match(value)
        if not match or match.group(2).lower() not in _BYTE_UNITS:
            raise InvalidValue(f"memory size {value!r} is not understood; expected {_BYTES_ACCEPTED}")
        number = _scaled_size(value, match.group(1), _BYTE_UNITS[match.group(2).lower()])
    else:
        raise InvalidValue(f"memory size {value!r} has type {type(value).__name__}; expected {_BYTES_ACCEPTED}")
    if number <= 0:
        raise InvalidValue(f"memory size {value!r} must be more than 0 bytes")
    if number > MAX_BYTES:
        raise InvalidValue(f"memory size {value!r} is larger than the protocol's limit of {MAX_BYTES} bytes")
    return number


def _scaled_size(value: str, digits: str, unit: int) -> int:
    """`digits` (as the pattern matched them) times `unit`, exactly: a float
    would turn 9007199254740993 into ...992 and sizes near 2**64 into others."""
    whole, _, fraction = digits.partition(".")
    whole = whole.lstrip("0")
    # More digits than MAX_BYTES has is larger than it whatever the unit; the
    # check also keeps int() and Decimal below their limits on huge strings.
    if len(whole) > len(str(MAX_BYTES)):
        raise InvalidValue(f"memory size {value!r} is larger than the protocol's limit of {MAX_BYTES} bytes")
    fraction = fraction.rstrip("0")
    if not fraction:
        return int(whole or "0") * unit
    # Every unit divides 10**12 * 2**40 at most: more decimals than 40 never make whole bytes.
    if len(fraction) > 40:
        raise InvalidValue(f"memory size {value!r} is not a whole number of bytes; expected {_BYTES_ACCEPTED}")
    with decimal.localcontext() as exact:
        exact.prec = 100  # > 21 + 40 + 13 digits: the product below is never rounded
        scaled = decimal.Decimal(f"{whole or '0'}.{fraction}") * unit
    if scaled != scaled.to_integral_value():
        raise InvalidValue(f"memory size {value!r} is not a whole number of bytes; expected {_BYTES_ACCEPTED}")
    return int(scaled)


def format_bytes(value: int) -> str:
    """Short IEC form: 4294967296 -> '4GiB', 1536 -> '1.5KiB', 100 -> '100B'."""
    if value < 0:
        raise InvalidValue(f"memory size {value!r} is negative")
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            text = f"{value / size:.2f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return f"{value}B"


_SHARE_ACCEPTED = "a fraction in (0, 1] like 0.3, or a percentage in (0%, 100%] like 30%"


def parse_share(value: int | float | str) -> float:
    """A GPU-time fraction in (0, 1] from 0.3, "0.3" or "30%"."""
    if isinstance(value, bool):
        raise InvalidValue(f"share {value!r} is a boolean; expected {_SHARE_ACCEPTED}")
    if isinstance(value, (int, float)):
        share = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            share = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            raise InvalidValue(f"share {value!r} is not a number; expected {_SHARE_ACCEPTED}") from None
    else:
        raise InvalidValue(f"share {value!r} has type {type(value).__name__}; expected {_SHARE_ACCEPTED}")
    if not math.isfinite(share) or not 0.0 < share <= 1.0:
        raise InvalidValue(f"share {value!r} is out of range; expected {_SHARE_ACCEPTED}")
    return share


def format_share(share: float) -> str:
    """0.3 -> '30%', 0.125 -> '12.5%'."""
    text = f"{share * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"
