"""Human units of the operator API: sizes and shares."""
import pytest

from gslice.errors import InvalidValue
from gslice.units import format_bytes, format_share, parse_bytes, parse_share


@pytest.mark.parametrize("text, expected", [
    ("4GiB", 4 * 1024**3), ("512MiB", 512 * 1024**2), ("1.5GB", 1_500_000_000), (4096, 4096),
    ("64KiB", 65536), ("1gib", 1024**3), (" 2 MiB ", 2 * 1024**2), ("100", 100), ("1.5KiB", 1536),
    (2.0, 2),
])
def test_parse_bytes_accepts_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "GiB", "4 gigs", "-1GiB", 0, -5, "0", "1.5", 1.5, True, None, "4GiB4", "nan",
                                 2**64])
def test_parse_bytes_refuses_with_the_value_in_the_message(bad):
    with pytest.raises(InvalidValue) as info:
        parse_bytes(bad)
    assert repr(bad) in str(info.value)


def test_invalid_value_is_a_value_error():
    with pytest.raises(ValueError):
        parse_bytes("lots")


@pytest.mark.parametrize("value, expected", [
    (4 * 1024**3, "4GiB"), (1536, "1.5KiB"), (100, "100B"), (512 * 1024**2, "512MiB"), (0, "0B"),
])
def test_format_bytes(value, expected):
    assert format_bytes(value) == expected


@pytest.mark.parametrize("size", [1, 1023, 1024, 3 * 1024**3, 7 * 1024**4])
def test_format_then_parse_round_trips_exact_sizes(size):
    assert parse_bytes(format_bytes(size)) == size


@pytest.mark.parametrize("value, expected", [
    (0.3, 0.3), ("30%", 0.3), ("0.3", 0.3), (1, 1.0), ("100%", 1.0), (" 12.5% ", 0.125),
])
def test_parse_share(value, expected):
    assert parse_share(value) == pytest.approx(expected)


@pytest.mark.parametrize("bad", [0, "0%", 1.01, "101%", -0.1, "thirty", "", None, True, float("nan"), "inf"])
def test_parse_share_refuses_out_of_range(bad):
    with pytest.raises(InvalidValue) as info:
        parse_share(bad)
    assert repr(bad) in str(info.value)
    assert "(0, 1]" in str(info.value)


def test_format_share():
    assert format_share(0.3) == "30%"
    assert format_share(0.125) == "12.5%"


@pytest.mark.parametrize("text, expected", [
    ("9007199254740993", 2**53 + 1),                  # a float makes it 2**53
    ("18446744073709551615", 2**64 - 1),              # exactly the protocol's limit
    ("16777215.9999990463256835937500TiB", 2**64 - 2**20),
    ("0.000976562500KiB", 1),
    ("0" * 5000 + "7", 7),
])
def test_parse_bytes_is_exact_for_large_and_fractional_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad, message", [
    ("18446744073709551616", "larger than the protocol's limit"),
    ("9" * 5000, "larger than the protocol's limit"),
    ("1.0000000001GiB", "not a whole number of bytes"),   # a float rounded this to 1GiB
    ("0." + "0" * 5000 + "1KiB", "not a whole number of bytes"),
])
def test_parse_bytes_refuses_exactly(bad, message):
    with pytest.raises(InvalidValue) as info:
        parse_bytes(bad)
    assert message in str(info.value) and repr(bad) in str(info.value)
