"""Isolation figures: a normal client's publish-to-delivery latency alone and next to a misbehaving client.

Used by the issue 14 benchmarks (``bench_message_depth.py --isolation``; ``bench_filter.py --isolation``
measures the same shape and could share it): each passes an ``attack`` that the misbehaving client runs
before every ``every``-th normal publish, and gets the two latency distributions and their ratio printed.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

#: ``attack(client, topic)``: what the misbehaving (logged-on) client does before every ``every``-th publish.
Attack = Callable[[Any, str], None]


def latencies(uri: str, count: int, attack: Attack | None, every: int = 20, topic: str = "lat") -> list[float]:
    """Sorted publish-to-delivery latencies (seconds) of ``count`` messages to a subscriber filtering ``/t > 0``.

    Args:
        uri: The broker's AMPS URI.
        count: Normal messages, one every 0.5 ms.
        attack: Run by a third client before every ``every``-th message; ``None``: alone.
        every: How often the attack runs.
        topic: The topic the normal messages go to (and the attack is told about).
    """
    import AMPS

    clients = [AMPS.Client(f"bench-isolation-{who}-{time.monotonic_ns()}") for who in ("sub", "pub", "bad")]
    for client in clients:
        client.connect(uri)
        client.logon(5000)
    sub, pub, bad = clients
    got: list[float] = []
    done = threading.Event()

    def on_message(message: Any) -> None:
        got.append(time.perf_counter() - orjson.loads(message.get_data())["t"])
        if len(got) >= count:
            done.set()

    sub.subscribe(on_message, topic, filter="/t > 0", timeout=5000)
    for i in range(count):
        if attack is not None and i % every == 0:
            attack(bad, topic)
        pub.publish(topic, orjson.dumps({"t": time.perf_counter(), "i": i}).decode())
        time.sleep(0.0005)
    done.wait(600)
    for client in clients:
        client.close()
    return sorted(got)


def _quantile(lat: list[float], q: float) -> float:
    return lat[min(len(lat) - 1, int(q * len(lat)))]


def _figures(lat: list[float]) -> str:
    if not lat:
        return "nothing delivered"
    return (f"{len(lat)} delivered, p50 {_quantile(lat, 0.5) * 1e3:.2f} ms, "
            f"p99 {_quantile(lat, 0.99) * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms")


def report(title: str, count: int, attack: Attack, every: int = 20) -> None:
    """Start a broker, measure :func:`latencies` alone and attacked, and print both and their ratio."""
    from broker.testing.process import BrokerProcess

    with tempfile.TemporaryDirectory() as tmp:
        proc = BrokerProcess.from_xml(Path(tmp)).start()
        try:
            alone = latencies(proc.uri, count, None, every)
            attacked = latencies(proc.uri, count, attack, every)
        finally:
            proc.stop()
    print(f"isolation: {count} messages, one every 0.5 ms; {title} before every {every}th when attacked")
    print(f"  alone:    {_figures(alone)}")
    print(f"  attacked: {_figures(attacked)}")
    if alone and attacked:
        print(f"  ratio attacked/alone: p50 {_quantile(attacked, 0.5) / _quantile(alone, 0.5):.2f}x, "
              f"p99 {_quantile(attacked, 0.99) / _quantile(alone, 0.99):.2f}x")
