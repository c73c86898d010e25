"""Table tests: each command shape of amps-protocol.md §5 decodes to the expected Header, and each
server reply shape encodes to the exact bytes the official client accepted."""

from __future__ import annotations

import struct

import pytest

from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol import (
    ACK_BITS,
    HEARTBEAT_FRAME,
    AckType,
    Header,
    OofReason,
    Reason,
    Status,
    decode_frame,
    decode_header,
    encode_ack,
    encode_frame,
    encode_group_begin,
    encode_group_end,
    encode_header,
    encode_oof,
    encode_publish,
    escape_string,
    parse_ack_types,
)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


# (payload as the client sends it, expected header fields, expected body)
CLIENT_COMMANDS = [
    pytest.param(
        b'{"c":"logon","cid":"auto0","client_name":"e2e-pub","user_id":"alice","mt":"json","a":"processed",'
        b'"version":"5.3.5.14.c6e65cc.784022:python","pw":"secret"}',
        dict(
            command="logon",
            cmd_id="auto0",
            client_name="e2e-pub",
            user_id="alice",
            message_type="json",
            ack_type="processed",
            version="5.3.5.14.c6e65cc.784022:python",
            password="secret",
        ),
        b"",
        id="logon",
    ),
    pytest.param(
        b'{"c":"logon","cid":"auto1","client_name":"auth2","mt":"json","a":"processed","version":"5",'
        b'"o":"ack_conflation=100ms","x":"Y29y"}',
        dict(
            command="logon",
            cmd_id="auto1",
            client_name="auth2",
            message_type="json",
            ack_type="processed",
            version="5",
            options="ack_conflation=100ms",
            correlation_id="Y29y",
        ),
        b"",
        id="logon-options-correlation",
    ),
    pytest.param(
        b'{"c":"p","t":"orders"}{"id":1,"qty":10}',
        dict(command="publish", topic="orders"),
        b'{"id":1,"qty":10}',
        id="publish",
    ),
    pytest.param(
        b'{"c":"p","t":"pstopic","a":"persisted","s":1795327843539000001}{"id":0}',
        dict(command="publish", topic="pstopic", ack_type="persisted", seq=1795327843539000001),
        b'{"id":0}',
        id="publish-with-store",
    ),
    pytest.param(
        b'{"c":"p","t":"tp","e":"5","x":"cc","s":42,"k":"kk"}{"z":1}',
        dict(command="publish", topic="tp", expiration=5, correlation_id="cc", seq=42, sow_key="kk"),
        b'{"z":1}',
        id="publish-all-fields",
    ),
    pytest.param(
        b'{"c":"delta_publish","t":"orders"}{"id":4,"qty":41}',
        dict(command="delta_publish", topic="orders"),
        b'{"id":4,"qty":41}',
        id="delta_publish",
    ),
    pytest.param(
        b'{"c":"subscribe","t":"orders","cid":"auto2","filter":"/qty > 5","a":"processed","sub_id":"orders-sub"}',
        dict(
            command="subscribe",
            topic="orders",
            cmd_id="auto2",
            filter="/qty > 5",
            ack_type="processed",
            sub_id="orders-sub",
        ),
        b"",
        id="subscribe",
    ),
    pytest.param(
        b'{"c":"subscribe","t":"bt","cid":"auto1","a":"processed,persisted","sub_id":"bs1","bookmark":"0"}',
        dict(
            command="subscribe",
            topic="bt",
            cmd_id="auto1",
            ack_type="processed,persisted",
            sub_id="bs1",
            bookmark="0",
        ),
        b"",
        id="bookmark-subscribe",
    ),
    pytest.param(
        b'{"c":"sow","t":"tp","cid":"mycid","filter":"/a = \\"q\\\\\\\\x\\"","a":"processed,completed",'
        b'"sub_id":"mysid","e":"9","query_id":"myqid","batch_size":7,"top_n":3,"orderby":"/a desc",'
        b'"sow_keys":"k1,k2","x":"corr","bookmark":"123|4|","o":"projection=[/a],grouping=[/b]","k":"sk"}',
        dict(
            command="sow",
            topic="tp",
            cmd_id="mycid",
            filter='/a = "q\\\\x"',
            ack_type="processed,completed",
            sub_id="mysid",
            expiration=9,
            query_id="myqid",
            batch_size=7,
            top_n=3,
            order_by="/a desc",
            sow_keys="k1,k2",
            correlation_id="corr",
            bookmark="123|4|",
            options="projection=[/a],grouping=[/b]",
            sow_key="sk",
        ),
        b"",
        id="sow-every-field",
    ),
    pytest.param(
        b'{"c":"sow_and_subscribe","t":"sowt","cid":"auto13","filter":"/qty >= 20","a":"processed",'
        b'"sub_id":"auto13","query_id":"auto13","batch_size":2,"o":"oof"}',
        dict(
            command="sow_and_subscribe",
            topic="sowt",
            cmd_id="auto13",
            filter="/qty >= 20",
            ack_type="processed",
            sub_id="auto13",
            query_id="auto13",
            batch_size=2,
            options="oof",
        ),
        b"",
        id="sow_and_subscribe",
    ),
    pytest.param(
        b'{"c":"sow_delete","t":"sowt","cid":"f","filter":"/id = 4","a":"processed,stats","sub_id":"f",'
        b'"query_id":"f"}',
        dict(
            command="sow_delete",
            topic="sowt",
            cmd_id="f",
            filter="/id = 4",
            ack_type="processed,stats",
            sub_id="f",
            query_id="f",
        ),
        b"",
        id="sow_delete-filter",
    ),
    pytest.param(
        b'{"c":"sow_delete","t":"keyed","cid":"11","a":"processed,stats","sub_id":"11","query_id":"11",'
        b'"sow_keys":"K1,K3,NOPE"}',
        dict(
            command="sow_delete",
            topic="keyed",
            cmd_id="11",
            ack_type="processed,stats",
            sub_id="11",
            query_id="11",
            sow_keys="K1,K3,NOPE",
        ),
        b"",
        id="sow_delete-keys",
    ),
    pytest.param(
        b'{"c":"sow_delete","t":"deltopic","cid":"4","a":"processed,stats","sub_id":"4","query_id":"4"}'
        b'{"id":2,"qty":20}',
        dict(
            command="sow_delete",
            topic="deltopic",
            cmd_id="4",
            ack_type="processed,stats",
            sub_id="4",
            query_id="4",
        ),
        b'{"id":2,"qty":20}',
        id="sow_delete-data",
    ),
    pytest.param(
        b'{"c":"sow_delete","t":"queue-topic","cid":"AMPS-queue-ack","bookmark":"123|45|"}',
        dict(command="sow_delete", topic="queue-topic", cmd_id="AMPS-queue-ack", bookmark="123|45|"),
        b"",
        id="queue-ack",
    ),
    pytest.param(
        b'{"c":"unsubscribe","cid":"auto9","sub_id":"all"}',
        dict(command="unsubscribe", cmd_id="auto9", sub_id="all"),
        b"",
        id="unsubscribe-all",
    ),
    pytest.param(
        b'{"c":"heartbeat","o":"start,1"}',
        dict(command="heartbeat", options="start,1"),
        b"",
        id="heartbeat-start",
    ),
    pytest.param(
        b'{"c":"heartbeat","o":"beat"}', dict(command="heartbeat", options="beat"), b"", id="heartbeat-beat"
    ),
    pytest.param(
        b'{"c":"flush","cid":"auto3","a":"persisted"}',
        dict(command="flush", cmd_id="auto3", ack_type="persisted"),
        b"",
        id="flush",
    ),
]


