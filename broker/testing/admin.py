"""Reading a running broker's Admin server in tests: values at least as new as the moment of the call.

The Admin server serves statistics sampled once per ``<Admin><Interval>`` (``BrokerProcess`` configures
1s), and every ``/metrics`` and ``/amps`` response names its sample in ``X-Statistics-Sample``.
:func:`fresh_get` waits for a sample taken after the call began, so counters read with it include all
work finished before the call.
"""

from __future__ import annotations

import time
import urllib.request

__all__ = ["fresh_get"]


def _get(url: str, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read()


def fresh_get(
    port: int, path: str = "/metrics", *, headers: dict[str, str] | None = None, timeout: float = 30.0
) -> tuple[dict[str, str], bytes]:
    """GET ``path`` from the Admin server on 127.0.0.1:``port`` once it serves a sample newer than the call.

    Args:
        port: The Admin port.
        path: E.g. ``/metrics`` or ``/amps/instance.json``.
        headers: Request headers.
        timeout: Seconds to wait for a newer sample (a few intervals).

    Returns:
        The response headers and body.

    Raises:
        TimeoutError: No newer sample within ``timeout``.
    """
    url = f"http://127.0.0.1:{port}{path}"
    deadline = time.monotonic() + timeout
    _, first, _ = _get(url, headers or {}, timeout)
    seen = int(first.get("x-statistics-sample", 0))
    while True:
        _, got, body = _get(url, headers or {}, timeout)
        if int(got.get("x-statistics-sample", 0)) > seen:
            return got, body
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Admin server on port {port} served no new statistics sample in {timeout}s")
        time.sleep(0.05)
