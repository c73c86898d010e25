"""``broker spark sow-at|export|stats`` against a real broker's journal (issue 15, acceptance 1).

A broker with a logged, expiring SOW topic is driven by the official AMPS client through three phases
(publishes, updates, delta publishes, sow_delete by filter, messages that expire); after each phase the test
takes the time and the SOW as a ``sow`` query shows it. With the broker stopped, ``broker spark sow-at`` at
each of those times must give the same records, key for key and byte for byte.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import AMPS
import pytest

from broker.cli import main as broker_main
from broker.testing.process import BrokerProcess
from broker.txlog.cli import iter_records

SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName><Expiration>enabled</Expiration></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory><JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <FlushInterval>10ms</FlushInterval><Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
#: The JVM option of the tests' session (tests/spark/conftest.py): the first JIT tier only.
C1_ONLY = "-XX:TieredStopAtLevel=1"


def _sow(client) -> dict[str, str]:  # noqa: ANN001 - AMPS.Client
    return {m.get_sow_key(): m.get_data() for m in client.sow("orders", timeout=10_000) if m.get_command() == "sow"}


def _ids(client) -> set[int]:  # noqa: ANN001
    return {json.loads(d)["id"] for d in _sow(client).values()}


def _until_gone(client, ids: set[int], timeout: float = 20.0) -> None:  # noqa: ANN001
    """Query until none of ``ids`` is in the SOW (they expire asynchronously)."""
    deadline = time.monotonic() + timeout
    while _ids(client) & ids:
        assert time.monotonic() < deadline, f"{_ids(client) & ids} never expired"
        time.sleep(0.1)


def _stamp(ns: int) -> str:
    seconds, frac = divmod(ns, 1_000_000_000)
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y%m%dT%H%M%S") + f".{frac:09d}Z"


def _take(client) -> tuple[str, dict[str, str]]:  # noqa: ANN001
    """The time now and the SOW as a query shows it (nothing is published in between)."""
    at = time.time_ns()
    return _stamp(at), _sow(client)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, dict[str, str]]]]:
    """Run the broker through the three phases; returns its config and ``(time, SOW)`` after each."""
    base = tmp_path_factory.mktemp("broker")
    broker = BrokerProcess.from_xml(base, sow=SOW, transaction_log=TXLOG).start()
    taken = []
    try:
        c = AMPS.Client(f"spark-sow-at-{time.monotonic_ns()}")
        c.connect(broker.uri)
        c.logon(5000)
        for i in range(30):
            c.publish("orders", json.dumps({"id": i, "qty": 10 * i, "sym": f"S{i % 4}", "note": "first"}),
                      **({"expiration": 1} if i >= 25 else {}))
            c.publish("events", json.dumps({"n": i}))
        c.publish_flush(10_000)
        _until_gone(c, set(range(25, 30)))
        taken.append(_take(c))
        for i in range(10):
            c.publish("orders", json.dumps({"id": i, "qty": 1000 + i, "sym": f"S{i % 4}", "note": "updated"}))
        for i in range(10, 15):
            c.delta_publish("orders", json.dumps({"id": i, "note": "delta"}))
        c.sow_delete("orders", "/id >= 20 AND /id < 23", 10_000)
        for i in range(30, 35):
            c.publish("orders", json.dumps({"id": i, "qty": i, "sym": "S9", "note": "expires later"}), expiration=600)
        c.publish_flush(10_000)
        taken.append(_take(c))
        c.publish("orders", json.dumps({"id": 25, "qty": 25, "sym": "S1", "note": "back"}))
        c.sow_delete("orders", "/id = 0", 10_000)
        c.publish("orders", json.dumps({"id": 1, "qty": 1, "sym": "S1", "note": "short"}), expiration=1)
        c.publish_flush(10_000)
        _until_gone(c, {1})
        taken.append(_take(c))
        c.close()
    finally:
        assert broker.stop() == 0
    first, second, third = (set(s) for _, s in taken)
    assert len(first) == 25 and len(second) == 27 and len(third) == 26 and first != second != third
    return broker.config_path, taken


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the local-mode jobs write, kept for the cluster test to compare with."""
    return tmp_path_factory.mktemp("local")


