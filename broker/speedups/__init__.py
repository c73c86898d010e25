"""Compiled twins of hot-path functions, and the switch that picks them.

Each ``broker/speedups/<name>.pyx`` is a Cython module that does the same work as pure-Python code
elsewhere in the package, faster (setup.py builds every one as an optional extension when the package is
installed). The pure-Python code stays the reference: the tests run both and require the same results, and
the broker uses the fallback wherever the compiled module is missing.

A caller picks its implementation once, at import::

    from broker import speedups

    _compiled = speedups.load("publish")
    decode = _compiled.decode if _compiled is not None else _decode_python

Setting ``BROKER_PURE_PYTHON=1`` in the environment makes :func:`load` return ``None`` for every module, so
the whole broker runs on the fallbacks (the tests use it to run the same scenarios both ways).
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Final

__all__ = ["PURE_PYTHON_ENV", "load", "loaded", "pure_python"]

#: The environment variable that turns every compiled module off.
PURE_PYTHON_ENV: Final = "BROKER_PURE_PYTHON"

_log = logging.getLogger(__name__)
_loaded: dict[str, bool] = {}


def pure_python() -> bool:
    """Whether ``BROKER_PURE_PYTHON`` asks for the pure-Python fallbacks everywhere."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() not in ("", "0", "false", "no")


def load(name: str) -> ModuleType | None:
    """The compiled module ``broker.speedups.<name>``, or ``None`` to use the pure-Python fallback.

    ``None`` when ``BROKER_PURE_PYTHON`` is set, or when the module was not built (no compiler when the
    package was installed). Which one was chosen is remembered for :func:`loaded`.
    """
    if pure_python():
        _loaded[name] = False
        return None
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        _log.debug("compiled %s not available (%s): using the pure-Python code", name, exc)
        _loaded[name] = False
        return None
    _warn_if_stale(module, name)
    _loaded[name] = True
    return module


def _warn_if_stale(module: ModuleType, name: str) -> None:
    """Log a warning when the ``.pyx`` beside a built module is newer: the build predates an edit."""
    built = getattr(module, "__file__", None)
    source = Path(__file__).with_name(f"{name}.pyx")
    if built and source.exists() and source.stat().st_mtime > Path(built).stat().st_mtime:
        _log.warning("%s is older than %s: rebuild it with `pip install -e .`", Path(built).name, source.name)


def loaded() -> dict[str, bool]:
    """For each module asked for so far, whether the compiled one is in use (logged at start-up)."""
    return dict(_loaded)
