"""The engine as composed objects: two engines in one process share nothing, the publish paths give the same
deliveries whichever one runs, and no module of broker/engine keeps mutable state at module level."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

import pytest

import broker.engine
from broker.engine import publish
from broker.engine.engine import Engine
from broker.expr import compile_filter, compile_order_by
from broker.messagetypes import get_message_type
from broker.sow.cache import CachedStorage
from broker.sow.keys import KeyGenerator, KeySpec
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker.testing.clients import RecordingClient
from broker_plugins.keygen.default import DefaultKeyGenerator
from broker_plugins.storage.memory import MemoryStorage

JSON = get_message_type("json")


def _engine(*sow: str) -> Engine:
    topics = {name: SowTopic(name=name, message_type=JSON, storage=MemoryStorage(StorageSpec(topic=name)),
                             key_generator=DefaultKeyGenerator(KeySpec(topic=name, key_domain=name,
                                                                       key_fields=("/id",))))
              for name in sow}
    return Engine(sow_topics=topics, message_types=get_message_type, compile_filter=compile_filter,
                  compile_order_by=compile_order_by, stats_topics=frozenset(sow))


def _frames(client: RecordingClient) -> list[tuple[str, str, str, bytes, str | None]]:
    return [(d.command, d.topic, d.sids, d.body, d.reason) for d in client.sent]


def test_two_engines_in_one_process_share_no_state() -> None:
    one, two = _engine("orders"), _engine("orders")
    pub = RecordingClient(JSON, "pub")
    reader_one, reader_two = RecordingClient(JSON, "r1"), RecordingClient(JSON, "r2")
    one.subscribe(reader_one, {"sub_id": "s", "topic": "orders", "filter": "/q > 1"})
    two.subscribe(reader_two, {"sub_id": "s", "topic": "orders", "filter": "/q > 1"})
    one.publish(pub, {"topic": "orders", "seq": 3}, b'{"id":1,"q":2}')
    # Interleaved: the same message to the second engine, then another to the first.
    two.publish(pub, {"topic": "orders", "seq": 1}, b'{"id":1,"q":2}')
    one.publish(pub, {"topic": "orders", "seq": 4}, b'{"id":2,"q":5}')
    assert [f[3] for f in _frames(reader_one)] == [b'{"id":1,"q":2}', b'{"id":2,"q":5}']
    assert [f[3] for f in _frames(reader_two)] == [b'{"id":1,"q":2}']
    assert one.publisher_seq == {"pub": 4} and two.publisher_seq == {"pub": 1}
    assert one.is_duplicate("pub", 3) and not two.is_duplicate("pub", 3)
    assert (one.counters.messages_received, two.counters.messages_received) == (2, 1)
    assert one.sow_topics["orders"].count() == 2 and two.sow_topics["orders"].count() == 1


@pytest.mark.parametrize("topic", ["orders", "plain"])
def test_whole_run_and_per_message_fan_out_deliver_the_same(topic: str) -> None:
    """A run every subscription takes whole goes out in one step per client; the same run with a filter that
    passes everything is decided per message: the frames each client reads are the same."""
    frames = []
    for flt in (None, "1 = 1"):
        engine = _engine("orders")
        a, b, pub = RecordingClient(JSON, "a"), RecordingClient(JSON, "b"), RecordingClient(JSON, "pub")
        for client, sids in ((a, ("x", "y")), (b, ("z",))):
            for sid in sids:
                engine.subscribe(client, {"sub_id": sid, "topic": topic, "filter": flt})
        results = engine.publish_batch(pub, [(topic, b'{"id":%d}' % i, False, i + 1, None, f"c{i}", None)
                                             for i in range(3)])
        frames.append((results, _frames(a), _frames(b), engine.counters.messages_delivered))
    assert frames[0] == frames[1]
    assert [f[2] for f in frames[0][1]] == ["x,y"] * 3 and len(frames[0][2]) == 3


def test_the_plain_path_takes_a_run_only_every_subscription_takes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine()
    runs: list[str] = []
    real = engine.publishing._plain_run
    monkeypatch.setattr(engine.publishing, "_plain_run", lambda client, topic, *rest: (runs.append(topic),
                                                                                       real(client, topic, *rest)))
    reader, pub = RecordingClient(JSON, "r"), RecordingClient(JSON, "pub")
    engine.subscribe(reader, {"sub_id": "w", "topic": "whole"})
    engine.subscribe(reader, {"sub_id": "f", "topic": "filtered", "filter": "/a = 1"})
    engine.publish_batch(pub, [("whole", b'{"a":1}', False, None, None, None, None),
                               ("filtered", b'{"a":1}', False, None, None, None, None),
                               ("filtered", b'{"a":2}', False, None, None, None, None)])
    assert runs == ["whole"]
    assert [(f[1], f[2], f[3]) for f in _frames(reader)] == [("whole", "w", b'{"a":1}'),
                                                            ("filtered", "f", b'{"a":1}')]


class _Undeclared(KeyGenerator):
    """The default key generator's keys, without declaring :meth:`KeyGenerator.top_level_recipe`."""

    def __init__(self, inner: KeyGenerator) -> None:
        self._inner = inner

    def generate(self, message: Any) -> str:
        return self._inner.generate(message)


@pytest.mark.skipif(publish._keyed_scan is None, reason="the compiled publish module is not built")
@pytest.mark.parametrize("declared", [True, False])
def test_the_keyed_path_runs_for_a_key_generator_that_declares_its_recipe(monkeypatch: pytest.MonkeyPatch,
                                                                          declared: bool) -> None:
    engine = _engine("orders")
    sow = engine.sow_topics["orders"]
    sow.storage = CachedStorage(sow.storage)
    assert sow.key_generator is not None
    if not declared:
        sow.key_generator = _Undeclared(sow.key_generator)
    keyed: list[int] = []
    real = engine.publishing._keyed_run
    monkeypatch.setattr(engine.publishing, "_keyed_run", lambda *args: keyed.append(1) or real(*args))
    pub = RecordingClient(JSON, "pub")
    results = engine.publish_batch(pub, [("orders", b'{"id":%d}' % (i % 2), False, i + 1, None, None, None)
                                         for i in range(3)])
    assert keyed == ([1] if declared else [])
    assert results == [0, 0, 0] and sow.count() == 2 and engine.publisher_seq == {"pub": 3}
    assert engine.counters.topics["orders"].received == 3


def _engine_modules() -> list[ModuleType]:
    return [importlib.import_module(f"broker.engine.{m.name}") for m in pkgutil.iter_modules(broker.engine.__path__)]


#: Module-level objects that are mutable but hold no broker's state: a bounded memo of a pure function of its
#: argument (no broker can see another through it).
PURE_MEMOS = {("broker.engine.acks", "_parsed")}


def test_no_engine_module_keeps_mutable_state() -> None:
    mutable = (dict, list, set, bytearray)
    found = []
    for module in _engine_modules():
        for name, value in vars(module).items():
            if name.startswith("__") or (module.__name__, name) in PURE_MEMOS:
                continue
            if isinstance(value, mutable) or type(value).__name__ in ("Memo", "Delivery", "DeliveryTemplate"):
                found.append(f"{module.__name__}.{name}")
    assert not found, f"module-level mutable state (make it an attribute of an object the engine owns): {found}"
