"""A second broker on the same data directory is refused with a clear message (issue 13, acceptance 4).

Two brokers writing one journal (or one LevelDB SOW) would interleave sequences and records. The second one
must exit non-zero before serving, saying that another broker is using the journal directory or the SOW
(naming it), and the first must keep serving as if nothing happened.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from crash_harness import (
    SOW_XML,
    TOPIC,
    Publisher,
    connect,
    make_broker,
    query_sow,
    read_journal,
    replay_state,
    txlog_xml,
    wait_until,
)

from broker.testing.process import config_xml, free_port


def _serve(config: Path, cwd: Path, timeout: float = 30.0) -> tuple[int, str]:
    """Run ``broker serve config`` expecting it to stop by itself; its exit code and output."""
    proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(config)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the second broker was not refused: still running after {timeout}s\n{out[-3000:]}")
    return proc.returncode, out


@pytest.mark.timeout(90)
@pytest.mark.parametrize("share", ["same-config", "same-journal"])
def test_second_broker_on_the_same_data_is_refused(share: str, tmp_path: Path) -> None:
    first = make_broker(tmp_path).start()
    try:
        pub = Publisher(first.uri, "before", limit=100, batch=100, pause=0).start()
        wait_until(lambda: len(pub.acked) == 100, "persisted acks before the second broker")
        pub.stop()

        if share == "same-config":  # exactly the same file: same port, journal and SOW
            config, names = first.config_path, r"(sow/orders\.sow|journal)"
        else:  # its own port and SOW file, the same JournalDirectory
            config = tmp_path / "second.xml"
            config.write_text(config_xml(port=free_port(), sow=SOW_XML.replace("./sow/", "./sow2/"),
                                         transaction_log=txlog_xml()))
            names = r"journal"
        code, out = _serve(config, tmp_path)
        assert code != 0, f"the second broker exited 0:\n{out[-3000:]}"
        assert re.search(rf"another broker.*{names}", out, re.IGNORECASE), (
            f"the refusal does not say that another broker uses {names}:\n{out[-3000:]}")
        assert "listening" not in out and "ready" not in out, f"the second broker served before refusing:\n{out}"

        # The first one keeps serving: persisted acks, a SOW query equal to its journal's replay.
        pub = Publisher(first.uri, "after", limit=100, batch=100, pause=0).start()
        wait_until(lambda: len(pub.acked) == 100, "persisted acks after the second broker was refused")
        pub.stop()
        assert first.proc is not None and first.proc.poll() is None
        client = connect(first.uri, "check")
        try:
            sow = query_sow(client)
        finally:
            client.close()
        records, problems = read_journal(tmp_path)
        assert not problems
        assert sow == replay_state(records)
        assert sum(1 for r in records if r.topic == TOPIC) == 200
    finally:
        first.stop()
