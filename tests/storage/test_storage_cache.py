"""The SOW's cache of hot records (:mod:`broker.sow.cache`): the storage conformance suite wrapped around both
built-in engines (restart included, and with a bound so small that every write evicts), and no path that
changes a record (upsert, batch upsert, delete by key or filter, expiration, a failed write, start-up repair)
ever leaves the cache serving a value the engine does not hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import StorageError
from broker.messagetypes import get_message_type
from broker.sow.cache import ENTRY_OVERHEAD, MISS, CachedStorage
from broker.sow.record import SowRecord
from broker.sow.storage import Storage, StorageSpec
from broker.sow.topic import SowTopic
from broker.testing import StorageConformance
from broker_plugins.storage.leveldb import LevelDBStorage
from broker_plugins.storage.memory import MemoryStorage


class TestCachedMemoryStorage(StorageConformance):
    durable = False

    def make_storage(self, path: Path) -> CachedStorage:
        return CachedStorage(MemoryStorage(StorageSpec(topic="orders")))


class TestCachedLevelDBStorage(StorageConformance):
    durable = True

    def make_storage(self, path: Path) -> CachedStorage:
        return CachedStorage(LevelDBStorage(StorageSpec(topic="orders", path=str(path))))


class TestTinyCachedLevelDBStorage(StorageConformance):
    """A bound of a few entries: the generations turn over on almost every write."""

    durable = True
    many = 2_000

    def make_storage(self, path: Path) -> CachedStorage:
        return CachedStorage(LevelDBStorage(StorageSpec(topic="orders", path=str(path))), max_bytes=600)


def _uncached(storage: CachedStorage, key: bytes) -> bytes | None:
    return storage.inner.get(key)


def _assert_exact(topic: SowTopic, keys: list[str]) -> None:
    """Every key reads the same through the cache as from the engine itself."""
    storage = topic.storage
    assert isinstance(storage, CachedStorage)
    for key in keys:
        assert storage.get(key.encode()) == _uncached(storage, key.encode()), key


class FailNextWrite:
    """Makes the engine's next write raise StorageError (a full disk)."""

    def __init__(self, inner: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        for name in ("write", "write_known", "write_puts"):
            monkeypatch.setattr(inner, name, self._failing(getattr(inner, name)))

    def _failing(self, real: Any) -> Any:
        def write(*args: Any, **kwargs: Any) -> None:
            if self.armed:
                self.armed = False
                raise StorageError("leveldb storage at 'x' failed while writing: IO error: No space left on device")
            real(*args, **kwargs)

        return write


@pytest.mark.parametrize("engine", ["memory", "leveldb"])
def test_no_path_leaves_a_stale_record(engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner: Storage = (MemoryStorage(StorageSpec(topic="t")) if engine == "memory"
                      else LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t.sow"))))
    topic = SowTopic(name="t", message_type=get_message_type("json"), storage=CachedStorage(inner, max_bytes=2000),
                     key_generator=None, default_expiration=0.0)
    keys = [f"k{i}" for i in range(12)]

    def rec(key: str, v: int, expire_at: int = 0) -> SowRecord:
        return SowRecord(key, json.dumps({"v": v}).encode(), 1_000 + v, v, expire_at, "", "")

    for i, key in enumerate(keys):  # every read first (cached, absent), then written
        assert topic.get(key) is None
        topic.upsert(rec(key, i, expire_at=5_000 if i % 3 == 0 else 0), None)
    _assert_exact(topic, keys)
    # A batch updating one key twice and inserting another: the last version is read back.
    topic.upsert_many([rec("k1", 100), rec("k1", 101), rec("new", 102)], inserts=1)
    assert topic.get("k1").data == b'{"v": 101}' and topic.get("new") is not None
    _assert_exact(topic, [*keys, "new"])
    # Deletes by key and by filter.
    assert [r.key for r in topic.delete_keys(["k2", "missing"])] == ["k2"]
    assert topic.get("k2") is None
    examined, removed = topic.delete_matching(lambda msg: msg.get("/v") in (4, 5))
    assert sorted(r.key for r in removed) == ["k4", "k5"] and topic.get("k4") is None
    _assert_exact(topic, [*keys, "new"])
    # Expiration (k0, k3, k6, k9 expire at 5_000; k9 was cached by the reads above).
    assert sorted(r.key for r in topic.pop_expired(6_000)) == ["k0", "k3", "k6", "k9"]
    assert all(topic.get(k) is None for k in ("k0", "k3", "k6", "k9"))
    _assert_exact(topic, [*keys, "new"])
    # A failed write changes nothing, and the cache does not pretend it did.
    failing = FailNextWrite(inner, monkeypatch)
    failing.armed = True
    with pytest.raises(StorageError):
        topic.upsert_many([rec("k7", 700), rec("fresh", 701)], inserts=1)
    assert topic.get("k7").data == b'{"v": 7}' and topic.get("fresh") is None
    failing.armed = True
    with pytest.raises(StorageError):
        topic.delete_keys(["k8"])
    assert topic.get("k8") is not None
    _assert_exact(topic, [*keys, "new", "fresh"])
    # What start-up recovery does (puts and deletes in one write), and a compaction.
    topic.storage.write(puts=[(b"k10", rec("k10", 1000).encode())], deletes=[b"k11", b"new"])
    topic.storage.compact()
    assert topic.get("k10").data == b'{"v": 1000}' and topic.get("k11") is None and topic.get("new") is None
    _assert_exact(topic, [*keys, "new", "fresh"])
    assert topic.count() == inner.count() == len(list(inner.scan()))
    stats = topic.storage.statistics()
    assert stats["cache_hits"] > 0 and stats["cache_misses"] > 0
    topic.storage.close()


_OPS = st.lists(st.tuples(st.sampled_from(["put", "delete", "get", "batch", "fail"]),
                          st.integers(0, 15), st.binary(max_size=40)), max_size=80)


def _assert_complete_is_true(cached: CachedStorage, inner: Storage) -> None:
    """While the cache says it holds every record, it does: the keys it holds with a value are the engine's."""
    if cached.complete:
        held = {k for k, v in cached._lru.items() if v is not None}
        assert held == {k for k, _v in inner.scan()}


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, bound=st.sampled_from([0, 200, 1_000, 1 << 20]), prefill=st.integers(0, 3), warm=st.booleans())
def test_the_cache_always_reads_as_the_engine(ops: list[tuple[str, int, bytes]], bound: int, prefill: int,
                                              warm: bool) -> None:
    inner = MemoryStorage(StorageSpec(topic="t"))
    inner.write(puts=[(b"k%d" % k, b"before") for k in range(prefill)])  # records the cache never saw...
    cached = CachedStorage(inner, max_bytes=bound)
    assert cached.complete == (bound > 0 and not prefill)
    if warm:  # ...unless it loads them as a topic opened at start-up does (when they all fit)
        entry = 2 + 6 + ENTRY_OVERHEAD
        assert cached.warm() == (0 if not bound else min(prefill, bound // entry))
        assert cached.complete == (0 < prefill * entry <= bound or (bound > 0 and not prefill))
        assert cached.held_bytes <= bound
    fail = [False]
    real = inner.write

    def write(puts: Any = (), deletes: Any = ()) -> None:
        if fail[0]:
            fail[0] = False
            raise StorageError("injected")
        real(puts, deletes)

    inner.write = write  # type: ignore[method-assign]
    for op, k, value in ops:
        key = b"k%d" % k
        if op == "put":
            cached.write(puts=[(key, value)])
        elif op == "delete":
            cached.write(deletes=[key])
        elif op == "batch":
            cached.write(puts=[(key, value), (b"k%d" % ((k + 1) % 16), value + b"!"), (key, value + b"?")],
                         deletes=[b"k%d" % ((k + 2) % 16)])
        elif op == "fail":
            fail[0] = True
            with pytest.raises(StorageError):
                cached.write(puts=[(key, b"never")], deletes=[b"k%d" % ((k + 3) % 16)])
        assert cached.get(key) == inner.get(key)
        _assert_complete_is_true(cached, inner)
    for k in range(16):
        assert cached.get(b"k%d" % k) == inner.get(b"k%d" % k)
    assert cached.count() == inner.count()


def test_leveldb_count_stays_exact_without_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache tells LevelDB which keys exist (it just read them): the record count is kept without a point
    read per key of a write batch."""
    inner = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t.sow")))
    cached = CachedStorage(inner)
    for i in range(100):
        assert cached.get(b"k%d" % i) is None
    db_reads = [0]
    real_db = inner._db

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_db, name)

        def get(self, key: bytes) -> Any:
            db_reads[0] += 1
            return real_db.get(key)

    monkeypatch.setattr(inner, "_wdb", Counting())
    cached.write(puts=[(b"k%d" % i, b"v") for i in range(100)] + [(b"k1", b"again")])
    cached.write(puts=[(b"k%d" % i, b"w") for i in range(50)], deletes=[b"k99"])
    assert db_reads[0] == 0 and inner.count() == 99 == len(list(inner.scan()))
    inner.close()


def test_least_recently_used_first_out_within_the_bound() -> None:
    """A cycle over as many keys as fit is served from the cache from its second pass on (W1's 1M publishes over
    100k keys, in order), and the bytes kept never pass the bound."""
    entry = 10 + 100 + ENTRY_OVERHEAD  # b"key-%06d" and a 100-byte value
    cached = CachedStorage(MemoryStorage(StorageSpec(topic="t")), max_bytes=entry * 50)
    keys = [b"key-%06d" % i for i in range(50)]
    for _round in range(3):
        for key in keys:
            cached.get(key)
            cached.write(puts=[(key, b"v" * 100)])
            assert cached._bytes <= cached.max_bytes
    assert (cached.hits, cached.misses) == (100, 50)
    cached.get(b"key-000000")  # now the most recently used
    cached.write(puts=[(b"other-0001", b"v" * 100)])  # evicts the least recently used: key-000001
    assert cached.cached(b"key-000000") is not MISS and cached.cached(b"key-000001") is MISS


class CountingReads:
    """Counts the point reads that reach a storage engine."""

    def __init__(self, inner: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real = inner.get

        def get(key: bytes) -> bytes | None:
            self.reads += 1
            return real(key)

        monkeypatch.setattr(inner, "get", get)


def test_a_miss_is_trusted_only_while_the_cache_holds_every_record(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An insert into a topic that started empty reads nothing from LevelDB; after a restart (records the cache
    never saw), an eviction, a failed write or a clear, a miss reads the engine again and finds what it holds."""
    path = str(tmp_path / "t.sow")
    inner = LevelDBStorage(StorageSpec(topic="t", path=path))
    entry = 4 + 100 + ENTRY_OVERHEAD
    cached = CachedStorage(inner, max_bytes=entry * 20)
    counting = CountingReads(inner, monkeypatch)
    assert cached.complete
    for i in range(10):
        key = b"k%03d" % i
        assert cached.get(key) is None
        cached.write(puts=[(key, b"v" * 100)])
    cached.write(deletes=[b"k000"])
    assert cached.get(b"k000") is None and cached.get(b"nope") is None and cached.get(b"k001") == b"v" * 100
    assert counting.reads == 0 and cached.absent_known == 11 and inner.count() == 9
    # Past the bound: the evicted records are still LevelDB's, and a miss reads them there.
    for i in range(10, 30):
        cached.write(puts=[(b"k%03d" % i, b"w" * 100)])
    assert not cached.complete
    assert cached.get(b"k001") == b"v" * 100 and cached.get(b"k000") is None and counting.reads == 2
    assert inner.count() == 29 == len(list(inner.scan()))
    cached.close()
    # A restart: the engine holds records this cache never saw.
    inner = LevelDBStorage(StorageSpec(topic="t", path=path))
    cached = CachedStorage(inner)
    counting = CountingReads(inner, monkeypatch)
    assert not cached.complete
    assert cached.get(b"k002") == b"v" * 100 and cached.get(b"k029") == b"w" * 100 and counting.reads == 2
    cached.close()
    # A failed write, and a clear, end it too (the keys the write touched are forgotten).
    for end in ("failed write", "clear"):
        inner = MemoryStorage(StorageSpec(topic="t"))
        cached = CachedStorage(inner)
        cached.write(puts=[(b"a", b"1")])
        assert cached.complete
        if end == "clear":
            cached.clear()
        else:
            failing = FailNextWrite(inner, monkeypatch)
            failing.armed = True
            with pytest.raises(StorageError):
                cached.write(puts=[(b"b", b"2")], deletes=[b"a"])
        counting = CountingReads(inner, monkeypatch)
        assert not cached.complete and cached.get(b"a") == b"1" and cached.get(b"b") is None
        assert counting.reads == 2, end


def test_a_restarted_topic_warms_its_cache_from_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reopened with records, a cache that can hold them all loads them and holds the whole topic again (an insert
    reads nothing from LevelDB); one that cannot loads what fits, in key order, and a miss reads the engine."""
    path = str(tmp_path / "t.sow")
    inner = LevelDBStorage(StorageSpec(topic="t", path=path))
    inner.write(puts=[(b"k%03d" % i, b"v%03d" % i * 25) for i in range(30)])
    inner.close()
    entry = 4 + 100 + ENTRY_OVERHEAD

    cached = CachedStorage(LevelDBStorage(StorageSpec(topic="t", path=path)), max_bytes=entry * 30)
    counting = CountingReads(cached.inner, monkeypatch)
    assert not cached.complete and cached.warm() == 30 and cached.complete and cached.held_bytes == entry * 30
    assert cached.warm() == 0  # only an empty cache is filled
    assert cached.get(b"k007") == b"v007" * 25 and cached.get(b"new") is None and counting.reads == 0
    cached.write(puts=[(b"new", b"x")])
    assert cached.get(b"new") == b"x" and cached.inner.count() == 31 and counting.reads == 0
    cached.close()

    cached = CachedStorage(LevelDBStorage(StorageSpec(topic="t", path=path)), max_bytes=entry * 10 + 50)
    counting = CountingReads(cached.inner, monkeypatch)
    assert cached.warm() == 10 and not cached.complete and cached.held_bytes == entry * 10
    assert cached.get(b"k009") == b"v009" * 25 and counting.reads == 0  # loaded: the first ten keys
    assert cached.get(b"k029") == b"v029" * 25 and cached.get(b"none") is None and counting.reads == 2
    cached.close()

    cached = CachedStorage(LevelDBStorage(StorageSpec(topic="t", path=path)), max_bytes=0)
    assert cached.warm() == 0 and not cached.complete and cached.held_bytes == 0
    cached.close()


def test_a_complete_cache_stays_exact_through_every_sow_path(tmp_path: Path) -> None:
    """The SOW paths on a topic whose cache holds every record (the engine started empty): upserts, a batch,
    deletes by key and by filter, expiration, a start-up repair's write; every key reads as LevelDB holds it."""
    inner = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t.sow")))
    topic = SowTopic(name="t", message_type=get_message_type("json"), storage=CachedStorage(inner),
                     key_generator=None, default_expiration=0.0)
    keys = [f"k{i}" for i in range(12)] + ["new", "fresh"]

    def rec(key: str, v: int, expire_at: int = 0) -> SowRecord:
        return SowRecord(key, json.dumps({"v": v}).encode(), 1_000 + v, v, expire_at, "", "")

    for i, key in enumerate(keys[:12]):
        assert topic.get(key) is None
        topic.upsert(rec(key, i, expire_at=5_000 if i % 3 == 0 else 0), None)
    topic.upsert_many([rec("k1", 100), rec("new", 101), rec("new", 102)], inserts=1)
    assert [r.key for r in topic.delete_keys(["k2", "missing"])] == ["k2"]
    topic.delete_matching(lambda msg: msg.get("/v") in (4, 5))
    assert sorted(r.key for r in topic.pop_expired(6_000)) == ["k0", "k3", "k6", "k9"]
    topic.storage.write(puts=[(b"fresh", rec("fresh", 7).encode())], deletes=[b"k11", b"k7"])
    storage = topic.storage
    assert isinstance(storage, CachedStorage) and storage.complete
    for key in keys:
        assert storage.get(key.encode()) == inner.get(key.encode()), key
    assert sorted(k for k in keys if topic.get(k) is not None) == ["fresh", "k1", "k10", "k8", "new"]
    assert topic.count() == inner.count() == len(list(inner.scan())) == 5
    storage.close()


_PUBLISHES = st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 11), st.binary(max_size=12)), min_size=1, max_size=6),
                                st.booleans()), max_size=25)


