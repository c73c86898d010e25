"""``<RecordCacheMemoryLimit>``: each SOW topic's cache of hot records is the size the config gives it, driven
with the official AMPS client over TCP against ``broker serve``, and watched the way an admin would: the
``broker_sow_record_cache_*`` metrics on the Admin port, checked against the reads the storage engine really
served (the counting engine of docs/examples reports them when it closes).

Three topics take the same publishes (three rounds over the same keys): one with the cache off, one whose
cache holds a handful of records, one with the default (which holds them all). Every topic ends with the
same records; only where the previous record was read from differs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import AMPS
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
MODULES = f"<Module><Name>counting</Name><Library>{EXAMPLES / 'counting_storage.py'}</Library></Module>"
SMALL = 3 * 1024


def _topic(name: str, limit: str | None) -> str:
    cache = f"<RecordCacheMemoryLimit>{limit}</RecordCacheMemoryLimit>" if limit is not None else ""
    return (f"<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>/id</Key>"
            f"<Durability>transient</Durability>{cache}<Storage><Module>counting</Module></Storage></Topic>")


SOW = _topic("off", "0") + _topic("small", f"{SMALL // 1024}KB") + _topic("whole", None)
TOPICS = ("off", "small", "whole")
KEYS, ROUNDS = 60, 3
REPORT = re.compile(r"counting storage (\S+): (\d+) records, (\d+) reads, (\d+) scans, (\d+) writes")


def cache_metrics(broker: BrokerProcess) -> dict[str, dict[str, float]]:
    """topic -> {bytes, hits, misses} from a fresh scrape of /metrics."""
    _headers, body = fresh_get(broker.admin_port)
    names = {"broker_sow_record_cache_bytes": "bytes", "broker_sow_record_cache_hits_total": "hits",
             "broker_sow_record_cache_misses_total": "misses"}
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in names:
                found.setdefault(sample.labels["topic"], {})[names[sample.name]] = sample.value
    return found


def test_each_topic_caches_what_its_limit_allows_and_the_metrics_say_where_reads_went(
        tmp_path: Path, client_factory: Callable[..., AMPS.Client]) -> None:
    broker = BrokerProcess.from_xml(tmp_path, admin=True, modules=MODULES, sow=SOW).start()
    try:
        client = client_factory(broker.uri)
        for r in range(ROUNDS):
            for topic in TOPICS:
                for i in range(KEYS):
                    client.publish(topic, json.dumps({"id": i, "round": r, "pad": "x" * 40}))
        client.publish_flush(10_000)

        # The same records everywhere: the cache changes where a read is answered, never what it answers.
        for topic in TOPICS:
            rows = [json.loads(m.get_data()) for m in sow_stream(client, topic, batch_size=50)
                    if m.get_command() == "sow"]
            assert sorted((row["id"], row["round"]) for row in rows) == [(i, ROUNDS - 1) for i in range(KEYS)]

        seen = cache_metrics(broker)
        off, small, whole = (seen[t] for t in TOPICS)
        # Off: nothing held, every read went to the engine.
        assert off["bytes"] == 0 and off["hits"] == 0 and off["misses"] >= KEYS
        # A few records' worth: held within its bound; the keys cycle through more than it holds, so the later
        # rounds' reads still reach the engine.
        assert 0 < small["bytes"] <= SMALL and small["misses"] >= KEYS
        # The default holds the whole topic (it started empty and evicted nothing): no read reached the engine.
        assert whole["bytes"] > SMALL and whole["misses"] == 0 and whole["hits"] >= KEYS
        client.close()
    finally:
        assert broker.stop() == 0

    # The engine's own count of the reads it served (reported when the broker closes it) is what the metric said.
    reads = {m[1]: int(m[3]) for m in REPORT.finditer(broker.log())}
    assert reads == {"off": off["misses"], "small": small["misses"], "whole": 0}, broker.log()[-3000:]


RESTARTED = ("<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>"
             "</Topic><Topic><Name>tight</Name><MessageType>json</MessageType><Key>/id</Key>"
             f"<FileName>./sow/%n.sow</FileName><RecordCacheMemoryLimit>{SMALL}</RecordCacheMemoryLimit></Topic>")


def test_a_restarted_topic_starts_with_its_records_cached(tmp_path: Path,
                                                          client_factory: Callable[..., AMPS.Client]) -> None:
    """After a restart the cache is loaded from LevelDB: a topic that fits is held whole again, so neither its
    updates nor its new keys read LevelDB; one that does not fit holds what its limit allows and reads the rest."""
    broker = BrokerProcess.from_xml(tmp_path, admin=True, sow=RESTARTED)
    broker.start()
    try:
        client = client_factory(broker.uri)
        for topic in ("orders", "tight"):
            for i in range(200):
                client.publish(topic, json.dumps({"id": i, "v": "first", "pad": "x" * 40}))
        client.publish_flush(10_000)
        client.close()
    finally:
        assert broker.stop() == 0

    broker.start()
    try:
        assert re.search(r"SOW topic orders: record cache loaded 200 records \(.* MB\) in .*s; the whole topic",
                         broker.log()), broker.log()[-3000:]
        assert "SOW topic tight: record cache loaded" in broker.log()
        loaded = cache_metrics(broker)
        assert loaded["orders"]["bytes"] > SMALL >= loaded["tight"]["bytes"] > 0
        client = client_factory(broker.uri)
        for topic in ("orders", "tight"):
            for i in range(250):  # 200 updates, then 50 new keys
                client.publish(topic, json.dumps({"id": i, "v": "second", "pad": "x" * 40}))
        client.publish_flush(10_000)
        for topic in ("orders", "tight"):
            rows = [json.loads(m.get_data()) for m in sow_stream(client, topic, batch_size=100)
                    if m.get_command() == "sow"]
            assert sorted((row["id"], row["v"]) for row in rows) == [(i, "second") for i in range(250)]
        seen = cache_metrics(broker)
        assert seen["orders"]["misses"] == 0 and seen["orders"]["hits"] >= 250
        assert seen["tight"]["misses"] >= 200 - seen["tight"]["hits"] > 0
        client.close()
    finally:
        assert broker.stop() == 0
