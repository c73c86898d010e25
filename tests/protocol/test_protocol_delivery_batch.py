"""DeliveryBatch (the fan-out's frames for a run of one topic): compiled and pure-Python twins give the
frames DeliveryTemplate gives, message by message, on arbitrary input (errors included)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.errors import LocalProtocolError
from broker.protocol import DeliveryBatch, DeliveryTemplate, _frames, decode_frame

_compiled = speedups.load("delivery")
IMPLEMENTATIONS = [pytest.param((_frames._parts_python, _frames._join_python), id="python")]
IMPLEMENTATIONS.append(pytest.param(
    None if _compiled is None else (_compiled.parts, _compiled.join), id="compiled",
    marks=pytest.mark.skipif(_compiled is None, reason="broker.speedups.delivery was not built (no compiler)")))

# Plain ASCII most of the time (the fast path), anything else often enough: quotes, backslashes, brackets,
# control characters, non-ASCII, lone surrogates.
_text = st.one_of(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=12),
                  st.text(max_size=8), st.sampled_from(['a"b', "a\\b", "[x", "{x", "\x00", "é", "\ud800", ""]))
_value = st.one_of(st.none(), _text, st.integers(-5, 5), st.binary(max_size=3))
_message = st.tuples(st.binary(max_size=40), _value, _value, _value)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except LocalProtocolError as exc:
        return ("error", str(exc))


def _one_by_one(topic: Any, messages: list[Any], sids: str) -> Any:
    try:
        return b"".join(DeliveryTemplate("p", topic, body, bm=bm, k=k, x=x).frame(sids) for body, bm, k, x in messages)
    except LocalProtocolError as exc:
        return ("error", str(exc))


def _batch(impl: Any, topic: Any, messages: list[Any], sids: str) -> Any:
    parts, join = impl
    try:
        return join(parts(topic, messages, _frames._template_parts), _frames._quote(sids))
    except LocalProtocolError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=400, deadline=None)
@given(topic=_text, messages=st.lists(_message, min_size=1, max_size=6), sids=_text)
def test_a_batch_is_the_templates_frames_joined(impl: Any, topic: str, messages: list[Any], sids: str) -> None:
    got = _batch(impl, topic, messages, sids)
    assert got == _batch(IMPLEMENTATIONS[0].values[0], topic, messages, sids)  # the twins agree, errors included
    reference = _one_by_one(topic, messages, sids)
    if isinstance(reference, bytes):
        assert got == reference
    else:  # an error either way (with two bad values, the batch may name the other one first)
        assert isinstance(got, tuple)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.tuples(st.binary(max_size=300), st.none() | st.just("7|123|"),
                                   st.none() | st.from_regex(r"[0-9a-f]{16}", fullmatch=True),
                                   st.none() | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e),
                                                       max_size=20)), min_size=1, max_size=20),
       sids=st.sampled_from(["1", "sub-a,sub-b", "s" * 40]))
def test_every_frame_decodes_to_its_message(impl: Any, messages: list[Any], sids: str) -> None:
    out = _batch(impl, "orders", messages, sids)
    pos = 0
    for body, bm, k, x in messages:
        size = int.from_bytes(out[pos:pos + 4], "big")
        frame = decode_frame(out[pos:pos + 4 + size])
        pos += 4 + size
        assert (frame.header.get("command"), frame.header.get("topic"), frame.header.get("sub_ids"), frame.body) == \
            ("publish", "orders", sids, body)
        assert (frame.header.get("bookmark"), frame.header.get("sow_key"), frame.header.get("correlation_id")) == \
            (bm, k, x)
    assert pos == len(out)


def test_the_batch_class_uses_the_chosen_implementation_and_checks_sids() -> None:
    batch = DeliveryBatch("t", [(b"{}", None, "k", None), (b"[]", "1|2|", None, "c")])
    assert len(batch) == 2
    assert batch.frames("a,b") == _one_by_one("t", batch.messages, "a,b")
    with pytest.raises(LocalProtocolError, match="sids must be a str"):
        batch.frames(b"a")  # type: ignore[arg-type]


def test_the_compiled_module_is_used_when_built() -> None:
    if _compiled is None:
        pytest.skip("broker.speedups.delivery was not built")
    assert _frames._join_deliveries is _compiled.join
