"""Intervals and sizes as AMPS writes them: examples, round trips and garbage."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import ConfigError, format_interval, format_size, parse_interval, parse_size
from broker.config.units import INTERVAL_UNITS, SIZE_UNITS
from broker.config.values import parse_address, parse_bool


@pytest.mark.parametrize(("text", "seconds"), [
    ("1ns", 1e-9), ("250us", 250e-6), ("100ms", 0.1), ("10s", 10.0), ("15m", 900.0), ("1h", 3600.0),
    ("48h", 172800.0), ("7d", 604800.0), ("1w", 604800.0), ("1.5h", 5400.0), (".5s", 0.5), ("0s", 0.0),
    (" 10s ", 10.0), ("10 s", 10.0), ("10S", 10.0), ("2MS", 0.002),
])
def test_interval_examples(text: str, seconds: float) -> None:
    assert math.isclose(parse_interval(text), seconds, rel_tol=1e-12)


@pytest.mark.parametrize(("text", "expected"), [
    ("banana", "'banana' is not an interval (expected e.g. 10m, 1h, 7d"),
    ("10", "'10' has no unit: write e.g. 10s"),
    ("10y", "unknown unit 'y'"),
    ("-1s", "is not an interval"),
    ("1e3s", "is not an interval"),
    ("", "is not an interval"),
    ("s", "is not an interval"),
])
def test_interval_errors_say_what_to_write(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_interval(text)
    assert expected in str(info.value)


@pytest.mark.parametrize(("text", "size"), [
    ("0", 0), ("4096", 4096), ("100b", 100), ("1KB", 1024), ("1kb", 1024), ("1K", 1024), ("10MB", 10 << 20),
    ("10mb", 10 << 20), ("10M", 10 << 20), ("1GB", 1 << 30), ("2G", 2 << 30), ("1TB", 1 << 40),
    ("1t", 1 << 40), ("0.5GB", 1 << 29), ("1.5KB", 1536), (" 5 MB ", 5 << 20),
])
def test_size_examples_are_1024_based(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["banana", "10XB", "-1MB", "MB", "1,5MB", "10 M B", ""])
def test_size_garbage(text: str) -> None:
    with pytest.raises(ConfigError, match="size"):
        parse_size(text)


def test_parse_errors_are_also_value_errors() -> None:
    """Callers that catch ValueError (as the validator does) see unit errors too."""
    with pytest.raises(ValueError):
        parse_size("lots")


_units = st.sampled_from(sorted(INTERVAL_UNITS))


@given(
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False),
    _units,
    st.sampled_from([str.lower, str.upper]),
    st.sampled_from(["", " "]),
)
def test_interval_round_trip(value: Decimal, unit: str, case, space: str) -> None:
    text = f"{value}{space}{case(unit)}"
    assert math.isclose(parse_interval(text), float(value * INTERVAL_UNITS[unit]), rel_tol=1e-9, abs_tol=1e-15)


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(sorted(SIZE_UNITS)),
       st.sampled_from([str.lower, str.upper]))
def test_size_round_trip(count: int, suffix: str, case) -> None:
    assert parse_size(f"{count}{case(suffix)}") == count * SIZE_UNITS[suffix]


@given(st.integers(min_value=1, max_value=10**12))
def test_format_size_parses_back(size: int) -> None:
    assert parse_size(format_size(size)) == size


@given(st.integers(min_value=1, max_value=10**15), _units)
def test_format_interval_parses_back(count: int, unit: str) -> None:
    seconds = float(count * INTERVAL_UNITS[unit])
    assert math.isclose(parse_interval(format_interval(seconds)), seconds, rel_tol=1e-12)


_garbage = st.text(max_size=12).filter(lambda t: not any(c.isdigit() for c in t))


@given(_garbage)
def test_interval_garbage_without_digits_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_interval(text)


@given(_garbage.filter(lambda t: t.strip().lower() not in SIZE_UNITS or not t.strip()))
def test_size_garbage_without_digits_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_size(text)


@given(st.text(max_size=16))
def test_unit_parsers_raise_only_config_error(text: str) -> None:
    for parse in (parse_interval, parse_size):
        try:
            value = parse(text)
        except ConfigError:
            continue
        assert value >= 0


@pytest.mark.parametrize(("text", "address"), [
    ("9007", ("0.0.0.0", 9007)), ("localhost:8085", ("localhost", 8085)),
    ("127.0.0.1:9007", ("127.0.0.1", 9007)), ("[::1]:9007", ("::1", 9007)), ("[::]:8445", ("::", 8445)),
    ("0", ("0.0.0.0", 0)),
])
def test_addresses(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "70000", "host:", "::1:9007", "[::1]9007", "[nothex]:1", "a b:1", "x"])
def test_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


@pytest.mark.parametrize(("text", "value"), [("true", True), ("Enabled", True), ("1", True),
                                             ("false", False), ("DISABLED", False), ("no", False)])
def test_booleans(text: str, value: bool) -> None:
    assert parse_bool(text) is value
