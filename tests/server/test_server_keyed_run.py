"""The compiled keyed run (issue 17, W1): :meth:`PublishSteps._keyed_run` applies a run of plain JSON publishes to
a SOW topic nobody subscribes to with :func:`broker.speedups.publish.keyed_scan` and ``stored_values`` instead of
the Python loop. These tests apply the same batches to two brokers, one with the compiled run and one with the
Python loop only (``_keyed_scan`` set to ``None``, as with ``BROKER_PURE_PYTHON=1``), on the same clock, and
require the same results, journal records, stored values, counts, cache statistics and engine counters; batches
with what the compiled pass hands back (deltas, bad JSON, wide integers, duplicates, keys a small cache evicted)
check that the handing back changes nothing."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import types
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import trio
from engine_fakes import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import load_config
from broker.engine import publish
from broker.engine.publish import PublishMessage
from broker.server.kernel import Broker, build_broker
from broker.sow.cache import CachedStorage
from broker.txlog import ReplayStart

#: The compiled pass (the tests set ``publish._keyed_scan`` per broker).
SCAN = publish._keyed_scan
pytestmark = pytest.mark.skipif(SCAN is None, reason="the compiled publish module is not built")

CONFIG = """<AMPSConfig><Name>keyed-run</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@contextlib.contextmanager
def brokers(cache_bytes: int | None) -> Iterator[tuple[Broker, Broker]]:
    """Two brokers from CONFIG in their own directories (``cache_bytes``: each SOW topic's cache bound)."""
    root = Path(tempfile.mkdtemp(prefix="keyed-run-"))
    made: list[Broker] = []
    try:
        for name in ("compiled", "python"):
            (root / name).mkdir()
            (root / name / "config.xml").write_text(CONFIG.format(d=root / name))
            b = build_broker(load_config(root / name / "config.xml"))
            made.append(b)
            if cache_bytes is not None:
                for sow in b.engine.sow_topics.values():
                    sow.storage = CachedStorage(sow.storage.inner, max_bytes=cache_bytes)
        yield made[0], made[1]
    finally:
        for b in made:
            trio.run(b.aclose)
        shutil.rmtree(root, ignore_errors=True)


def state(b: Broker) -> dict[str, Any]:
    """What a user (or the Admin view) could see of a broker after publishing."""
    b.durability.journal.sync()
    out: dict[str, Any] = {"journal": list(b.durability.journal.replay(ReplayStart.epoch())),
                           "counters": asdict(b.engine.counters), "publisher_seq": dict(b.engine.publisher_seq)}
    for name, sow in b.engine.sow_topics.items():
        out[name] = (list(sow.storage.scan()), sow.stats.inserts, sow.stats.updates, sow.count(),
                     sow.storage.statistics())
    return out


