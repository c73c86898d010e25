"""Fixtures for tests that run the npm ``amps`` JavaScript client under Node (and in Chromium).

The client is installed with npm, at the pinned version, into ``tests/node/.npm-cache`` (ignored by git;
reused by later runs) the first time a test needs it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.testing.process import BrokerProcess

HERE = Path(__file__).parent

SOW = "".join(
    f"<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>"
    for name in ("orders", "oof", "deltas", "deletes", "prices")
)
TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""


@pytest.fixture(scope="module")
def ws_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with an amps TCP transport, a websocket transport, an Admin server, SOW topics
    (orders, oof, deltas, deletes, prices) and a journaled topic (events)."""
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("ws-broker"), admin=True, websocket=True,
                                  sow=SOW, transaction_log=TXLOG).start()
    yield proc
    proc.stop()


def run_node(amps_js: Path, script: str, *args: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run ``tests/node/<script>`` with Node and return the JSON it printed (its last line)."""
    done = subprocess.run(["node", str(HERE / script), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "AMPS_JS": str(amps_js)}, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"node printed nothing (exit {done.returncode}): {done.stderr}"
    return json.loads(lines[-1])
