"""broker/speedups/jsonmembers.pyx (the scan of a large JSON body for a few top-level members) against the full
decode it stands in for (``broker.messagetypes._json._loads``): on generated JSON text (nesting, whitespace,
escapes, surrogates, duplicate keys, wide numbers) and on that text damaged, the same accept/reject decision,
and for each wanted member the same value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.messagetypes import LARGE_MESSAGE, MessageParseError, get_message_type
from broker.messagetypes._json import _loads
from broker.messagetypes._jsonmembers import TABLE, Invalid, Members, scan_body, top_level_type

jsonmembers = speedups.load("jsonmembers")
pytestmark = pytest.mark.skipif(jsonmembers is None, reason="broker.speedups is not built")

JSON = get_message_type("json")
_ABSENT: Any = object()
NAMES = st.sampled_from(["a", "b", "id", "é", "😀", "\ud800", "a\nb", "x" * 7, ""])
SPACE = st.sampled_from(["", "", " ", "\n", "\t", "\r\n  ", " " * 40])
#: Text past the scan's 16-byte steps: runs of one script, mixed widths, any character.
LONG_TEXT = st.one_of(st.text(alphabet=st.sampled_from("aé中😀ж \"\\\n"), min_size=15, max_size=120),
                      st.text(alphabet=st.characters(codec="utf-8"), min_size=15, max_size=60),
                      st.sampled_from(["ж" * 40, "中" * 30, "😀" * 20, "a" * 50]))


@st.composite
def string_text(draw: st.DrawFn, text: str) -> str:
    """``text`` as a JSON string literal, each character raw or escaped as the draw decides."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        how = draw(st.integers(0, 3))
        if ch in '"\\' or code < 0x20:
            out.append(json.dumps(ch)[1:-1] if how else f"\\u{code:04x}")
        elif how == 0 and code > 0xFFFF:  # a surrogate pair
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            out.append(f"\\u{high:04X}\\u{low:04x}")
        elif how == 0 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else ch)
        elif how == 1 and ch in "/\b\f\n\r\t":
            out.append({"/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


@st.composite
def number_text(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return str(draw(st.integers(-(2**70), 2**70)))
    if kind == 1:
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    if kind == 2:  # exponents, past a double's range too
        return f"{draw(st.sampled_from(['', '-']))}{draw(st.integers(0, 9))}{draw(st.sampled_from(['', '.5', '.0012']))}" \
               f"{draw(st.sampled_from(['e', 'E']))}{draw(st.sampled_from(['', '+', '-']))}{draw(st.integers(0, 500))}"
    if kind == 3:  # beyond a double, within (or past) the interpreter's digit limit
        return draw(st.sampled_from(["1" * 25, "-" + "9" * 400, "1" * 4300, "1" * 4301, "0.1" + "0" * 500]))
    return draw(st.sampled_from(["0", "-0", "0.0", "1E400", "-1e-400"]))


@st.composite
def json_text(draw: st.DrawFn, depth: int = 0) -> str:
    """A JSON text: objects (duplicate keys included), arrays, strings, numbers and literals, with any spacing."""
    kind = draw(st.integers(0, 6 if depth < 4 else 3))
    if kind == 0:
        return draw(st.sampled_from(["true", "false", "null"]))
    if kind == 1:
        return draw(number_text())
    if kind in (2, 3):
        text = draw(st.one_of(st.text(max_size=12), NAMES, LONG_TEXT))
        return draw(string_text(text))
    if kind == 4:
        items = draw(st.lists(json_text(depth + 1), max_size=4))
        return "[" + ",".join(draw(SPACE) + item + draw(SPACE) for item in items) + "]"
    count = draw(st.integers(0, 40 if depth == 0 and kind == 6 else 5))
    members = []
    for _ in range(count):
        key = draw(string_text(draw(NAMES)))
        members.append(f"{draw(SPACE)}{key}{draw(SPACE)}:{draw(SPACE)}{draw(json_text(depth + 1))}{draw(SPACE)}")
    return "{" + ",".join(members) + "}"


def encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a raw lone surrogate stays three bytes, as a client may send


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A JSON text, or that text damaged: cut, a byte replaced or inserted, garbage after it, a byte order mark."""
    body = encoded(draw(SPACE) + draw(json_text()) + draw(SPACE))
    damage = draw(st.integers(0, 8))
    if damage == 1:
        body = body[: draw(st.integers(0, len(body)))]
    elif damage == 2 and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1:]
    elif damage in (3, 6):
        at = draw(st.integers(0, len(body)))
        junk = draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                     b"\xc3", b"\x00", b"\x1f", b"\x7f", b",", b"]", b"}", b'"', b"\\", b"\\u12",
                                     b"NaN", b"\xf0\x9f\x98\x80"]))
        body = body[:at] + junk + body[at:]
    elif damage == 4:
        body += draw(st.sampled_from([b" x", b"{}", b"\x00", b",", b" \n "]))
    elif damage == 5:
        body = b"\xef\xbb\xbf" + body
    return body


def reference(body: bytes) -> tuple[bool, Any]:
    """What the full decode does: ``(True, document)`` or ``(False, None)`` when it refuses the body."""
    try:
        return True, _loads(body)
    except MessageParseError:
        return False, None


def scanned(body: bytes, names: tuple[str, ...]) -> tuple[bool, Members | None]:
    """What the scan does: ``(True, members)``, ``(False, None)`` when it refuses the body; ``None`` members when
    it leaves the body to the full decode."""
    try:
        return True, scan_body(body, names, _loads)
    except Invalid:
        return False, None


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``1`` and ``1.0`` and ``True`` differ; so do ``0.0`` and ``-0.0``), or both absent."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False) and type(a) is type(b)


@settings(max_examples=600, deadline=None)
@given(body=bodies(), names=st.lists(NAMES, max_size=4, unique=True))
def test_a_scan_decides_and_reads_as_the_full_decode(body: bytes, names: list[str]) -> None:
    accepted, document = reference(body)
    ok, members = scanned(body, tuple(names))
    if ok and members is None:  # left to the full decode: only what the scan does not decide
        assert body[:1] == b"\x00" or body[1:2] == b"\x00" or body[:2] in (b"\xff\xfe", b"\xfe\xff"), body
        return
    assert ok == accepted, (body, document)
    if not accepted:
        return
    assert members is not None
    assert members.is_object == (type(document) is dict)
    assert top_level_type(members) == type(document).__name__
    if type(document) is not dict:
        return
    for name in names:  # decoded by the scan itself
        assert same(members.values.get(name, _ABSENT), document.get(name, _ABSENT)), name
    for name in ("a", "id", "é", "\ud800", "zz"):  # read afterwards: from the scan's list, or by another scan
        members.read((name,))
        assert same(members.values.get(name, _ABSENT), document.get(name, _ABSENT)), name


@pytest.mark.parametrize("count", [TABLE - 1, TABLE, TABLE + 1, 3 * TABLE])
def test_a_later_read_is_right_whether_the_first_scan_listed_every_member_or_not(count: int) -> None:
    members_text = [f'"k{i}":{i}' for i in range(count)] + ['"k0":"last"', '"\\u006b1":[1]']
    body = ("{" + ",".join(members_text) + "}").encode()
    ok, members = scanned(body, ())
    assert ok and members is not None
    members.read(("k0", "k1", "k2", "missing"))
    assert members.values == {"k0": "last", "k1": [1], "k2": 2}


@pytest.mark.parametrize(("body", "why"), [
    (b'{"a":1} x', "unexpected content after the document"),
    (b'{"a":"\xff"}', "invalid UTF-8"),
    (b'{"a":"\xed\xa0"}', "invalid UTF-8"),
    (b'{"a":"b\x01"}', "control character in a string"),
    (b'{"a":"\\x"}', "invalid escape"),
    (b'{"a":01}', "expected ',' or a closing bracket"),
    (b'{"a":1,}', "expected a key"),
    (b'{"a":NaN}', "unexpected character"),
    (b'[' + b'1' * 4301 + b']', "integer with too many digits"),
])
def test_a_refused_body_says_why_and_where(body: bytes, why: str) -> None:
    assert reference(body) == (False, None)
    with pytest.raises(Invalid, match=why):
        scan_body(body, (), _loads)


def test_what_only_the_standard_library_takes_is_taken() -> None:
    """orjson refuses a lone surrogate (escaped or raw), a byte order mark and numbers past a double; the full
    decode then takes them from the standard library, and so does the scan."""
    for body in (b'{"a":"\\ud800"}', b'{"a":"\xed\xa0\x80"}', b'\xef\xbb\xbf{"a":1}', b'{"a":1e400}',
                 b'{"a":' + b"9" * 400 + b"}"):
        ok, members = scanned(body, ("a",))
        assert ok and members is not None, body
        assert same(members.values["a"], _loads(body)["a"]), body


def test_nesting_past_the_bound_is_too_deep_and_past_256_left_to_the_full_decode() -> None:
    deep = b'{"a":' + b"[" * 10 + b"]" * 10 + b"}"
    with pytest.raises(Invalid) as info:
        scan_body(deep, (), _loads, max_depth=10)
    assert info.value.too_deep
    assert scan_body(deep, ("a",), _loads, max_depth=11) is not None
    assert scan_body(b"[" * 300 + b"]" * 300, (), _loads) is None


@settings(max_examples=120, deadline=None)
@given(body=bodies(), path=st.sampled_from(["/a", "/a/b", "/a[0]", "/a[1]/b", "/@a", "/id", "/é", "/zz"]))
def test_a_large_message_answers_lookups_and_parses_as_a_small_one(body: bytes, path: str) -> None:
    """Through the message API: a body made large by a long member in front reads every path, and is refused or
    taken by ``parse``, as the full decode (``_parse_python``) does."""
    large = b'{"pad":"' + b"p" * LARGE_MESSAGE + b'","a":' + body + b"}"
    try:
        expected = JSON._parse_python(large, keyed=True)
    except MessageParseError as exc:
        with pytest.raises(type(exc)):
            JSON.parse(large, keyed=True)
        assert JSON.lazy(large).get(path) is None
        return
    assert same(JSON.parse(large, keyed=True).get(path), expected.get(path))
    lazy = JSON.lazy(large)
    lazy.prefetch([path, "/id"])
    assert same(lazy.get(path), expected.get(path))
