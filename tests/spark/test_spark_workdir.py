"""The jobs and the data source find the journal where ``broker serve`` wrote it (issue 33, acceptance 3).

A work folder W holds ``conf/broker.xml`` whose paths are relative (``./data/journal``): ``broker serve
conf/broker.xml`` started in W writes ``W/data/journal``, as AMPS would, not ``W/conf/data/journal``. The
official client publishes; then ``broker spark stats|sow-at|export conf/broker.xml`` run from W, and from
elsewhere with ``--workdir W``, must count what was published. With no journal file where the config says,
each job exits 2 naming the directories it looked in. ``broker.spark.register`` makes a plain
``SparkSession.builder.getOrCreate()`` session read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import AMPS
import pytest

from broker.cli import main as broker_main
from broker.testing.process import BrokerProcess, config_xml, free_port
from broker.txlog.cli import iter_records

KEYS = 20  # orders ids 0..19, each published twice
EVENTS = 15
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./data/sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./data/journal</JournalDirectory><JournalArchiveDirectory>./data/archive</JournalArchiveDirectory>
  <FlushInterval>10ms</FlushInterval><Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
SECONDS = r"in \d+\.\d s"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """W, after ``broker serve conf/broker.xml`` ran there and the official client published."""
    work = tmp_path_factory.mktemp("work")
    (work / "conf").mkdir()
    config = work / "conf" / "broker.xml"
    port = free_port()
    config.write_text(config_xml(port=port, name="spark-workdir", sow=SOW, transaction_log=TXLOG))
    broker = BrokerProcess(config, port, cwd=work).start()
    try:
        client = AMPS.Client(f"spark-workdir-{time.monotonic_ns()}")
        client.connect(broker.uri)
        client.logon(5000)
        for round_ in range(2):
            for i in range(KEYS):
                client.publish("orders", json.dumps({"id": i, "qty": 10 * i + round_}))
        for i in range(EVENTS):
            client.publish("events", json.dumps({"n": i}))
        client.publish_flush(10_000)
        client.close()
    finally:
        assert broker.stop() == 0, broker.log()
    assert list((work / "data" / "journal").iterdir()) and not (work / "conf" / "data").exists()
    return work


def _dates(work: Path) -> set[str]:
    return {dt.datetime.fromtimestamp(r.timestamp_ns // 10**9, dt.UTC).date().isoformat()
            for _p, r in iter_records([work / "data" / "journal"])}


def _at_now() -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).strftime("%Y%m%dT%H%M%SZ")


def _run_jobs(spark, work: Path, out: Path, capsys, extra: list[str]) -> None:  # noqa: ANN001
    """stats, sow-at and export of ``conf/broker.xml`` (relative to the current directory, or absolute)."""
    config = "conf/broker.xml" if Path.cwd() == work else str(work / "conf" / "broker.xml")
    assert broker_main(["spark", "stats", config, *extra]) == 0
    printed = capsys.readouterr().out
    assert re.search(rf"stats: {2 * KEYS + EVENTS} records, 2 topic\(s\), \d hour\(s\) {SECONDS}", printed), printed
    assert broker_main(["spark", "sow-at", config, "--topic", "orders", "--at", _at_now(), "--out",
                        str(out / "sow"), *extra]) == 0
    printed = capsys.readouterr().out
    assert re.search(rf"{KEYS} rows of orders in 1 file\(s\) written to {out / 'sow'} {SECONDS}", printed), printed
    sow = {r.sow_key: json.loads(r.data)["qty"] for r in spark.read.parquet(str(out / "sow")).collect()}
    assert len(sow) == KEYS and all(qty % 10 == 1 for qty in sow.values())  # each key's second publish
    assert broker_main(["spark", "export", config, "--out", str(out / "export"), *extra]) == 0
    printed = capsys.readouterr().out
    days = len(_dates(work))
    assert re.search(rf"export: {2 * KEYS + EVENTS} rows in {days} file\(s\), {days} date partition\(s\), "
                     rf"written to {out / 'export'} {SECONDS}", printed), printed
    assert spark.read.parquet(str(out / "export")).count() == 2 * KEYS + EVENTS


def test_jobs_run_from_the_broker_working_directory_read_its_journal(spark, work: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.chdir(work)
    _run_jobs(spark, work, tmp_path, capsys, [])


def test_jobs_run_elsewhere_need_the_working_directory(spark, work: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = str(work / "conf" / "broker.xml")
    for job in (["stats", config], ["export", config, "--out", str(tmp_path / "x")]):
        assert broker_main(["spark", *job]) == 2
        err = capsys.readouterr().err
        assert (f"no journal files of instance spark-workdir in {elsewhere}/data/journal, {elsewhere}/data/archive"
                in err), err
        assert "--workdir" in err and not (tmp_path / "x").exists()
    _run_jobs(spark, work, tmp_path, capsys, ["--workdir", str(work)])


def test_an_empty_journal_folder_fails_each_job_naming_it(work: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    empty = tmp_path / "empty"
    (empty / "data" / "journal").mkdir(parents=True)
    config = work / "conf" / "broker.xml"
    jobs = [["stats", str(config)], ["sow-at", str(config), "--topic", "orders", "--at", _at_now()],
            ["export", str(config)]]
    for job in jobs:
        out = ["--out", str(tmp_path / "out")] if job[0] != "stats" else []
        assert broker_main(["spark", *job, *out, "--workdir", str(empty)]) == 2, job
        err = capsys.readouterr().err
        assert f"no journal files of instance spark-workdir in {empty}/data/journal" in err, err
        assert "Traceback" not in err
    assert broker_main(["spark", "stats", str(empty / "data" / "journal")]) == 2
    assert f"no journal files in {empty}/data/journal" in capsys.readouterr().err


def test_output_files_are_bounded_not_one_per_shuffle_partition(spark, work: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    config, workdir = str(work / "conf" / "broker.xml"), ["--workdir", str(work)]
    saved = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    spark.conf.set("spark.sql.shuffle.partitions", "50")  # a window over 20 keys: up to 20 files before
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        assert broker_main(["spark", "sow-at", config, "--topic", "orders", "--at", _at_now(), "--out",
                            str(tmp_path / "sow"), *workdir]) == 0
        assert f"{KEYS} rows of orders in 1 file(s)" in capsys.readouterr().out
        assert len(list((tmp_path / "sow").glob("*.parquet"))) == 1
        assert broker_main(["spark", "sow-at", config, "--topic", "orders", "--at", _at_now(), "--out",
                            str(tmp_path / "sow8"), "--rows-per-file", "8", *workdir]) == 0
        assert f"{KEYS} rows of orders in 3 file(s)" in capsys.readouterr().out
        assert broker_main(["spark", "export", config, "--out", str(tmp_path / "export"), "--rows-per-file", "20",
                            *workdir]) == 0
        files = list((tmp_path / "export").rglob("*.parquet"))
        assert f"in {len(files)} file(s)" in capsys.readouterr().out
        assert len(files) in (3, 4)  # 55 rows, 20 per file (4 if they straddle midnight UTC)
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


def test_the_stats_plot_spans_the_hours_of_the_data(spark, work: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from broker.spark.jobs import plot_stats, stats

    rows = stats(spark, str(work / "conf" / "broker.xml"), workdir=str(work))
    hours = sorted({dt.datetime.strptime(r.hour, "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC) for r in rows})
    low, high = plot_stats(rows, str(tmp_path / "stats.png"))
    assert hours[0] - dt.timedelta(hours=1) <= low < hours[0] and hours[-1] < high <= hours[-1] + dt.timedelta(hours=1)
    assert (tmp_path / "stats.png").read_bytes()[:4] == b"\x89PNG"


REGISTER_SCRIPT = """
import sys
from pyspark.sql import SparkSession
import broker.spark

