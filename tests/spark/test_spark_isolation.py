"""A Spark test that times out or kills the JVM fails alone (issue 33, acceptance 2).

An inner pytest run, in a subprocess with this directory's ``conftest.py``, holds tests that use the
session before and after one that pytest-timeout interrupts in the middle of a Spark job (the py4j call that
waits for it), and one under which the JVM exits. Only those two may fail: the others pass, in the same
module and in the next one, with nothing charged to them at setup or teardown.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).parent

INNER_A = '''
import json

import pytest


def _journal(open_writer, directory):
    writer = open_writer(directory)
    for i in range(10):
        writer.append("publish", "t", json.dumps({"i": i}).encode())
    writer.sync()
    writer.close()
    return str(directory)


def test_a_before(spark, open_writer, tmp_path):
    path = _journal(open_writer, tmp_path / "j")
    assert spark.read.format("amps-journal").load(path).where("seq > 3").count() == 7


@pytest.mark.timeout(6)
def test_b_times_out_in_a_spark_job(spark):
    spark.range(2).repartition(2).selectExpr("java_method('java.lang.Thread', 'sleep', 600000L)").collect()


def test_c_after_the_timeout(spark, open_writer, tmp_path):
    path = _journal(open_writer, tmp_path / "j")
    assert spark.read.format("amps-journal").load(path).where("seq <= 4").count() == 4
    assert spark.range(1000).selectExpr("sum(id) AS s").collect()[0].s == 499500


def test_d_the_jvm_exits(spark):
    spark.sparkContext._jvm.java.lang.System.exit(1)


def test_e_after_the_crash(spark, open_writer, tmp_path):
    path = _journal(open_writer, tmp_path / "j")
    assert spark.read.format("amps-journal").load(path).count() == 10
'''

INNER_B = '''
def test_f_another_module(spark):
    assert spark.range(10).count() == 10
'''


@pytest.mark.timeout(360)
def test_a_timed_out_or_crashed_spark_test_fails_alone(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    shutil.copy(HERE / "conftest.py", inner / "conftest.py")
    (inner / "test_inner_a.py").write_text(INNER_A)
    (inner / "test_inner_b.py").write_text(INNER_B)
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "spark",
         "-o", "markers=spark: the Spark lane", "-o", "timeout=100", f"--junitxml={report}",
             # Python < 3.11.8 can fail ast.parse with "AST constructor recursion depth mismatch" (gh-106905)
             # when pytest quotes the source of a timed-out job's deep stack: report tracebacks natively.
             "--tb=native", str(inner)],
        cwd=inner, capture_output=True, timeout=300)
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcomes.setdefault(case.get("name"), set()).update(kinds or {"passed"})
    assert outcomes == {
        "test_a_before": {"passed"},
        "test_b_times_out_in_a_spark_job": {"failure"},
        "test_c_after_the_timeout": {"passed"},
        "test_d_the_jvm_exits": {"failure"},
        "test_e_after_the_crash": {"passed"},
        "test_f_another_module": {"passed"},
    }, output[-6000:]
    assert "Timeout" in output and "2 failed, 4 passed" in output, output[-6000:]
    assert "error" not in output.splitlines()[-1], output[-3000:]


def test_every_spark_test_is_in_the_spark_lane() -> None:
    root = HERE.parent.parent

    def collected(marker: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "-m", marker, str(HERE)], cwd=root, capture_output=True, timeout=120)
        return done.stdout.decode(errors="replace")

    selected = collected("spark")
    tests = sorted(p.name for p in HERE.glob("test_*.py"))
    assert all(f"{name}::" in selected for name in tests), selected
    assert "deselected" not in selected.splitlines()[-1], selected[-2000:]
    assert "::" not in collected("not spark")
