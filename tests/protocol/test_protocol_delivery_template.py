"""DeliveryTemplate: one header encoded per message, the same bytes as encode_publish / encode_oof."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import LocalProtocolError
from broker.protocol import DeliveryRun, DeliveryTemplate, decode_frame, encode_oof, encode_publish

# Any text, including quotes, backslashes, control characters and non-BMP characters.
text = st.text(max_size=40)
maybe = st.none() | text


@given(topic=text, sids=st.lists(text, min_size=1, max_size=4), body=st.binary(max_size=200), bm=maybe, k=maybe,
       x=maybe)
def test_publish_frames_equal_encode_publish(topic, sids, body, bm, k, x) -> None:
    template = DeliveryTemplate("p", topic, body, bm=bm, k=k, x=x)
    for one in sids:
        frame = template.frame(one)
        assert frame == encode_publish(topic, one, body, bm=bm, k=k, x=x)
        decoded = decode_frame(frame)
        assert decoded.header.get("sub_ids") == one
        assert decoded.body == body


@given(topic=text, sids=text, body=st.binary(max_size=200), reason=st.sampled_from(["match", "deleted", "expired"]),
       bm=maybe, k=maybe, x=maybe)
def test_oof_frames_equal_encode_oof(topic, sids, body, reason, bm, k, x) -> None:
    template = DeliveryTemplate("oof", topic, body, reason=reason, bm=bm, k=k, x=x)
    for one in (sids, sids + ",2", "3"):  # the first frame, then the split template
        assert template.frame(one) == encode_oof(topic, one, body, reason, bm=bm, k=k, x=x)


def test_one_template_serves_clients_with_different_subscription_ids() -> None:
    template = DeliveryTemplate("p", "orders", b'{"id":1}', bm="1|2|", k="abc")
    frames = [template.frame(s) for s in ("1", "sub-7,sub-9", 'odd"id')]
    assert [decode_frame(f).header.get("sub_ids") for f in frames] == ["1", "sub-7,sub-9", 'odd"id']
    assert all(decode_frame(f).header.get("sow_key") == "abc" for f in frames)


@pytest.mark.parametrize("bad", [1, None, b"1", ["1"]])
def test_non_string_sids_are_refused(bad: object) -> None:
    with pytest.raises(LocalProtocolError, match="sids must be a str"):
        DeliveryTemplate("p", "t", b"").frame(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["bm", "k", "x"])
def test_non_string_values_are_refused(field: str) -> None:
    with pytest.raises(LocalProtocolError):
        DeliveryTemplate("p", "t", b"", **{field: {"nested": 1}}).frame("1")  # type: ignore[arg-type]


# Plain values (the fast path) and anything else (the fallback through DeliveryTemplate).
plain = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)
any_text = plain | text
utf8 = (plain | text).map(lambda s: s.encode("utf-8", "surrogatepass"))


@given(sids=any_text, prefix=st.sampled_from(["7654191196413476067|", "1|", 'odd"|']),
       records=st.lists(st.tuples(any_text, st.binary(max_size=100), st.integers(0, 2**64 - 1), utf8, utf8),
                        max_size=8))
def test_delivery_run_frames_equal_the_template(sids, prefix, records) -> None:
    run = DeliveryRun(sids, prefix)
    expected = []
    for topic, body, seq, k, x in records:
        try:
            want = DeliveryTemplate("p", topic, body, bm=f"{prefix}{seq}|", k=k.decode() or None,
                                    x=x.decode() or None).frame(sids)
        except (LocalProtocolError, UnicodeDecodeError) as exc:
            with pytest.raises(type(exc)):
                run.add(topic, body, seq, k, x)
            continue
        run.add(topic, body, seq, k, x)
        expected.append(want)
    assert run.count == len(expected)
    assert run.bytes == sum(map(len, expected))
    assert run.take() == b"".join(expected)
    assert run.take() == b"" and run.count == run.bytes == 0


def test_delivery_run_decodes_as_the_client_reads_it() -> None:
    run = DeliveryRun("sub-1", "42|")
    run.add("orders", b'{"id":1}', 7, b"k1", b"")
    run.add("orders", b"", 8, b"", b"corr")
    out = run.take()
    first_len = int.from_bytes(out[:4], "big") + 4
    one, two = decode_frame(out[:first_len]), decode_frame(out[first_len:])
    assert (one.header.get("bookmark"), one.header.get("sow_key"), one.body) == ("42|7|", "k1", b'{"id":1}')
    assert (two.header.get("bookmark"), two.header.get("correlation_id"), two.body) == ("42|8|", "corr", b"")
    assert one.header.get("sub_ids") == two.header.get("sub_ids") == "sub-1"