work, empty = sys.argv[1:3]
spark = SparkSession.builder.getOrCreate()
broker.spark.register(spark)
# relative to the working directory (W): the config and its ./data/journal
print("orders", spark.read.format("amps-journal").load("conf/broker.xml").where("topic = 'orders'").count())
print("events", spark.read.format("amps-journal").option("workdir", work).load(work + "/conf/broker.xml")
      .where("topic = 'events'").count())
try:
    spark.read.format("amps-journal").option("workdir", empty).load(work + "/conf/broker.xml").count()
except Exception as exc:
    print("empty:", "no journal files of instance spark-workdir in " + empty + "/data/journal" in str(exc))
spark.stop()
"""


def test_register_makes_a_plain_session_read(work: Path, tmp_path: Path) -> None:
    """A session of the user's own (``SparkSession.builder.getOrCreate()``, nothing set) in its own JVM."""
    empty = tmp_path / "empty"
    (empty / "data" / "journal").mkdir(parents=True)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           # The JVM runs the first JIT tier only (as the tests' session's does): no Spark setting of the session.
           "PYSPARK_SUBMIT_ARGS": "--master local[1] --conf spark.ui.enabled=false "
                                  "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"}
    done = subprocess.run([sys.executable, "-c", REGISTER_SCRIPT, str(work), str(empty)], cwd=work, env=env,
                          capture_output=True, timeout=240)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    assert f"orders {2 * KEYS}\nevents {EVENTS}\nempty: True\n" in out, out + done.stderr.decode()[-4000:]
