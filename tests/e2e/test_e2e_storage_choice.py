"""A storage engine and key generator chosen and configured in the XML, driven with the official AMPS client
over TCP against ``broker serve`` (issue 20, acceptance 1 and 2).

The plugins are the docs' examples (docs/examples/counting_storage.py and custom_keygen.py), loaded through
``<Modules>`` exactly as docs/plugins.md shows, with options at module level and per use.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import AMPS

from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess, config_xml, free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

MODULES = f"""
<Module>
  <Name>counting</Name>
  <Library>{EXAMPLES / "counting_storage.py"}</Library>
  <Options><ReportEvery>1000</ReportEvery><Label>from-modules</Label></Options>
</Module>
<Module>
  <Name>upper</Name>
  <Library>{EXAMPLES / "custom_keygen.py"}</Library>
  <Options><Separator>;</Separator></Options>
</Module>
"""

SOW = """
<Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/symbol</Key>
  <Durability>transient</Durability>
  <Storage><Module>counting</Module><Options><ReportEvery>3</ReportEvery></Options></Storage></Topic>
<Topic><Name>scratch</Name><MessageType>json</MessageType><Key>/symbol</Key>
  <Durability>transient</Durability>
  <Storage><Module>counting</Module><Options><Label>scratch-pad</Label></Options></Storage></Topic>
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>returns</Name><MessageType>json</MessageType><Key>/id</Key><Key>/region</Key>
  <Durability>transient</Durability>
  <KeyGenerator><Module>upper</Module></KeyGenerator></Topic>
<Topic><Name>claims</Name><MessageType>json</MessageType><Key>/id</Key><Key>/region</Key>
  <Durability>transient</Durability>
  <KeyGenerator><Module>upper</Module><Options><Separator>:</Separator></Options></KeyGenerator></Topic>
"""

# Only quotes is logged: it is rebuilt from the journal at start-up; scratch (same engine) is not.
TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>quotes</Name><MessageType>json</MessageType></Topic>
"""

QUOTES = [{"symbol": s, "price": p} for s, p in (("IBM", 140.5), ("MSFT", 410.0), ("AAPL", 190.25),
                                                  ("ORCL", 9.5), ("SAP", 5.0))]
ORDERS = [{"id": i, "qty": i * 10} for i in range(1, 7)]

REPORT = re.compile(r"counting storage (\S+): (\d+) records, (\d+) reads, (\d+) scans, (\d+) writes")


def sow(client: AMPS.Client, topic: str, filter: str | None = None) -> list[tuple[str, dict]]:
    """(SowKey, record) of every record a sow query returns, in order."""
    return [(m.get_sow_key(), json.loads(m.get_data()))
            for m in sow_stream(client, topic, batch_size=10, filter=filter) if m.get_command() == "sow"]


