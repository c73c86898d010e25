"""The pause log (``BROKER_PAUSE_LOG_MS``): a task step or garbage collection over the threshold is logged with
the task's name, shorter ones are not, and the summary counts them."""

from __future__ import annotations

import gc
import logging
import time

import pytest
import trio

from broker.server import pauses


def test_long_steps_and_collections_are_logged_by_task(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(pauses.ENV, "20")
    installed: list[pauses.PauseLog | None] = []

    async def hog() -> None:
        time.sleep(0.05)  # holds the loop for 50 ms: one long step
        gc.collect()

    async def quick() -> None:
        await trio.sleep(0)

    async def main() -> None:
        installed.append(pauses.install_from_environment())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(quick)
            nursery.start_soon(hog, name="hog-task")
        pauses.uninstall(installed[0])

    with caplog.at_level(logging.WARNING, logger="broker.pauses"):
        trio.run(main)
    log = installed[0]
    assert log is not None and log.long_steps >= 1
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    assert any("by task hog-task" in m for m in held), held
    assert not any("quick" in m for m in held), held
    assert sum(log.gc_count) >= 1  # the explicit collection was seen
    assert any(r.getMessage().startswith("pauses: ") for r in caplog.records)
    assert log.on_gc not in gc.callbacks  # uninstalled


def test_unset_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pauses.ENV, raising=False)
    callbacks = list(gc.callbacks)

    async def main() -> pauses.PauseLog | None:
        return pauses.install_from_environment()

    assert trio.run(main) is None
    assert gc.callbacks == callbacks


def test_a_step_blocked_off_the_cpu_is_told_from_a_busy_one(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A step that sleeps (as a stalled storage write or a descheduled thread does) is reported mostly off CPU;
    a step that computes is reported mostly on CPU."""
    monkeypatch.setenv(pauses.ENV, "20")
    installed: list[pauses.PauseLog | None] = []

    async def sleeper() -> None:
        time.sleep(0.05)

    async def spinner() -> None:
        end = time.thread_time() + 0.05  # 50 ms of this thread's CPU, however long the machine makes it
        while time.thread_time() < end:
            pass

    async def main() -> None:
        installed.append(pauses.install_from_environment())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper, name="sleeper-task")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spinner, name="spinner-task")
        pauses.uninstall(installed[0])

    with caplog.at_level(logging.WARNING, logger="broker.pauses"):
        trio.run(main)

    def split(task: str) -> tuple[float, float]:
        line = next(r.getMessage() for r in caplog.records if f"by task {task} (" in r.getMessage())
        on = float(line.split("(")[1].split(" ms on CPU")[0])
        off = float(line.split("ms on CPU, ")[1].split(" ms off CPU")[0])
        return on, off

    on, off = split("sleeper-task")
    assert off > on, (on, off)
    on, _off = split("spinner-task")
    assert on >= 50 * 0.9, on  # its CPU is counted whatever the wall time
    log = installed[0]
    assert log is not None and log.long_step_cpu_ns <= log.long_step_ns
    summary = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("pauses: "))
    assert "of it on CPU" in summary
