"""SOW batch frames (§1.5): exact ``l``, uniform inner fields, round trip."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol import (
    Frame,
    Header,
    decode_frame,
    decode_sow_batch,
    encode_sow_batch,
    encode_sow_records,
)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


CAPTURED = (
    b'{"c":"sow","cid":"auto11","t":"sowt","query_id":"auto11"}'
    b'{"k":"4134647994","bm":"7654191196413476067|8|","l":17}{"id":1,"qty":10}'
    b'{"k":"1870194944","bm":"7654191196413476067|9|","l":17}{"id":2,"qty":20}'
)


def test_encodes_the_batch_the_client_accepted() -> None:
    got = encode_sow_batch(
        {"cid": "auto11", "topic": "sowt", "query_id": "auto11"},
        [
            ({"sow_key": "4134647994", "bookmark": "7654191196413476067|8|"}, b'{"id":1,"qty":10}'),
            ({"k": "1870194944", "bm": "7654191196413476067|9|"}, b'{"id":2,"qty":20}'),
        ],
    )
    assert got == frame(CAPTURED)


def test_decodes_records_with_their_inner_headers() -> None:
    records = decode_sow_batch(decode_frame(frame(CAPTURED)))
    assert records == [
        (Header(sow_key="4134647994", bookmark="7654191196413476067|8|", msg_len=17), b'{"id":1,"qty":10}'),
        (Header(sow_key="1870194944", bookmark="7654191196413476067|9|", msg_len=17), b'{"id":2,"qty":20}'),
    ]


def test_record_data_may_contain_braces_and_binary() -> None:
    data = [b"}{}", b"", b'\x00\xff"\\', b'{"a":"}"}']
    got = decode_frame(encode_sow_batch({"query_id": "q"}, [({"k": str(i)}, d) for i, d in enumerate(data)]))
    assert [d for _, d in decode_sow_batch(got)] == data


@pytest.mark.parametrize(
    ("outer", "records", "message"),
    [
        ({"query_id": "q"}, [], "at least one record"),
        ({"cid": "q"}, [({"k": "1"}, b"x")], "needs query_id"),
        ({"c": "p", "query_id": "q"}, [({"k": "1"}, b"x")], "command 'sow'"),
        ({"query_id": "q"}, [({"k": "1", "zz": "1"}, b"x")], "cannot send header field 'zz'"),
        ({"query_id": "q"}, [({"k": "1", "l": 5}, b"x")], "does not match"),
        ({"query_id": "q"}, [({"k": ["1"]}, b"x")], "must be a str or int"),
    ],
)
def test_refuses_batches_the_client_would_misread(
    outer: dict[str, object], records: list[tuple[dict[str, object], bytes]], message: str
) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        encode_sow_batch(outer, records)


def test_inner_fields_are_made_uniform() -> None:
    """The client carries inner fields over between records: a missing one must not inherit."""
    got = encode_sow_batch(
        {"query_id": "q"},
        [
            ({"k": "1", "x": "corr"}, b"a"),
            ({"k": "2", "x": None, "timestamp": "20240101T000000Z"}, b"bb"),
            ({"sow_key": "3"}, b""),
        ],
    )
    assert got == frame(
        b'{"c":"sow","query_id":"q"}'
        b'{"k":"1","x":"corr","ts":"","l":1}a'
        b'{"k":"2","x":"","ts":"20240101T000000Z","l":2}bb'
        b'{"k":"3","x":"","ts":"","l":0}'
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"k":"1"}data', "no valid 'l'"),
        (b'{"k":"1","l":10}short', "only 5 bytes remain"),
        (b'{"k":"1","l":1}xjunk', "must start with"),
    ],
)
def test_broken_batches_raise(body: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        decode_sow_batch(Frame(Header(command="sow", query_id="q"), body))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=30)), min_size=1, max_size=10))
def test_round_trip(records: list[tuple[str, bytes]]) -> None:
    encoded = encode_sow_batch(
        Header(command="sow", cmd_id="c", topic="t", query_id="q"),
        [({"k": key, "bm": f"1|{i}|"}, data) for i, (key, data) in enumerate(records)],
    )
    decoded = decode_frame(encoded)
    assert decoded.header == Header(command="sow", cmd_id="c", topic="t", query_id="q")
    got = decode_sow_batch(decoded)
    assert [(h.sow_key, h.bookmark, h.msg_len, d) for h, d in got] == [
        (key, f"1|{i}|", len(data), data) for i, (key, data) in enumerate(records)
    ]


# Record fields as the query path sends them: any text (quotes, backslashes, control characters).
_field = st.text(max_size=20)


@given(st.lists(st.tuples(_field, _field, _field, _field, _field, st.binary(max_size=60)), min_size=1, max_size=8),
       st.text(min_size=1, max_size=10))
def test_encode_sow_records_equals_the_general_encoder(records, query_id: str) -> None:
    outer = {"cid": "q1", "t": "orders", "query_id": query_id, "batch_size": len(records)}
    fast = encode_sow_records(outer, records)
    general = encode_sow_batch(outer, [({"t": t, "k": k, "bm": bm, "ts": ts, "x": x}, data)
                                       for t, k, bm, ts, x, data in records])
    assert fast == general
    decoded = decode_sow_batch(decode_frame(fast))
    assert [(h.get("sow_key"), body) for h, body in decoded] == [(r[1], r[5]) for r in records]


@pytest.mark.parametrize("bad", [1, None, b"k"])
def test_encode_sow_records_refuses_non_text_fields(bad: object) -> None:
    with pytest.raises(LocalProtocolError):
        encode_sow_records({"query_id": "q"}, [("t", bad, "", "", "", b"{}")])  # type: ignore[list-item]


def test_encode_sow_records_needs_records_and_a_query_id() -> None:
    with pytest.raises(LocalProtocolError, match="at least one record"):
        encode_sow_records({"query_id": "q"}, [])
    with pytest.raises(LocalProtocolError, match="query_id"):
        encode_sow_records({"cid": "1"}, [("t", "k", "", "", "", b"{}")])
