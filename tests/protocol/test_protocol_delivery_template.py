"""DeliveryTemplate: one header encoded per message, the same bytes as encode_publish / encode_oof."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import LocalProtocolError
from broker.protocol import DeliveryTemplate, decode_frame, encode_oof, encode_publish

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
