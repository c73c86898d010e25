"""What the workloads share: measuring a peer so that its failure fails the run without hiding the other figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.context import Context
from bench.figures import Figure


def error_figure(ctx: Context, system: str, exc: BaseException, unit: str = "msg/s",
                 higher_is_better: bool = True) -> Figure:
    """An ``error:`` figure naming the exception ``system`` raised (its message goes to the run's log).

    Such a figure fails the run (:func:`bench.report.failures`), a peer's as much as the broker's.
    """
    ctx.log.append(f"{system}: {type(exc).__name__}: {str(exc)[:300]}")
    return Figure(system, None, unit, higher_is_better, note=f"error: {type(exc).__name__}")


def guard(ctx: Context, system: str, fn: Callable[..., Figure], *args: Any, unit: str = "msg/s",
          higher_is_better: bool = True) -> Figure:
    """``fn(ctx, *args)``; an exception becomes an ``error:`` figure (and a line in the run's log).

    The workload goes on, so the other systems are still measured and the table shows every figure, but the
    error figure fails the run: a peer that was started and failed is a failure, never a blank.
    """
    try:
        return fn(ctx, *args)
    except Exception as exc:  # noqa: BLE001 - recorded as an error figure, which fails the run at its end
        return error_figure(ctx, system, exc, unit, higher_is_better)
