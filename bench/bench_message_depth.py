"""Message depth (issue 14): what the <MaxMessageDepth> check costs a publish, and what a deep body costs others.

Run from the repository root: ``python -m bench.bench_message_depth [--seconds 0.5] [--isolation --count 2000]``.

* ``check``: for a small order (200 bytes), a wide array (about 100 KB, thousands of brackets but depth 3),
  a 1,000-deep body (refused) and their XML counterparts, the depth check's cost as a ratio to decoding
  the same body (``orjson.loads`` / lxml's parse). A body with no more brackets (tags) than the limit
  costs one count; only the others are scanned.
* ``--isolation`` starts a real broker and measures a normal client's publish-to-delivery latency (p50,
  p99, max, official AMPS client, subscriber filter ``/t > 0``) alone and then while another client
  publishes a 1,000-deep JSON body (``{"a":[[[...{"b":1}...]]]}``) before every 20th message, and the
  ratio of the two.

There are no timing assertions in the test suite; this script only reports.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import orjson

from bench.isolation import report
from broker.messagetypes import DEFAULT_MAX_DEPTH, MessageTooDeepError, get_message_type
from broker.messagetypes._xml import parse_root

JSON = get_message_type("json")
XML = get_message_type("xml")

SMALL = orjson.dumps({"id": 1, "region": "EU", "qty": 250, "price": 101.25, "symbol": "MSFT", "side": "buy",
                      "trader": "alice.smith", "account": "ACCT-0042", "note": "about two hundred bytes"})
WIDE = orjson.dumps({"lines": [{"sku": f"S{i}", "qty": i, "tags": ["a", "b"]} for i in range(2500)]})
DEEP = b'{"a":' + b"[" * 1000 + b'{"b":1}' + b"]" * 1000 + b"}"
XSMALL = b"<o><id>1</id><region>EU</region><qty>250</qty><symbol>MSFT</symbol></o>"
XWIDE = b"<o>" + b"<l><sku>S</sku><qty>1</qty></l>" * 2500 + b"</o>"
XDEEP = b"<a>" * 250 + b"</a>" * 250


def per_call(fn: Callable[[], object], seconds: float) -> float:
    """Seconds per call of ``fn`` (a refused body's exception counts as a call)."""
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            with contextlib.suppress(MessageTooDeepError):
                fn()
        count += 20
    return (time.perf_counter() - start) / count


def check(seconds: float) -> None:
    """Print the depth check's cost as a ratio to decoding the body."""
    limit = DEFAULT_MAX_DEPTH
    print(f"depth check (limit {limit}) vs decoding the body:")
    rows = [("json small", SMALL, lambda b: JSON.lazy(b, max_depth=limit), orjson.loads),
            ("json wide", WIDE, lambda b: JSON.lazy(b, max_depth=limit), orjson.loads),
            ("json 1,000 deep", DEEP, lambda b: JSON.lazy(b, max_depth=limit), orjson.loads),
            ("xml small", XSMALL, lambda b: XML.lazy(b, max_depth=limit), parse_root),
            ("xml wide", XWIDE, lambda b: XML.lazy(b, max_depth=limit), parse_root),
            ("xml 250 deep", XDEEP, lambda b: XML.lazy(b, max_depth=limit), parse_root)]
    for name, body, checked, decode in rows:
        mine = per_call(lambda: checked(body), seconds)  # noqa: B023 - called within the iteration
        ref = per_call(lambda: decode(body), seconds)  # noqa: B023
        print(f"  {name:16} {len(body):>8} B  check {mine * 1e6:9.1f} us  decode {ref * 1e6:9.1f} us  "
              f"ratio {mine / ref:5.2f}x")


def _publish_deep(client: object, topic: str) -> None:
    client.publish(topic, DEEP.decode())  # type: ignore[attr-defined]


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="measuring time per figure")
    parser.add_argument("--isolation", action="store_true", help="also measure latency on a real broker")
    parser.add_argument("--count", type=int, default=2000, help="messages per isolation run")
    args = parser.parse_args()
    check(args.seconds)
    if args.isolation:
        report("a 1,000-deep JSON body", args.count, _publish_deep)


if __name__ == "__main__":
    main()
