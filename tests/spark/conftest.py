"""The Spark tests' session, isolated from test to test, and journals written with the broker's JournalWriter.

Every test here is marked ``spark`` (``-m spark`` runs the lane, ``-m 'not spark'`` leaves it out).

One ``local[2]`` SparkSession (UI off, two shuffle partitions) serves the run, but a test cannot break it
for the others. pytest-timeout's signal interrupts a test in the middle of a py4j call, which leaves that
thread's py4j connection waiting for an answer that the next call then reads (``KeyError: 'm'``,
``SparkSession does not exist in the JVM``), and PySpark's own clean-up after the interrupted call (the
call site reset) makes such a call at once, blocking until the interrupted job ends. So for Spark tests the
timeout's signal handler first closes that connection, cancels the Spark jobs and stops the streaming
queries, then fails the test as pytest-timeout does; a test that fails otherwise gets the same clean-up
after it; and before each test the session is checked (a value echoed by the JVM) and, when it is dead
(the JVM crashed or exited), replaced by a new one.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config.model import TransactionLogConfig
from broker.spark.session import build_session
from broker.txlog import JournalWriter

log = logging.getLogger("tests.spark")

HERE = Path(__file__).parent

#: The tests' session settings.
TEST_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",  # the driver listens on loopback only
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
    # The tests' jobs are small and short: the JVM's first JIT tier alone starts faster and spends about 40%
    # less CPU on a job of the suite than with the optimizing tier compiling in the background.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method for Spark tests, freeing the session before failing the test."""
    if (HERE not in item.path.parents or settings.method != "signal"
            or threading.current_thread() is not threading.main_thread()):
        return None  # pytest-timeout's own
    from pytest_timeout import timeout_sigalrm

    def handler(signum: int, frame: object) -> None:
        __tracebackhide__ = True
        SESSIONS.after_failure()
        timeout_sigalrm(item, settings)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined] - what pytest-timeout's cancel hook calls
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


def _alive(session: Any) -> bool:
    """Whether the session answers, and answers this call (not an earlier one's stale reply)."""
    nonce = random.randrange(1, 1 << 30)
    try:
        return (session._jvm.java.lang.Integer.valueOf(nonce) == nonce
                and not session.sparkContext._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - whatever py4j raises, the session is not usable
        return False


def _close_thread_connection() -> None:
    """Close this thread's py4j connection: an interrupted call may have left an answer unread on it."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    client = getattr(gateway, "_gateway_client", None)
    connection = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
    if connection is not None:
        connection.close(reset=True)


def _discard() -> None:
    """Forget a dead session and its JVM, so that the next build starts a new one."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    for step in (lambda: SparkContext._active_spark_context.stop(), lambda: gateway.shutdown()):
        with contextlib.suppress(Exception):  # it is dead already
            step()
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(30)
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


class SparkSessions:
    """The run's SparkSession: built on first use, freed after a failed test, replaced when dead."""

    def __init__(self) -> None:
        self.session: Any = None
        #: How many dead sessions were replaced.
        self.replaced = 0

    def get(self) -> Any:
        if self.session is not None and not _alive(self.session):
            log.warning("the SparkSession no longer answers (a test before broke it): starting a new one")
            _discard()
            self.session = None
            self.replaced += 1
        if self.session is None:
            self.session = build_session("local[2]", "broker-tests", TEST_SETTINGS)
        return self.session

    def after_failure(self) -> None:
        """Free what a failed or interrupted test may have left running: its connection, jobs, streams."""
        if self.session is None:
            return
        _close_thread_connection()
        with contextlib.suppress(Exception):  # dead: get() replaces it
            for query in self.session.streams.active:
                query.stop()
            self.session.sparkContext.cancelAllJobs()

    def stop(self) -> None:
        if self.session is not None:
            if _alive(self.session):
                self.session.stop()
            else:
                _discard()
            self.session = None


#: The run's sessions (the timeout handler needs them too).
SESSIONS = SparkSessions()


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[SparkSessions]:
    yield SESSIONS
    SESSIONS.stop()


@pytest.fixture
def spark(spark_sessions: SparkSessions, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The run's SparkSession, checked alive (replaced if not); a failed test's leftovers are freed after it."""
    yield spark_sessions.get()
    if request.node.stash.get(_FAILED, False):
        spark_sessions.after_failure()


@pytest.fixture(scope="session")
def open_writer():  # noqa: ANN201 - the function below
    """:func:`_open_writer`, for tests and module-scoped fixtures."""
    return _open_writer


def _open_writer(directory: Path, archive: Path | None = None, instance: str = "spark-test",
                journal_size: int = 1 << 20) -> JournalWriter:
    """A real JournalWriter on ``directory`` rotating at ``journal_size`` (1 MiB: the writer's floor)."""
    config = TransactionLogConfig(journal_directory=str(directory),
                                  journal_archive_directory=str(archive) if archive else None,
                                  preallocated_journal_files=1, journal_size=journal_size,
                                  min_journal_size=journal_size, flush_interval=0.01)
    writer = JournalWriter(config, instance)
    writer.open()
    return writer
