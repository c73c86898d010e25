"""Large messages on a logged SOW topic through the official AMPS client (issue 34): their LevelDB write runs on a
thread of its own after the publish is applied, yet a sow query and a sow_and_subscribe right after the publish
return them, a later publish to the same key wins, and a clean restart keeps the last of each key."""

from __future__ import annotations

import json
import time
from pathlib import Path

import AMPS

from broker.testing.process import BrokerProcess
from broker_plugins.storage.write_behind import LARGE_VALUE

SOW = """<Topic><Name>big</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
<Topic><Name>big</Name><MessageType>json</MessageType></Topic>"""


def _client(proc: BrokerProcess, name: str) -> AMPS.Client:
    client = AMPS.Client(f"{name}-{time.monotonic_ns()}")
    client.connect(proc.uri)
    client.logon(5000)
    return client


def _doc(ident: int, fill: str) -> str:
    return json.dumps({"id": ident, "x": fill * (2 * LARGE_VALUE)})


def _sow(client: AMPS.Client) -> dict[int, str]:
    out = {}
    for message in client.sow("big", timeout=20_000):
        if message.get_command() == "sow":
            doc = json.loads(message.get_data())
            out[doc["id"]] = doc["x"][0]
    return out


def test_large_messages_are_queried_at_once_and_kept_across_a_restart(tmp_path: Path) -> None:
    proc = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG).start()
    try:
        client = _client(proc, "large")
        for ident, fill in ((1, "a"), (2, "b"), (1, "c")):  # the second write of id 1 while the first may pend
            client.execute(AMPS.Command("publish").set_topic("big").set_data(_doc(ident, fill))
                           .add_ack_type("processed"))
        assert _sow(client) == {1: "c", 2: "b"}
        seen: list[tuple[str, int, str]] = []
        for message in client.sow_and_subscribe("big", timeout=20_000):
            if message.get_command() == "sow":
                doc = json.loads(message.get_data())
                seen.append(("sow", doc["id"], doc["x"][0]))
            elif message.get_command() == "group_end":
                break
        assert sorted(seen) == [("sow", 1, "c"), ("sow", 2, "b")]
        client.close()
        assert proc.stop() == 0
        # The stop was clean: every pending write was written and synced before the state file said so.
        (state,) = (tmp_path / "journal").glob("*.sow-state")
        assert json.loads(state.read_text())["clean"] is True
        proc.start()
        client = _client(proc, "after")
        assert _sow(client) == {1: "c", 2: "b"}
        client.close()
    finally:
        proc.stop()
