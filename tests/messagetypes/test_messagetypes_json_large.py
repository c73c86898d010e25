"""Issue 34: a large JSON message (``LARGE_MESSAGE``, 64 KiB, or more) is not decoded whole to read a few top-level
members: a filter's lookups, a key generator's key fields, a fan-out's ``prefetch``. The body is scanned and only
those members are decoded, with the values and errors of the full decode.

The checks that fail on a decoding path are allocation peaks (``tracemalloc``): decoding a 20 MB string member
allocates 20 MB; the scan allocates next to nothing.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from broker import speedups
from broker.messagetypes import (
    LARGE_MESSAGE,
    JsonMessage,
    MessageParseError,
    MessageTooDeepError,
    get_message_type,
)
from broker.messagetypes._jsonmembers import Members

pytestmark = pytest.mark.skipif(speedups.load("jsonmembers") is None, reason="broker.speedups is not built")
JSON = get_message_type("json")
SIZE = 20_000_000
FILLER = "a" * SIZE
BODY = ('{"id":1,"o":{"b":[1,2],"c":"d"},"x":"' + FILLER + '","id":7,"\\u0065":"e"}').encode()


def _peak_during(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_a_lookup_of_a_large_message_decodes_only_the_member_it_reads() -> None:
    message = JSON.lazy(BODY, max_depth=64)
    values, peak = _peak_during(lambda: (message.get("/id"), message.get("/o/b"), message.get("/e"),
                                         message.get("/missing"), message.get("/o/c")))
    assert peak < 1 << 20, f"reading 4 small members of a 20 MB body allocated {peak} bytes (a whole decode)"
    assert values == (7, [1, 2], "e", None, "d")  # the last of duplicate keys, an escaped key, a nested path
    assert message.error is None
    assert message.document["x"] == FILLER  # the whole document is still there for whoever needs it


def test_a_keyed_parse_of_a_large_body_checks_it_without_decoding_it() -> None:
    message, peak = _peak_during(lambda: JSON.parse(BODY, keyed=True, max_depth=64))
    assert peak < 1 << 20, f"parsing a 20 MB body allocated {peak} bytes (a whole decode)"
    assert isinstance(message, JsonMessage) and message.get("/id") == 7


def test_a_prefetch_reads_the_members_of_all_paths_in_one_scan() -> None:
    message = JSON.lazy(BODY, max_depth=64)
    message.prefetch(["/id", "/o/c", "not a path"])
    doc = message._doc
    assert isinstance(doc, Members) and doc.looked == {"id", "o"}
    _, peak = _peak_during(lambda: (message.get("/id"), message.get("/o/c")))
    assert peak < 1 << 16


def test_a_large_body_that_is_not_json_is_refused_as_the_full_decode_refuses_it() -> None:
    for bad in (BODY + b" x", BODY.replace(b'"aaaa', b'"a\xffa', 1), BODY[:-1], BODY.replace(b"aaaa", b"a\x01a", 1)):
        with pytest.raises(MessageParseError):
            JSON.parse(bad, keyed=True)
        message = JSON.lazy(bad)
        assert message.get("/id") is None and message.error is not None
    with pytest.raises(MessageParseError, match="the top level is a list, but a SOW topic needs a JSON object"):
        JSON.parse(b"[" + b"1," * LARGE_MESSAGE + b"1]", keyed=True)
    with pytest.raises(MessageTooDeepError):
        JSON.parse(b'{"a":' + b"[" * 70 + b"]" * 70 + b',"x":"' + b"a" * LARGE_MESSAGE + b'"}', keyed=True,
                   max_depth=64)
    with pytest.raises(MessageTooDeepError):
        JSON.lazy(b'{"a":' + b"[" * 70 + b"]" * 70 + b',"x":"' + b"a" * LARGE_MESSAGE + b'"}', max_depth=64)


def test_what_the_standard_library_takes_is_read_from_a_large_body_too() -> None:
    """orjson refuses a lone surrogate; the full decode then takes the body from the standard library."""
    body = b'{"s":"\\ud800","x":"' + b"a" * LARGE_MESSAGE + b'"}'
    assert JSON.lazy(body).get("/s") == "\ud800"
    assert JSON.parse(body, keyed=True).get("/s") == "\ud800"


def test_a_small_body_is_decoded_as_before() -> None:
    message = JSON.lazy(b'{"id":1}')
    assert message.get("/id") == 1 and message._doc == {"id": 1}
    message.prefetch(["/id"])
    assert message._doc == {"id": 1}


def test_the_compiled_keyed_parse_leaves_a_large_body_to_the_scan() -> None:
    """``jsonobject.pxd``'s ``json_object`` (the compiled keyed parse, and the keyed run of a SOW topic nobody reads
    from, ``publish.pyx``'s ``keyed_scan``) decodes a body whole: it answers ``None`` from ``LARGE_MESSAGE`` on, and
    the Python code scans the body instead."""
    jsonbody = speedups.load("jsonbody")
    assert jsonbody is not None
    large = b'{"a":"' + b"x" * (LARGE_MESSAGE - 8) + b'"}'
    assert len(large) == LARGE_MESSAGE and jsonbody.parse_object(large, -1, JsonMessage) is None
    assert isinstance(jsonbody.parse_object(large[:-3] + b'"}', -1, JsonMessage), JsonMessage)
