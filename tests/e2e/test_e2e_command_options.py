"""Command options end to end: docs/protocol.md's "Command options" tables against a real broker and the official
client. Every row marked refused is sent and must raise an exception naming the option (or header field, or
topic); a sample of supported rows must take effect; and the tables must agree with the broker's own list
(broker/engine/command_options.py)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import AMPS
import pytest

from broker.engine.command_options import NOT_IMPLEMENTED, SUPPORTED, option_problem
from tests.e2e.conftest import Collector
from tests.e2e.raw_amps import Raw, frame

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
COMMANDS = ("subscribe", "delta_subscribe", "sow", "sow_and_subscribe", "sow_and_delta_subscribe", "sow_delete",
            "publish")
TIMEOUT_MS = 5000


def _tables() -> tuple[list[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """(topic rows, command -> option rows) of the "Command options" section: each row as (first cell without
    its backticks, status)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Command options\n", 1)[1].split("\n## ", 1)[0]
    topics: list[tuple[str, str]] = []
    commands: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = topics
    for line in section.splitlines():
        heading = re.match(r"^### (\w+)$", line)
        if heading:
            current = commands.setdefault(heading[1], [])
            continue
        row = re.match(r"^\| `([^`]+)`([^|]*)\| (supported|refused) \|", line)
        if row:
            current.append((row[1].replace("\\|", "|") + row[2].rstrip(), row[3]))
    return topics, commands


TOPICS, TABLES = _tables()


def _refused_rows() -> list[tuple[str, str]]:
    return [(command, cell) for command, rows in TABLES.items() for cell, status in rows if status == "refused"]


def test_the_tables_cover_every_command_and_agree_with_the_broker() -> None:
    assert set(TABLES) == set(COMMANDS)
    assert TOPICS and all(status == "refused" for _cell, status in TOPICS)
    for command, rows in TABLES.items():
        for cell, status in rows:
            if not cell.startswith("o: "):
                continue
            text = cell[3:]
            bare = text.split(" ", 1)[0]  # "pause without a bookmark"
            name, _, value = bare.partition("=")
            bookmark = " " not in text  # the refused "pause without a bookmark" row is checked without one
            problem = option_problem(command, name, value if "=" in bare else None, bookmark=bookmark)
            if status == "supported":
                assert problem is None, (command, cell, problem)
            else:
                assert problem is not None, (command, cell)


def test_every_option_the_broker_knows_is_in_a_table() -> None:
    def named(status: str) -> set[str]:
        return {re.split(r"[= ]", cell[3:], maxsplit=1)[0] for rows in TABLES.values() for cell, st in rows
                if st == status and cell.startswith("o: ")}

    assert set(NOT_IMPLEMENTED) <= named("refused"), set(NOT_IMPLEMENTED) - named("refused")
    assert set(SUPPORTED) <= named("supported"), set(SUPPORTED) - named("supported")


def _command(command: str, topic: str = "orders") -> Any:
    cmd = AMPS.Command(command).set_topic(topic)
    if command == "sow_delete":
        cmd.set_filter("/id = -1")
    if command == "publish":
        cmd.set_data('{"id":-1}').add_ack_type("processed")
    return cmd


def _header_field(cmd: Any, cell: str) -> bool:
    """Set the header field of ``cell`` (``key: value``) on ``cmd``; ``False`` when the official client has no
    setter for it."""
    key, _, value = cell.partition(": ")
    setter = {"orderby": lambda: cmd.set_order_by(value), "top_n": lambda: cmd.set_top_n(int(value)),
              "sow_keys": lambda: cmd.set_sow_keys(value), "bookmark": lambda: cmd.set_bookmark(value)}.get(key)
    if setter is None:
        return False
    setter()
    return True


def _raw_refusal(port: int, command: str, key: str, value: str) -> str:
    """Send ``command`` with header field ``key`` on raw frames; the reason of its failed processed ack."""
    raw = Raw(port, f"raw-{command}-{key}")
    try:
        header = {"c": command, "t": "orders", "cid": "r1", "a": "processed", "sub_id": "r1", "query_id": "r1",
                  key: value}
        if command == "sow_delete":
            header["filter"] = "/id = -1"
        # By hand: the broker's encoder refuses keys it does not know (the client could misread them).
        payload = json.dumps(header, separators=(",", ":")).encode()
        raw.send_bytes(len(payload).to_bytes(4, "big") + payload)
        ack = raw.ack("r1", "processed")
        assert ack["status"] == "failure", ack
        return str(ack["reason"])
    finally:
        raw.close()


def _refused(client: Any, cmd: Any) -> Exception:
    try:
        stream = client.execute(cmd)
    except AMPS.AMPSException as exc:
        return exc
    stream.close()
    raise AssertionError("the broker accepted the command")