@pytest.mark.parametrize(("payload", "fields", "body"), CLIENT_COMMANDS)
def test_client_command_decodes(payload: bytes, fields: dict[str, object], body: bytes) -> None:
    decoded = decode_frame(frame(payload))
    assert decoded.header == Header(**fields)  # type: ignore[arg-type]
    assert decoded.header.fields() == fields
    assert decoded.body == body


# Long aliases from the docs and other clients, quoted numbers, bare numbers for string fields.
ALIASES = [
    (b'{"cmd":"publish","topic":"a"}', dict(command="publish", topic="a")),
    (b'{"command":"subscribe","cmd_id":"c1","sub_ids":"x,y"}', dict(command="subscribe", cmd_id="c1", sub_ids="x,y")),
    (b'{"c":"sow","bs":"10","top_n":"3","skip_n":2,"order_by":"/x"}',
     dict(command="sow", batch_size=10, top_n=3, skip_n=2, order_by="/x")),
    (b'{"ack_type":"processed","opts":"oof","bm":"1|2|","seq":"7","expiration":30}',
     dict(ack_type="processed", options="oof", bookmark="1|2|", seq=7, expiration=30)),
    (b'{"options":"a","correlation_id":"z","sow_key":"k9","password":"p","f":"/a=1","v":"1.0"}',
     dict(options="a", correlation_id="z", sow_key="k9", password="p", filter="/a=1", version="1.0")),
    (b'{"sids":"s1","timestamp":"20240101T000000Z","msg_len":"3","gseq":4,"lp":"10s"}',
     dict(sub_ids="s1", timestamp="20240101T000000Z", msg_len=3, group_seq=4, lease_period="10s")),
    (b'{"k":12345,"cid":7}', dict(sow_key="12345", cmd_id="7")),
    (b'{"s":-3}', dict(seq=-3)),
    (b'{"e":"1.5"}', dict(expiration="1.5")),  # the server, not the codec, rejects this
    (b'{"e":1.5,"x":true}', dict(expiration="1.5", correlation_id="true")),
]  # fmt: skip