def reports(broker: BrokerProcess, label: str) -> list[tuple[int, int, int, int]]:
    """(records, reads, scans, writes) of every report line the counting engine logged for ``label``."""
    return [tuple(int(n) for n in m.groups()[1:]) for m in REPORT.finditer(broker.log()) if m[1] == label]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_counting_engine_stores_queries_and_is_rebuilt_while_another_topic_keeps_leveldb(
        tmp_path: Path, client_factory: Callable[..., AMPS.Client]) -> None:
    broker = BrokerProcess.from_xml(tmp_path, modules=MODULES, sow=SOW, transaction_log=TXLOG).start()
    try:
        client = client_factory(broker.uri)
        for quote in QUOTES:
            client.publish("quotes", json.dumps(quote))
            client.publish("scratch", json.dumps(quote))
        for order in ORDERS:
            client.publish("orders", json.dumps(order))
        client.publish("quotes", json.dumps({"symbol": "IBM", "price": 150.0}))  # an update, not a new record
        client.publish_flush(5000)

        # Stores and queries (with a filter) like any SOW topic.
        assert sorted(r["symbol"] for _k, r in sow(client, "quotes", "/price > 100")) == ["AAPL", "IBM", "MSFT"]
        assert {"symbol": "IBM", "price": 150.0} in [r for _k, r in sow(client, "quotes")]
        assert sorted(r["id"] for _k, r in sow(client, "orders", "/qty >= 40")) == [4, 5, 6]

        # The engine serving quotes is the counting one, with the per-use ReportEvery (3, not the module's
        # 1000) and the module's Label: a report after the 3rd and the 6th write.
        assert wait_for(lambda: len(reports(broker, "from-modules")) >= 2), broker.log()
        assert [(records, writes) for records, _r, _s, writes in reports(broker, "from-modules")[:2]] == \
            [(3, 3), (5, 6)]
        assert not reports(broker, "scratch-pad")  # ReportEvery 1000 from <Modules>: not yet

        # The other topic keeps LevelDB: its records are in a LevelDB directory at its FileName.
        assert (tmp_path / "sow" / "orders.sow" / "CURRENT").is_file()
        assert not (tmp_path / "sow" / "quotes.sow").exists()
        client.close()
    finally:
        assert broker.stop() == 0

    # Closing the storage at shutdown reports the final counters. Every publish read the record it replaces from the
    # SOW's cache of hot records, which sits in front of every engine: the engine started empty and the cache evicted
    # nothing, so the cache holds every record and no publish read the engine (docs/plugins.md); the queries scanned.
    records, reads, scans, writes = reports(broker, "from-modules")[-1]
    assert (records, writes) == (5, 6) and reads == 0 and scans >= 2
    assert reports(broker, "scratch-pad")[-1][0] == 5

    # What each engine promises across a restart: LevelDB keeps orders from its files; the counting engine
    # keeps nothing, so quotes (logged) is rebuilt from the transaction log and scratch (not logged) is empty.
    broker.start()
    try:
        client = client_factory(broker.uri)
        assert sorted((r for _k, r in sow(client, "orders")), key=lambda r: r["id"]) == ORDERS
        assert sorted(r["symbol"] for _k, r in sow(client, "quotes", "/price > 100")) == ["AAPL", "IBM", "MSFT"]
        assert {"symbol": "IBM", "price": 150.0} in [r for _k, r in sow(client, "quotes")]
        assert sow(client, "scratch") == []
        client.close()
    finally:
        assert broker.stop() == 0


def test_key_generator_options_from_modules_and_per_use(tmp_path: Path,
                                                        client_factory: Callable[..., AMPS.Client]) -> None:
    broker = BrokerProcess.from_xml(tmp_path, modules=MODULES, sow=SOW).start()
    try:
        client = client_factory(broker.uri)
        for topic in ("returns", "claims"):
            client.publish(topic, json.dumps({"id": "a-17", "region": "eu", "qty": 1}))
            client.publish(topic, json.dumps({"id": "a-17", "region": "eu", "qty": 2}))  # same key: an update
        client.publish_flush(5000)
        assert sow(client, "returns") == [("A-17;EU", {"id": "a-17", "region": "eu", "qty": 2})]  # <Modules>
        assert sow(client, "claims") == [("A-17:EU", {"id": "a-17", "region": "eu", "qty": 2})]  # per use
    finally:
        broker.stop()


def test_serve_refuses_an_unknown_option_as_check_does(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "bad.xml"
    path.write_text(config_xml(port=port, modules=MODULES, sow=SOW.replace(
        "<ReportEvery>3</ReportEvery>", "<ReportEvery>3</ReportEvery><Colour>red</Colour>")))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "<Colour>" in text)
    out = subprocess.run([sys.executable, "-m", "broker", "serve", str(path)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 2
    assert (f"{path}:{line}: /AMPSConfig/SOW/Topic[1]/Storage: storage engine 'counting' (plugin 'counting'): "
            "unknown option <Colour> (accepted: Label, ReportEvery)") in out.stderr
