"""broker/speedups/scanrun.pyx's ``project``: the members a scan's filter reads, taken from a flat JSON object
without decoding the rest. Whatever it returns must be what the broker's JSON decode gives for those members;
for anything it does not read itself it must say so (``None``), so that the decode decides."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.messagetypes._json import loads

scanrun = speedups.load("scanrun")
pytestmark = pytest.mark.skipif(scanrun is None, reason="broker.speedups is not built")
NAMES = ("grp", "v", "s", "é")

#: Flat and nested values: wide integers, floats at the edges, text with escapes, controls and non-ASCII.
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                   st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e308, -0.0, 5e-324, 0.1]),
                   st.text(max_size=8), st.text(alphabet="ab\"\\\x01/", max_size=4))
VALUES = st.one_of(LEAVES, st.lists(LEAVES, max_size=2), st.dictionaries(st.sampled_from(NAMES), LEAVES, max_size=2))
#: What a flat ASCII object holds: the values read without the decode (half the documents are made of these).
FLAT = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                 st.integers(min_value=10**17, max_value=10**20), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e, exclude_characters='"\\'),
                         max_size=8))
SPACE = st.sampled_from(["", "", " ", "\n\t", "\r "])
ODD_SPACE = st.sampled_from(["", " ", "\n\t", "\r ", "\x0b", "\xa0"])  # the last two are not JSON's


@st.composite
def documents(draw: Any) -> bytes:
    """A JSON object's text with repeated names, odd spacing and number spellings, or a damaged one."""
    flat, odd = draw(st.booleans()), draw(st.booleans())
    space = ODD_SPACE if odd else SPACE
    members = draw(st.lists(st.tuples(st.sampled_from(NAMES[:3] + ("x", "pad") if flat else NAMES + ("x",)),
                                      FLAT if flat else VALUES), max_size=6))
    parts = []
    for name, value in members:
        text = json.dumps(value, ensure_ascii=flat or draw(st.booleans()))
        if odd and isinstance(value, int) and not isinstance(value, bool):
            text = draw(st.sampled_from([text, text + ".0", text + "e0", text + "E+00", "0" + text.lstrip("-")]))
        parts.append(draw(space) + json.dumps(name, ensure_ascii=flat or draw(st.booleans())) + draw(space) + ":"
                     + draw(space) + text + draw(space))
    text = draw(space) + "{" + ",".join(parts) + "}" + draw(space)
    data = text.encode()
    cut = draw(st.one_of(st.none(), st.none(), st.integers(0, max(0, len(data) - 1))))
    if cut is not None:  # damaged: cut, a byte replaced, or something after the object
        byte = draw(st.sampled_from([b"\xff", b";", b":", b",", b'"', b"{", b"}", b"[", b" ", b"0", b"-", b".",
                                     b"e", b"\\", b"x"]))
        data = draw(st.sampled_from([data[:cut], data[:cut] + byte + data[cut + 1:], data[:cut] + byte + data[cut:],
                                     data + byte]))
    return data


def _decoded(data: bytes) -> Any:
    try:
        return loads(data)
    except orjson.JSONDecodeError:
        return "refused"


@settings(max_examples=1000, deadline=None)
@given(documents(), st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
@example(b'{"grp": 7, "grp": 8}', ["grp"])
@example(b'{"grp":12345678901234567890123,"v":-123456789012345678}', ["grp", "v"])
@example(b'{"grp":1.5e400}', ["grp"])
@example(b'{"grp":-0}', ["grp"])
@example(b'{"grp":1,"v":1e400}', ["grp"])  # the decode refuses the record for a member the filter does not read
@example(b'{"grp":18446744073709551615,"v":9999999999999999999}', ["grp", "v"])
@example(b'{"grp":-9223372036854775809,"v":999999999999999999}', ["grp", "v"])
@example(b'{"grp":"7\\u0037"}', ["grp"])
def test_project_gives_the_decoded_members_or_leaves_the_document_to_the_decode(data: bytes, names: list[str]) -> None:
    got = scanrun.project(data, tuple(names), loads, orjson.JSONDecodeError)
    full = _decoded(data)
    if got is None:
        return  # the decode decides (and the scan then uses its result)
    assert isinstance(full, dict), (data, got, full)
    want = {name: full[name] for name in names if name in full}
    assert got == want and [type(v) for v in got.values()] == [type(want[k]) for k in got], (data, got, want)


@pytest.mark.parametrize(("data", "want"), [
    (b'{"ts":1700000000000000000,"id":5,"grp":7,"state":"open","qty":1,"sym":"S5","pad":"xxxx"}', {"grp": 7}),
    (b' { "grp" : -12 , "v" : true } ', {"grp": -12}),
    (b'{"v":null}', {}),
    (b'{}', {}),
    (b'{"grp":1,"v":1.5,"s":-2.5}', {"grp": 1}),
])
def test_a_flat_document_is_read_without_the_decode(data: bytes, want: dict) -> None:
    assert scanrun.project(data, ("grp",), loads, orjson.JSONDecodeError) == want


@pytest.mark.parametrize("data", [b'{"grp":{"a":1}}', b'{"grp":[7]}', b'{"grp":"\\u0037"}', b'{"grp":"\xc3\xa9"}',
                                  b'[7]', b'7', b'', b'{"grp":7', b'{"grp":07}', b'{"grp":7}x', b'{"grp":+7}',
                                  b'{"grp":7;"v":1}', b'{"grp" 7}', b'{"grp":7,}', b'{,"grp":7}', b'{"grp":7 "v":1}',
                                  b'{"grp":tru}', b'{"grp":1.}', b'{"grp":.5}', b'{"grp":1e}', b'{"grp":-}',
                                  b'{"grp":7}}', b'{{}', b'{"grp":7,"v":NaN}', b'{"grp\\u0000":7}', b'{"v":"\t"}'])
def test_anything_but_a_flat_ascii_object_is_left_to_the_decode(data: bytes) -> None:
    assert scanrun.project(data, ("grp",), loads, orjson.JSONDecodeError) is None