@pytest.mark.parametrize(("header", "fields"), ALIASES)
def test_aliases_map_to_canonical_names(header: bytes, fields: dict[str, object]) -> None:
    decoded, end = decode_header(header)
    assert decoded.fields() == fields
    assert end == len(header)


def test_unknown_keys_are_kept_apart_and_never_sent() -> None:
    header, _ = decode_header(b'{"c":"p","zz":"1","n":5,"flag":true,"t":"x"}')
    assert header.fields() == {"command": "publish", "topic": "x"}
    assert dict(header.extra) == {"zz": "1", "n": "5", "flag": "true"}
    assert encode_header(header) == b'{"c":"p","t":"x"}'


def test_tolerant_forms_decode_like_compact_json() -> None:
    compact, _ = decode_header(b'{"c":"p","t":"a b","s":5}')
    for variant in (
        b'{ "c" : "p" , "t" : "a b" , "s" : 5 }',
        b'{"c" :"p","t":"a b","s":"5"}',
        b'{"c":p,"t":"a b","s":5}',
        b'{\n\t"c":"p",\r\n"t":"a b",\n"s":5\n}',
    ):
        assert decode_header(variant)[0] == compact, variant


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (rb'"a\"b"', 'a"b'),
        (rb'"a\\b"', "a\\b"),
        (rb'"a\/b"', "a/b"),
        (rb'"\b\f\n\r\t"', "\b\f\n\r\t"),
        (rb'"ord\u0041x"', "ordAx"),
        (rb'"\u00e9\u4e2d"', "\u00e9\u4e2d"),
        (rb'"\ud83d\ude00"', "\U0001f600"),
        (rb'"\ud83d"', "\ufffd"),
        (rb'"a\xb"', "a\\xb"),  # unknown escape: kept as sent (raw-copied fields)
        ('"caf\u00e9 \u4e2d"'.encode(), "caf\u00e9 \u4e2d"),
        (b'"raw\nnewline"', "raw\nnewline"),
    ],
)
def test_string_escapes_are_decoded(raw: bytes, text: str) -> None:
    header, _ = decode_header(b'{"t":' + raw + b"}")
    assert header.topic == text


def test_body_starts_right_after_the_header() -> None:
    decoded = decode_frame(frame(b'{"c":"p","t":"a}b"}\n{"x":"}"}'))
    assert decoded.header.topic == "a}b"
    assert decoded.body == b'\n{"x":"}"}'


