"""Bookmarks: the P|S| scheme, name hashes, and where each bookmark form starts a replay."""

from __future__ import annotations

import calendar
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import CommandError
from broker.txlog.bookmarks import (
    ReplayStart,
    client_name_hash,
    format_bookmark,
    instance_hash,
    name_hash,
    parse_bookmark,
    parse_timestamp,
)

T_2015 = calendar.timegm((2015, 1, 2, 12, 35, 0, 0, 0, 0)) * 10**9


def test_name_hash_is_first_8_bytes_of_blake2b() -> None:
    expected = int.from_bytes(hashlib.blake2b(b"amps-1", digest_size=8).digest(), "big")
    assert name_hash("amps-1") == expected == instance_hash("amps-1") == client_name_hash("amps-1")
    assert name_hash("amps-1") != name_hash("amps-2")
    assert all(name_hash(f"n{i}") > 0 for i in range(1000))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", ReplayStart(after_sequence=0)),
        ("0|1|", ReplayStart(now=True)),
        ("recent", ReplayStart(now=True)),
        ("123|45|", ReplayStart(after_sequence=45, publisher=123)),
        ("20150102T123500", ReplayStart(from_timestamp_ns=T_2015)),
        ("20150102T123500Z", ReplayStart(from_timestamp_ns=T_2015)),
        ("20150102T123500.25", ReplayStart(from_timestamp_ns=T_2015 + 250_000_000)),
        ("20150102T123500.123456789Z", ReplayStart(from_timestamp_ns=T_2015 + 123_456_789)),
        ("7|9|,7|3|,7|12|", ReplayStart(after_sequence=3, publisher=7)),
        (" 7|9| , 0|1| ", ReplayStart(after_sequence=9, publisher=7)),
        ("0|1|,recent", ReplayStart(now=True)),
        ("7|9|,20150102T123500Z", ReplayStart(after_sequence=9, from_timestamp_ns=T_2015, publisher=7)),
        ("20150102T123501Z,20150102T123500Z", ReplayStart(from_timestamp_ns=T_2015)),
    ],
)
def test_parse(text: str, expected: ReplayStart) -> None:
    assert parse_bookmark(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "abc", "0|5|", "5|x|", "12", "1|2|,", "20151302T000000", "20150230T000000", "20150102T246000",
     "20150102T1235", "[1|2|:1|5|]", "99999999999999999999999|1|"],
)
def test_invalid_bookmarks(text: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_bookmark(text)
    assert info.value.reason == "invalid bookmark"
    assert repr(text) in info.value.detail


@given(st.integers(1, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_formatted_bookmarks_parse_back(publisher: int, sequence: int) -> None:
    text = format_bookmark(publisher, sequence)
    assert text == f"{publisher}|{sequence}|"
    assert parse_bookmark(text) == ReplayStart.after(sequence, publisher)


def test_replay_start_includes() -> None:
    assert ReplayStart.epoch().includes(1, 0)
    assert not ReplayStart(now=True).includes(10**9, 10**30)
    mixed = ReplayStart(after_sequence=10, from_timestamp_ns=500)
    assert mixed.includes(11, 0) and mixed.includes(3, 500) and not mixed.includes(10, 499)


def test_timestamp_utc_regardless_of_z() -> None:
    assert parse_timestamp("19700101T000001") == parse_timestamp("19700101T000001Z") == 10**9