@pytest.mark.parametrize("engine", ["memory", "leveldb"])
@settings(max_examples=40, deadline=None)
@given(batches=_PUBLISHES, bound=st.sampled_from([0, 300, 1 << 20]), prefill=st.integers(0, 3))
def test_batches_of_publishes_keep_the_records_and_the_count_exact(
        engine: str, batches: list[tuple[list[tuple[int, bytes]], bool]], bound: int, prefill: int,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the publish path does per run (:meth:`CachedStorage.write_puts`): read every key, count the ones
    without a record, write the batch with that count. Against a dict model, with writes that fail (nothing
    stored, the count unchanged) and caches that evict: every key reads as the model, and the engine's record
    count is the model's without a read per key."""
    inner: Storage = (MemoryStorage(StorageSpec(topic="t")) if engine == "memory" else
                      LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path_factory.mktemp("sow") / "t.sow"))))
    model = {b"k%d" % k: b"before" for k in range(prefill)}
    inner.write(puts=list(model.items()))
    cached = CachedStorage(inner, max_bytes=bound)
    real = inner.write_puts
    fail = [False]

    def write_puts(puts: Any, new_keys: int) -> None:
        if fail[0]:
            fail[0] = False
            raise StorageError("injected")
        real(puts, new_keys)

    inner.write_puts = write_puts  # type: ignore[method-assign]
    try:
        for pairs, fails in batches:
            puts = [(b"k%d" % k, value) for k, value in pairs]
            new_keys = sum(cached.get(key) is None for key in dict(puts))  # the engine's previous-record reads
            fail[0] = fails
            if fails:
                with pytest.raises(StorageError):
                    cached.write_puts(puts, new_keys)
            else:
                cached.write_puts(puts, new_keys)
                model.update(puts)
            for k in range(12):
                assert cached.get(b"k%d" % k) == model.get(b"k%d" % k)
            _assert_complete_is_true(cached, inner)
            assert cached.count() == len(model) == len(list(inner.scan()))
    finally:
        inner.close()


def test_a_batch_of_publishes_that_is_not_bytes_writes_nothing(tmp_path: Path) -> None:
    inner = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t.sow")))
    with pytest.raises(TypeError, match="must be bytes"):
        inner.write_puts([(b"a", b"1"), ("b", b"2")], 2)  # type: ignore[list-item]
    assert list(inner.scan()) == [] and inner.count() == 0
    inner.write_puts([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], 2)
    inner.write_puts([(b"c", b"4")], 1)
    assert list(inner.scan()) == [(b"a", b"3"), (b"b", b"2"), (b"c", b"4")] and inner.count() == 3
    inner.close()


def test_deletes_given_as_a_tuple_write_through() -> None:
    """``write()`` takes any iterable of deletes: a tuple beside puts, once the cache no longer holds every
    record, deletes the key and writes the put (it used to add a list and a tuple: TypeError)."""
    cached = CachedStorage(MemoryStorage(StorageSpec(topic="t")))
    cached.write(puts=[(b"a", b"1"), (b"b", b"2")])
    cached.complete = False
    cached.write(puts=[(b"c", b"3")], deletes=(b"a",))
    assert (cached.get(b"a"), cached.get(b"b"), cached.get(b"c")) == (None, b"2", b"3")