def _sow_at(config: Path, at: str, out: Path) -> dict[str, str]:
    assert broker_main(["spark", "sow-at", str(config), "--workdir", str(config.parent), "--topic", "orders",
                        "--at", at, "--out", str(out)]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(out).to_pylist()
    return {row["sow_key"]: row for row in table}


def test_sow_at_matches_what_the_broker_sow_held_at_each_time(spark, recorded, outputs: Path) -> None:
    config, taken = recorded
    for n, (at, expected) in enumerate(taken):
        rows = _sow_at(config, at, outputs / f"sow-{n}")
        assert {k: r["data"] for k, r in rows.items()} == expected, at
        for key, row in rows.items():  # the json fields, flattened into columns
            message = json.loads(expected[key])
            assert (row["id"], row["qty"], row["sym"], row["note"]) == (
                message["id"], message.get("qty"), message.get("sym"), message["note"])


def _export_args(config: Path, taken: list) -> list[str]:
    return ["export", str(config), "--workdir", str(config.parent), "--topic", "orders", "--to", taken[1][0]]


def test_export_writes_every_record_partitioned_by_date(spark, recorded, outputs: Path) -> None:
    config, taken = recorded
    out = outputs / "export"
    assert broker_main(["spark", *_export_args(config, taken), "--out", str(out)]) == 0
    journal = config.parent / "journal"
    records = [r for _p, r in iter_records([journal], topic="orders", end=taken[1][0])]
    written = spark.read.parquet(str(out))
    assert sorted(r.seq for r in written.select("seq").collect()) == [r.sequence for r in records]
    days = {dt.datetime.fromtimestamp(r.timestamp_ns // 10**9, dt.UTC).date().isoformat() for r in records}
    assert {p.name for p in out.glob("date=*")} == {f"date={d}" for d in days}


def test_stats_table_and_plot(spark, recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _taken = recorded
    plot = tmp_path / "stats.png"
    assert broker_main(["spark", "stats", str(config), "--workdir", str(config.parent), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    records = [r for _p, r in iter_records([config.parent / "journal"])]
    orders = [r for r in records if r.topic == "orders"]
    assert f"{len([r for r in records if r.topic == 'events'])}" in out
    from broker.spark.jobs import stats

    rows = stats(spark, str(config), workdir=str(config.parent))
    by_topic = {t: [r for r in rows if r.topic == t] for t in ("orders", "events")}
    assert sum(r.messages for r in by_topic["orders"]) == len(orders)
    assert sum(r.bytes for r in by_topic["orders"]) == sum(len(r.data) for r in orders)
    assert max(r.keys for r in by_topic["orders"]) <= 35 and all(r.keys == 0 for r in by_topic["events"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000


def _zip_package(dest: Path) -> Path:
    """The broker package as a zip (what a wheel renamed .zip holds for --py-files)."""
    import zipfile

    import broker

    root = Path(broker.__file__).parent
    with zipfile.ZipFile(dest, "w") as z:
        for f in root.rglob("*.py"):
            z.write(f, Path("broker") / f.relative_to(root))
    return dest


def _wait_for_workers(ui_port: int, procs: list, timeout: float = 120.0) -> None:  # noqa: ANN001
    """Wait until the master's JSON status shows one alive worker (or a process died)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{p.args[2]} exited with {p.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
                if json.loads(resp.read()).get("aliveworkers", 0) >= 1:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("the standalone worker never registered with the master")


def _rows_of(spark, path: Path, order: str) -> list[tuple]:  # noqa: ANN001
    df = spark.read.parquet(str(path))
    return [tuple(r) for r in df.select(*sorted(df.columns)).orderBy(order).collect()]


@pytest.mark.timeout(400)
def test_spark_submit_on_a_standalone_cluster_gives_the_local_results(spark, recorded, outputs: Path,
                                                                     tmp_path: Path) -> None:
    """Acceptance 3: a master and a worker from the pip pyspark on 127.0.0.1; spark-submit runs sow-at and
    export with the package in --py-files; the results equal local mode's."""
    import os
    import subprocess
    import sys

    from pyspark.find_spark_home import _find_spark_home

    from broker.testing.process import free_port, wait_for_port

    config, taken = recorded
    home = Path(_find_spark_home())
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_LOG_DIR": str(tmp_path / "logs"),
           # The master's and the worker's JVMs run the first JIT tier only, as the driver's and the executor's
           # below and the tests' session do: the jobs are small, the optimizing tier's compiles cost more CPU
           # than they give back on the test machine's two cores.
           "SPARK_DAEMON_JAVA_OPTS": C1_ONLY}
    logs = tmp_path / "cluster.log"
    procs: list[subprocess.Popen[bytes]] = []
    with open(logs, "ab") as log:
        try:
            procs.append(subprocess.Popen(
                [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)], env=env, stdout=log, stderr=subprocess.STDOUT))
            wait_for_port(port, 60, procs[0])
            procs.append(subprocess.Popen(
                [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui), f"spark://127.0.0.1:{port}"],
                env=env, stdout=log, stderr=subprocess.STDOUT))
            _wait_for_workers(ui, procs)
            package = _zip_package(tmp_path / "broker.zip")
            import broker.spark.submit as submit

            at = taken[1][0]
            jobs = {
                "sow-1": ["sow-at", str(config), "--workdir", str(config.parent), "--topic", "orders", "--at", at],
                "export": _export_args(config, taken),
            }
            # Both jobs in one application ("+"): one driver and executor start-up.
            chained = [w for name, args in jobs.items() for w in ("+", *args, "--out", str(tmp_path / f"cluster-{name}"))]
            cmd = [str(home / "bin" / "spark-submit"), "--master", f"spark://127.0.0.1:{port}",
                   "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
                   "--conf", "spark.sql.shuffle.partitions=2", "--driver-java-options", C1_ONLY,
                   "--conf", f"spark.executor.extraJavaOptions={C1_ONLY}", "--py-files", str(package),
                   submit.__file__, *chained[1:]]
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            output = done.stdout.decode(errors="replace")
            assert done.returncode == 0, output[-4000:]
            assert "sow-at" in output and "export:" in output
            for name, args in jobs.items():  # the local runs, unless the tests above left them
                if not (outputs / name).exists():
                    assert broker_main(["spark", *args, "--out", str(outputs / name)]) == 0
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in reversed(procs):
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    cluster_sow = _rows_of(spark, tmp_path / "cluster-sow-1", "sow_key")
    assert cluster_sow == _rows_of(spark, outputs / "sow-1", "sow_key")
    assert len(cluster_sow) == len(taken[1][1])
    cluster_export = _rows_of(spark, tmp_path / "cluster-export", "seq")
    assert cluster_export == _rows_of(spark, outputs / "export", "seq")
    assert len(cluster_export) > 50


@pytest.mark.parametrize(("args", "message"), [
    (["sow-at", "/no/such/dir", "--topic", "t", "--at", "20260101T000000"], "neither a directory nor"),
    (["sow-at", "{journal}", "--topic", "t", "--at", "yesterday"], "not a timestamp"),
    (["export", "{journal}", "--topic", "a[", "--out", "{out}"], "bad topic regular expression"),
    (["export", "{journal}", "--from", "1|2", "--out", "{out}"], "not a bookmark"),
])
def test_mistakes_are_reported_plainly_before_spark_starts(recorded, tmp_path: Path, capsys, args, message) -> None:  # noqa: ANN001
    config, _taken = recorded
    argv = [a.format(journal=config.parent / "journal", out=tmp_path / "out") for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    assert broker_main(["spark", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
