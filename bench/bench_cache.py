"""The hit rate of the SOW's cache of hot records (:mod:`broker.sow.cache`) on W1- and W3-like traffic.

``python -m bench.bench_cache`` builds a broker in process (a LevelDB SOW topic keyed on ``/id`` with a
transaction log, in a temporary directory) and drives the engine's batched publish path directly, in batches
of 250 as a socket read delivers them, with the bench's ~200-byte documents:

* W1: ``--w1`` publishes over ``--w1-keys`` keys in order (100k over 100k: every publish an insert; the
  issue's 1M over 100k: each key ten times);
* W3: ``--records`` records loaded, then ``--updates`` updates of keys drawn uniformly at random (W3 updates
  random records of a loaded topic).

For each it prints the previous-record reads the cache answered and those that went to LevelDB. With the
default 64 MB bound a record costs about 340 bytes of cache, so about 190k records stay cached: a topic up to
that size is read from memory once warm; beyond it the hit rate of uniform updates is about the cached share.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.messages import doc
from broker.testing.clients import RecordingClient

CONFIG = """<AMPSConfig><Name>bench-cache</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW><Topic><Name>t</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic></SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory>
  <Topic><Name>t</Name><MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>"""

#: Publishes per engine step (what one 64 KiB socket read holds of ~250-byte frames).
BATCH = 250


def _publish(broker: Any, client: RecordingClient, ids: list[int]) -> float:
    engine = broker.engine
    t0 = time.perf_counter()
    for start in range(0, len(ids), BATCH):
        batch = [("t", doc(i).encode(), False, None, None, None, None) for i in ids[start:start + BATCH]]
        engine.publish_batch(client, batch)
        if start % (BATCH * 40) == 0:
            broker.durability.journal.sync()
    broker.durability.journal.sync()
    return time.perf_counter() - t0


def _case(label: str, loads: list[int], measured: list[int]) -> dict[str, Any]:
    import trio

    from broker.config import load_config
    from broker.server.kernel import build_broker

    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    try:
        (work / "config.xml").write_text(CONFIG)
        import os

        cwd = os.getcwd()
        os.chdir(work)
        try:
            broker = build_broker(load_config(work / "config.xml"))
            client = RecordingClient(broker.services.message_type("json"), "bench-cache")  # no subscriber: sent nothing
            storage = broker.engine.sow_topics["t"].storage
            if loads:
                _publish(broker, client, loads)
            hits0, misses0 = storage.hits, storage.misses
            seconds = _publish(broker, client, measured)
            hits, misses = storage.hits - hits0, storage.misses - misses0
            trio.run(broker.aclose)
        finally:
            os.chdir(cwd)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = hits / max(hits + misses, 1)
    print(f"{label}: {hits:,} reads from the cache, {misses:,} from LevelDB: hit rate {rate:.1%} "
          f"({len(measured) / seconds:,.0f} publishes/s in process)")
    return {"case": label, "hits": hits, "misses": misses, "hit_rate": rate}


def main(argv: list[str] | None = None) -> int:
    """Run both cases and print their hit rates."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_cache", description=__doc__.split("\n")[0])
    parser.add_argument("--w1", type=int, default=100_000, help="W1 publishes")
    parser.add_argument("--w1-keys", type=int, default=100_000, help="W1 distinct keys")
    parser.add_argument("--records", type=int, default=100_000, help="W3 records loaded first")
    parser.add_argument("--updates", type=int, default=50_000, help="W3 updates of random records")
    a = parser.parse_args(argv)
    rnd = random.Random(17)
    _case(f"W1 {a.w1:,} publishes over {a.w1_keys:,} keys", [], [i % a.w1_keys for i in range(a.w1)])
    _case(f"W3 {a.updates:,} updates of {a.records:,} records", list(range(a.records)),
          [rnd.randrange(a.records) for _ in range(a.updates)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
