"""Drivers for the peers: redis-benchmark runs, redis-py (with hiredis) connections, and nats-py
connections with a window of requests.

redis-py and nats-py are imported lazily: the harness may install them during the run.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from bench.figures import Figure, Latency

T = TypeVar("T")


# -- Redis ------------------------------------------------------------------------------------------
def redis_benchmark(exe: str, port: int, requests: int, command: list[str], *, clients: int = 8,
                    pipeline: int = 16, random_keys: int | None = None, timeout: float = 300.0) -> dict[str, Any]:
    """Run ``redis-benchmark`` with a custom command and return its CSV figures.

    Returns:
        ``rps``, ``p50_ms``, ``p99_ms`` (per request; with pipelining a request's latency is its batch's),
        ``requests_sent`` and the command line. redis-benchmark sends whole pipelines: each batch reserves
        ``pipeline`` requests while fewer than ``requests`` were reserved, so the server executes ``requests``
        rounded up to a multiple of ``pipeline`` (5,008 for 5,000 at 16): that is ``requests_sent``, the count
        a check of the server's work compares with.

    Raises:
        RuntimeError: redis-benchmark failed or printed no figures.
    """
    argv = [exe, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-P", str(pipeline),
            "-n", str(requests), "--csv"]
    if random_keys:
        argv += ["-r", str(random_keys)]
    argv += command
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith('"test"')]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"redis-benchmark failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    # The test name holds the command (with quotes and commas): read the 7 numbers from the right.
    values = [float(v.strip('"')) for v in lines[-1].rsplit(",", 7)[1:]]
    rps, _avg, _min, p50, _p95, p99, _max = values
    shown = [a if len(a) < 40 else a[:20] + "..." for a in argv]
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "requests_sent": -(-requests // pipeline) * pipeline,
            "argv": " ".join(shown)}


def redis_client(port: int, timeout: float = 60.0) -> Any:
    """A redis-py connection to the local server, replies parsed by hiredis (the C parser).

    Raises:
        RuntimeError: redis-py or hiredis is not installed (``pip install 'redis[hiredis]'``): without
            hiredis, redis-py parses replies in pure Python and the figure would measure that parser.
    """
    try:
        import redis
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError as exc:
        raise RuntimeError("redis-py is not installed: pip install 'redis[hiredis]'") from exc
    if not HIREDIS_AVAILABLE:
        raise RuntimeError("hiredis is not installed: pip install 'redis[hiredis]'")
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, protocol=2)


def redis_figure(result: dict[str, Any], unit: str = "msg/s") -> Figure:
    """A figure from :func:`redis_benchmark`'s result."""
    return Figure("redis", result["rps"], unit, latency=Latency(result["p50_ms"], result["p99_ms"], None, 0),
                  detail=result)


# -- NATS -------------------------------------------------------------------------------------------
def run_async(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coro`` in a fresh event loop, bounded by ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def nats_connect(port: int) -> Any:
    """A nats-py connection to the local server (no reconnects: a failure should show, not hide)."""
    import nats

    return await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0,
                              pending_size=64 * 1024 * 1024)


async def windowed(op: Callable[[Any], Awaitable[object]], items: Iterable[Any],
                   window: int) -> tuple[float, list[int]]:
    """Call ``op(item)`` for every item with up to ``window`` calls in flight.

    Returns:
        The elapsed seconds and each call's latency in nanoseconds.
    """
    it = iter(items)
    latencies: list[int] = []

    async def worker() -> None:
        for item in it:  # the coroutines share one iterator: each item is taken once
            t = time.perf_counter_ns()
            await op(item)
            latencies.append(time.perf_counter_ns() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    return time.perf_counter() - t0, latencies