@pytest.mark.parametrize(("command", "cell"), _refused_rows())
def test_every_refused_row_raises_naming_it(shared_broker: Any, client_factory: Callable[..., Any], command: str,
                                            cell: str) -> None:
    client = client_factory(shared_broker.uri)
    cmd = _command(command)
    if cell.startswith("o: "):
        options = cell[3:].split(" ", 1)[0]
        cmd.set_options(options)
        exc = _refused(client, cmd)
        assert isinstance(exc, AMPS.InvalidOptionsException), exc
        assert options in str(exc), str(exc)
    elif _header_field(cmd, cell):
        exc = _refused(client, cmd)
        assert isinstance(exc, AMPS.CommandException), exc
        assert f"header field {cell.partition(':')[0]} is not supported by {command}" in str(exc), str(exc)
    else:  # a field the official client cannot set: raw frames
        key, _, value = cell.partition(": ")
        reason = _raw_refusal(shared_broker.port, command, key, value)
        assert reason.startswith(f"header field {key} is not supported by {command}"), reason
    # The connection carries on: a plain command works after the refusal.
    assert client.subscribe(lambda m: None, "orders", None, "", TIMEOUT_MS)


@pytest.mark.parametrize("topic", [cell for cell, _status in TOPICS])
def test_every_amps_event_topic_is_refused_by_every_command(shared_broker: Any, client_factory: Callable[..., Any],
                                                            topic: str) -> None:
    client = client_factory(shared_broker.uri)
    for command in COMMANDS:
        exc = _refused(client, _command(command, topic))
        assert isinstance(exc, AMPS.InvalidTopicException), (command, exc)
        assert topic in str(exc), (command, str(exc))


def test_the_testers_cases(shared_broker: Any, client_factory: Callable[..., Any]) -> None:
    # Issue 33: each of these was accepted and ignored.
    client = client_factory(shared_broker.uri)
    with pytest.raises(AMPS.InvalidOptionsException, match="conflation=1s"):
        client.subscribe(lambda m: None, "orders", None, "conflation=1s", TIMEOUT_MS)
    with pytest.raises(AMPS.InvalidOptionsException, match=re.escape("select=[-/qty]")):
        list(client.sow("orders", options="select=[-/qty]", timeout=TIMEOUT_MS))
    with pytest.raises(AMPS.InvalidTopicException, match="/AMPS/ClientStatus"):
        client.subscribe(lambda m: None, "/AMPS/ClientStatus", None, "", TIMEOUT_MS)
    with pytest.raises(AMPS.InvalidTopicException, match="/AMPS/SOWStats"):
        client.subscribe(lambda m: None, "/AMPS/SOWStats", None, "", TIMEOUT_MS)


def _sow_ids(client: Any, **kwargs: Any) -> list[int]:
    return [json.loads(m.get_data())["id"] for m in client.sow("orders", timeout=TIMEOUT_MS, **kwargs)
            if m.get_command() == "sow"]


def test_supported_top_n_and_skip_n_take_effect(broker: Any, client_factory: Callable[..., Any]) -> None:
    client = client_factory(broker.uri)
    for i in range(1, 11):
        client.publish("orders", json.dumps({"id": i, "qty": i}))
    client.publish_flush()
    assert len(_sow_ids(client, options="top_n=3")) == 3
    assert _sow_ids(client, order_by="/id", options="top_n=3,skip_n=2") == [3, 4, 5]


def test_supported_replace_changes_the_filter(broker: Any, client_factory: Callable[..., Any],
                                              collector: Collector) -> None:
    client = client_factory(broker.uri)
    client.subscribe(collector, "orders", "/qty = 1", "", TIMEOUT_MS, "r1")
    client.subscribe(collector, "orders", "/qty = 2", "replace", TIMEOUT_MS, "r1")
    client.publish("orders", '{"id":1,"qty":1}')
    client.publish("orders", '{"id":2,"qty":2}')
    got = collector.wait_for(1, command="publish")
    time.sleep(0.3)
    assert [json.loads(d)["id"] for d in collector.data()] == [2], got


def test_supported_no_empties_drops_updates_that_change_nothing(broker: Any, client_factory: Callable[..., Any],
                                                                make_collector: Callable[[], Collector]) -> None:
    client = client_factory(broker.uri)
    client.publish("orders", '{"id":1,"qty":1}')
    client.publish_flush()
    quiet, chatty = make_collector(), make_collector()
    # The official client sends no_empties unless send_empties=True.
    client.sow_and_delta_subscribe(quiet, "orders", timeout=TIMEOUT_MS)
    client.sow_and_delta_subscribe(chatty, "orders", send_empties=True, timeout=TIMEOUT_MS)
    client.publish("orders", '{"id":1,"qty":1}')  # changes nothing
    client.publish("orders", '{"id":1,"qty":2}')
    assert len(chatty.wait_for(2, command="publish")) == 2
    quiet.wait_for(1, command="publish")
    time.sleep(0.3)
    assert [json.loads(d) for d in quiet.data()] == [{"id": 1, "qty": 2}]


def test_publish_with_options_is_refused_on_the_batch_path_too(broker: Any,
                                                               client_factory: Callable[..., Any]) -> None:
    # A publisher asking for no ack: identical frames in one write take the publish batch unless the broker
    # looks at each; with options, none may be applied (and none answered: it asked for nothing).
    raw = Raw(broker.port, "raw-options")
    try:
        raw.send_bytes(b"".join(frame({"c": "p", "t": "orders", "o": "oof"}, json.dumps({"id": i}).encode())
                                for i in range(50)))
        raw.send({"c": "flush", "cid": "f", "a": "processed"})
        assert raw.ack("f", "processed")["status"] == "success"
    finally:
        raw.close()
    client = client_factory(broker.uri)
    assert _sow_ids(client) == []