class Applied:
    """Applies batches to both brokers at the same instants; counts the runs the compiled pass took."""

    def __init__(self, compiled: Broker, python: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pair = ((compiled, Client(compiled)), (python, Client(python)))
        self.now = 1_700_000_000_000_000_000
        self.taken = 0
        monkeypatch.setattr(publish, "time", types.SimpleNamespace(time_ns=lambda: self.now))

    def _counting_scan(self, *args: Any) -> Any:
        scan = SCAN(*args)
        self.taken += scan is not None
        return scan

    def batch(self, messages: list[PublishMessage], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
        self.now += 1_000_000_000
        answers = []
        for (b, client), scan in zip(self.pair, (self._counting_scan, None), strict=True):
            monkeypatch.setattr(publish, "_keyed_scan", scan)
            answers.append([r if isinstance(r, int) else (type(r).__name__, str(r))
                            for r in b.engine.publish_batch(client, messages)])
        assert answers[0] == answers[1]
        return answers[0]


def msg(topic: str, body: bytes, *, seq: int | None = None, delta: bool = False,
        cid: str | None = None) -> PublishMessage:
    return topic, body, delta, seq, None, cid, None


def body_of(kind: str, ident: int, value: int) -> bytes:
    if kind == "bad":
        return b'{"id": %d, "v": ' % ident
    if kind == "list":
        return b"[1, 2]"
    if kind == "wide":
        return b'{"id": %d, "v": 123456789012345678901234}' % ident
    if kind == "nokey":
        return b'{"v": %d}' % value
    return json.dumps({"id": ident, "v": value, "pad": "x" * (value % 7)}).encode()


message = st.tuples(st.sampled_from(["orders", "quotes"]), st.integers(0, 5), st.integers(0, 50),
                    st.sampled_from(["ok"] * 12 + ["bad", "list", "wide", "nokey", "delta"]),
                    st.sampled_from([None, "", "c1", "corr-\u00e9"]), st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(message, min_size=1, max_size=12), min_size=1, max_size=6),
       cache_bytes=st.sampled_from([None, 0, 700]))
def test_the_compiled_run_leaves_what_the_python_loop_leaves(batches: list[Any], cache_bytes: int | None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with brokers(cache_bytes) as (compiled, python):
        applied = Applied(compiled, python, monkeypatch)
        seq = 0
        for batch in batches:
            messages = []
            for topic, ident, value, kind, cid, resend in batch:
                seq += 1
                messages.append(msg(topic, body_of(kind, ident, value), seq=max(seq - 3, 1) if resend else seq,
                                    delta=kind == "delta", cid=cid))
            applied.batch(messages, monkeypatch)
        assert state(compiled) == state(python)


def test_plain_ingest_takes_the_compiled_run_and_matches_the_python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    with brokers(None) as (compiled, python):
        applied = Applied(compiled, python, monkeypatch)
        # New keys, then updates of them and of keys written earlier in the same batch, with correlation ids.
        first = applied.batch([msg("orders", body_of("ok", i, i), seq=i + 1) for i in range(20)], monkeypatch)
        again = applied.batch([msg("orders", body_of("ok", i % 7, 100 + i), seq=21 + i, cid=f"c{i}")
                               for i in range(14)], monkeypatch)
        unlogged = applied.batch([msg("quotes", body_of("ok", i % 3, i)) for i in range(5)], monkeypatch)
        assert applied.taken == 3
        assert first == list(range(1, 21)) and again == list(range(21, 35)) and unlogged == [0] * 5
        assert state(compiled) == state(python)
        orders = compiled.engine.sow_topics["orders"]
        assert (orders.stats.inserts, orders.stats.updates, orders.count()) == (20, 14, 20)
        # A subscriber on the topic: the Python loop (it reads the replaced records); the same outcome.
        compiled.engine.subscribe(Client(compiled), {"sub_id": "s", "topic": "orders"})
        python.engine.subscribe(Client(python), {"sub_id": "s", "topic": "orders"})
        applied.batch([msg("orders", body_of("ok", 1, 999), seq=40)], monkeypatch)
        assert applied.taken == 3
        assert state(compiled) == state(python)


def test_a_failed_sow_write_in_the_compiled_run_fails_the_run_and_takes_its_journal_records_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_fakes import FailingWrites

    with brokers(None) as (compiled, python):
        applied = Applied(compiled, python, monkeypatch)
        applied.batch([msg("orders", body_of("ok", 1, 1), seq=1)], monkeypatch)
        for b in (compiled, python):
            FailingWrites(b.engine.sow_topics["orders"].storage, monkeypatch).failures = 1
        failed = applied.batch([msg("orders", body_of("ok", 1, 2), seq=2), msg("orders", body_of("ok", 2, 2), seq=3)],
                               monkeypatch)
        assert [f[0] for f in failed] == ["StorageError", "StorageError"]
        assert applied.taken == 2
        assert state(compiled) == state(python)
        assert applied.batch([msg("orders", body_of("ok", 1, 2), seq=2)], monkeypatch) == [4]  # sent again: applied (2 and 3 are a gap)
        assert state(compiled) == state(python)