@pytest.mark.parametrize("value", [b'"v"', b"v"], ids=["json", "scanner"])
def test_too_many_header_fields(value: bytes) -> None:
    header = b"{" + b",".join(b'"k%d":%s' % (i, value) for i in range(300)) + b"}"
    with pytest.raises(RemoteProtocolError, match="more than 256 fields"):
        decode_header(header)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b' {"c":"p"}', "must start with '{'"),
        (b'xx{"c":"p"}', "must start with '{'"),
        (b'{"c":"p"', "not terminated"),
        (b'{"c":"p}', "unterminated string"),
        (b'{"c":{"x":1}}', "nested"),
        (b'{"c":["x"]}', "nested"),
        (b'{"c" "p"}', "bad syntax"),
        (b'{c:"p"}', "bad syntax"),
        (b'{"c":"p",}', "bad syntax"),
        (b'{"batch_size":"ten"}', "must be an integer"),
        (b'{"s":1.5}', "must be an integer"),
        (b'{"t":"\xff"}', "UTF-8"),
    ],
)
def test_broken_headers_raise_remote_protocol_error(header: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        decode_header(header)


# ---------------------------------------------------------------------------------------------
# Server -> client shapes, byte for byte as the official client accepted them (§3, §4, §5).


def test_logon_ack() -> None:
    got = encode_ack(
        AckType.PROCESSED, "auto0", Status.SUCCESS, version="5.3.4.120", client_name="e2e-pub",
        bookmark="7654191196413476067|0|", user_id="alice",
    )  # fmt: skip
    assert got == frame(
        b'{"c":"ack","cid":"auto0","a":"processed","status":"success","version":"5.3.4.120",'
        b'"client_name":"e2e-pub","bm":"7654191196413476067|0|","user_id":"alice"}'
    )


@pytest.mark.parametrize(
    ("kwargs", "payload"),
    [
        (dict(ack_type="processed", cmd_id="auto3"), b'{"c":"ack","cid":"auto3","a":"processed","status":"success"}'),
        (dict(ack_type="persisted", seq=1795327843539000001),
         b'{"c":"ack","a":"persisted","status":"success","s":1795327843539000001}'),
        (dict(ack_type="processed", cmd_id="auto5", status="failure", reason=Reason.INVALID_TOPIC, sub_id="auto5"),
         b'{"c":"ack","cid":"auto5","a":"processed","status":"failure","reason":"invalid topic","sub_id":"auto5"}'),
        (dict(ack_type="stats", cmd_id="f", matches=1, records_deleted=1, topic_matches=1),
         b'{"c":"ack","cid":"f","a":"stats","status":"success","matches":1,"records_deleted":1,"topic_matches":1}'),
        (dict(ack_type="persisted", cmd_id="auto2", sub_id="hbm", bm="0"),
         b'{"c":"ack","cid":"auto2","a":"persisted","status":"success","sub_id":"hbm","bm":"0"}'),
        (dict(ack_type="completed", cmd_id="auto16", query_id="auto16"),
         b'{"c":"ack","cid":"auto16","a":"completed","status":"success","query_id":"auto16"}'),
        (dict(ack_type="processed", cmd_id="auto0", status="retry"),
         b'{"c":"ack","cid":"auto0","a":"processed","status":"retry"}'),
    ],
)  # fmt: skip
def test_ack_shapes(kwargs: dict[str, object], payload: bytes) -> None:
    assert encode_ack(**kwargs) == frame(payload)  # type: ignore[arg-type]


def test_ack_refuses_combined_ack_types() -> None:
    with pytest.raises(LocalProtocolError, match="exactly one ack type"):
        encode_ack("received,processed", "auto1")


def test_publish_delivery() -> None:
    got = encode_publish(
        "orders", "orders-sub", b'{"id":1,"qty":10}', sub_id="orders-sub", bm="7654191196413476067|1|",
        k="912226640", x="Y29ycg==",
    )  # fmt: skip
    assert got == frame(
        b'{"c":"p","t":"orders","sub_id":"orders-sub","sids":"orders-sub","bm":"7654191196413476067|1|",'
        b'"k":"912226640","x":"Y29ycg=="}{"id":1,"qty":10}'
    )
    assert encode_publish("t", "a,b", b"", ts="20240101T000000Z", s=3, gseq=1, lp="1s") == frame(
        b'{"c":"p","t":"t","sids":"a,b","ts":"20240101T000000Z","s":3,"gseq":1,"lp":"1s"}'
    )


def test_publish_delivery_escapes_and_keeps_utf8() -> None:
    got = encode_publish('a"b\\c\u00e9\x01\n', "s", b"{}")
    header = decode_frame(got).header
    assert header.topic == 'a"b\\c\u00e9\x01\n'
    assert b"\\u" not in got
    assert "\u00e9".encode() in got
    assert escape_string('a"b\\c\n\x01') == 'a\\"b\\\\c\\n\x01'


@pytest.mark.parametrize("bad", [["x"], {"a": 1}, 1.5, True])
def test_publish_delivery_refuses_non_scalars(bad: object) -> None:
    with pytest.raises(LocalProtocolError):
        encode_publish("t", "s", b"", bm=bad)  # type: ignore[arg-type]


def test_oof() -> None:
    got = encode_oof("sowt", "auto13", b'{"id":2}', OofReason.MATCH, sub_id="auto13", bm="1|2|", k="77")
    assert got == frame(
        b'{"c":"oof","t":"sowt","sub_id":"auto13","sids":"auto13","reason":"match","bm":"1|2|","k":"77"}{"id":2}'
    )


def test_group_frames_and_heartbeat() -> None:
    assert encode_group_begin("auto11", "auto11") == frame(
        b'{"c":"group_begin","cid":"auto11","query_id":"auto11"}'
    )
    assert encode_group_end("auto11", "auto11") == frame(
        b'{"c":"group_end","cid":"auto11","query_id":"auto11"}'
    )
    assert frame(b'{"c":"heartbeat"}') == HEARTBEAT_FRAME


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"c": "p", "sow_keyz": "x"}, "cannot send header field 'sow_keyz'"),
        ({"c": "p", "cmd": "p"}, "cannot send header field 'cmd'"),
        ({"c": "p", "t": {"a": 1}}, "must be a str or int"),
        ({"c": "p", "t": ["a"]}, "must be a str or int"),
        ({"c": "p", "s": 1.5}, "must be a str or int"),
        ({"c": "p", "t": True}, "must be a str or int"),
        ({"t": "a", "topic": "b"}, "given twice"),
        ({"s": 2**70}, "cannot be encoded"),
    ],
)
def test_encoder_refuses_what_the_client_would_misread(header: dict[str, object], message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        encode_frame(header)


def test_encoder_maps_canonical_names_to_short_keys() -> None:
    got = encode_header(
        {"command": "publish", "topic": "t", "sow_key": "k1", "password": "pw", "bookmark": "1|1|",
         "correlation_id": "x", "timestamp": "ts", "msg_len": 3, "sub_ids": "a", "expiration": None}
    )  # fmt: skip
    assert got == b'{"c":"p","t":"t","k":"k1","pw":"pw","bm":"1|1|","x":"x","ts":"ts","l":3,"sids":"a"}'


def test_parse_ack_types() -> None:
    assert parse_ack_types(None) == 0
    assert parse_ack_types("processed") == ACK_BITS["processed"] == 4
    assert parse_ack_types("processed,completed") == 4 | 16
    assert parse_ack_types("received,parsed,processed,persisted,completed,stats") == 63
    assert parse_ack_types("processed,someday") == 4


def test_header_model() -> None:
    header, _ = decode_header(b'{"c":"p","t":"orders","s":"5","zz":"1"}')
    assert (header.command, header.topic, header.seq, header.filter) == ("publish", "orders", 5, None)
    assert list(header) == ["command", "topic", "seq"]
    assert header.get("seq") == 5 and header.get("filter", "-") == "-" and header.get("extra") is None
    changed = header.replace(topic="other", seq=None)
    assert changed.fields() == {"command": "publish", "topic": "other"}
    assert dict(changed.extra) == {"zz": "1"}
    assert header.topic == "orders"  # replace() copies
    assert header != Header(command="publish", topic="orders", seq=5)  # extra differs
    assert "seq=5" in repr(header) and "extra" in repr(header)
    with pytest.raises(TypeError, match="unknown field 'tpoic'"):
        Header(tpoic="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown field"):
        header.replace(t="x")
