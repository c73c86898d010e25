"""The command-option check (broker/engine/command_options.py) and the codec's part in it: publishes with options
or an /AMPS/ topic are never remembered, so they cannot slip onto the publish batch path unchecked."""

from __future__ import annotations

import pytest

from broker.engine.command_options import check_command, option_problem
from broker.errors import CommandError
from broker.protocol import Connection, encode_frame
from broker.protocol.constants import is_reserved_topic


@pytest.mark.parametrize(("command", "options", "bookmark"), [
    ("subscribe", "replace,oof", False),
    ("delta_subscribe", "no_empties,send_keys", False),
    ("subscribe", "pause,rate=10,bookmark_not_found=fail,live", True),
    ("sow", "top_n=3,skip_n=1,grouping=[/a],projection=[/a,COUNT(/b) AS /n]", False),
    ("sow_and_delta_subscribe", "oof,no_empties,top_n=2,skip_n=0", False),
])
def test_supported_options_pass(command: str, options: str, bookmark: bool) -> None:
    check_command(command, {"topic": "orders", "options": options}, bookmark=bookmark)


@pytest.mark.parametrize(("command", "options", "named"), [
    ("subscribe", "oof,conflation=1s", "conflation"),
    ("subscribe", "conflation_key=[/id]", "conflation_key"),
    ("sow", "select=[-/qty]", "select"),
    ("subscribe", "pause", "bookmark subscriptions only"),
    ("subscribe", "no_empties", "delta_subscribe"),
    ("sow", "oof", "sow does not take it"),
    ("subscribe", "colour=blue", "not an AMPS option"),
    ("subscribe", "oof=1", "takes no value"),
    ("sow", "top_n", "needs a value"),
    ("publish", "replace", "publish does not take it"),
    ("sow_delete", "expire", "expire"),
])
def test_refused_options_name_the_option(command: str, options: str, named: str) -> None:
    with pytest.raises(CommandError) as info:
        check_command(command, {"topic": "orders", "options": options})
    assert info.value.reason == "invalid options"
    assert named in info.value.detail


def test_bookmark_not_found_values_are_checked() -> None:
    assert option_problem("subscribe", "bookmark_not_found", "later", bookmark=True) is not None
    assert option_problem("subscribe", "bookmark_not_found", "now", bookmark=True) is None


@pytest.mark.parametrize("topic", ["/AMPS/ClientStatus", "/AMPS/SOWStats", "^/AMPS/.*", "(/AMPS/Client.*)"])
def test_amps_event_topics_are_refused(topic: str) -> None:
    assert is_reserved_topic(topic)
    with pytest.raises(CommandError) as info:
        check_command("subscribe", {"topic": topic})
    assert info.value.reason == "invalid topic"
    assert not is_reserved_topic("/orders/AMPS/x")


def test_query_fields_on_a_subscribe_are_refused_naming_them() -> None:
    with pytest.raises(CommandError) as info:
        check_command("subscribe", {"topic": "orders", "order_by": "/id"})
    assert info.value.reason.startswith("header field orderby is not supported by subscribe")
    check_command("sow_delete", {"topic": "orders", "sow_keys": "1,2"})
    check_command("publish", {"topic": "orders", "top_n": 3})  # not examined per message


@pytest.mark.parametrize(("header", "remembered"), [
    ({"c": "p", "t": "orders"}, True),
    ({"c": "p", "t": "orders", "o": "oof"}, False),
    ({"c": "p", "t": "/AMPS/ClientStatus"}, False),
])
def test_the_codec_remembers_only_headers_the_batch_may_take(header: dict[str, str], remembered: bool) -> None:
    conn = Connection()
    data = encode_frame(header, b'{"id":1}') * 3
    conn.receive_data(data)
    first = conn.next_event()
    batch: list = []
    conn.next_publishes(batch, None, frozenset({"publish"}), frozenset({""}))
    assert first.header.command == "publish"
    assert len(batch) == (2 if remembered else 0)


def test_older_header_fields_are_refused_naming_them_but_not_on_a_publish() -> None:
    conn = Connection()
    payload = b'{"c":"subscribe","t":"orders","cid":"1","send_empty":"false"}'
    conn.receive_data(len(payload).to_bytes(4, "big") + payload)
    header = conn.next_event().header
    assert dict(header.extra) == {"send_empty": "false"}
    with pytest.raises(CommandError) as info:
        check_command("delta_subscribe", header)
    assert info.value.reason.startswith("header field send_empty is not supported by delta_subscribe")
    check_command("publish", header)
