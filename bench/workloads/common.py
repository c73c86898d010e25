"""What the workloads share: running a peer's measurement without letting its failure end the workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.context import Context
from bench.figures import Figure


def error_figure(ctx: Context, system: str, exc: BaseException, unit: str = "msg/s",
                 higher_is_better: bool = True) -> Figure:
    """A figure saying ``system`` failed (the message goes to the run's log)."""
    ctx.log.append(f"{system}: {type(exc).__name__}: {str(exc)[:300]}")
    return Figure(system, None, unit, higher_is_better, note=f"error: {type(exc).__name__}")


def guard(ctx: Context, system: str, fn: Callable[..., Figure], *args: Any, unit: str = "msg/s",
          higher_is_better: bool = True) -> Figure:
    """``fn(ctx, *args)``; an exception becomes an ``error:`` figure (and a line in the run's log)."""
    try:
        return fn(ctx, *args)
    except Exception as exc:  # noqa: BLE001 - a peer failing must not hide the broker's figure
        return error_figure(ctx, system, exc, unit, higher_is_better)
