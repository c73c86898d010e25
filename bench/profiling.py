"""Where the broker's time goes: a pyinstrument session of the broker process, reduced to top frames; and,
with ``python -m bench.profiling --stages``, the cost of one publish stage by stage (:mod:`bench.stages`).

``--profile W?`` starts the broker under ``python -m pyinstrument -r pyisession``; at the end the
session is saved as HTML next to the results and summarised here as the functions with the most
*self* time while the broker was serving (start-up left out), leaving out the event loop waiting for
I/O, which is idle time, not work.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

#: Functions that are the event loop waiting for I/O (idle time, not work).
IDLE_FUNCTIONS = frozenset({"epoll.poll", "poll", "select", "select.select", "kqueue.control", "get_events"})


def _serving_roots(root: Any) -> list[Any]:
    """The ``trio.run`` frames: the broker serving, without its start-up (imports, config load)."""
    found, stack = [], [root]
    while stack:
        frame = stack.pop()
        path = (frame.file_path or "").replace("\\", "/")
        if frame.function == "run" and path.endswith("trio/_core/_run.py"):
            found.append(frame)
            continue
        stack.extend(frame.children)
    return found or [root]


def _where(frame: Any) -> str:
    path = frame.file_path_short or ""
    if path.startswith("<built-in>") and frame.parent is not None:
        p = frame.parent
        return f"built-in, called from {p.function} ({p.file_path_short}:{p.line_no})"
    return f"{path}:{frame.line_no}"


def _area(frame: Any) -> str:
    """The part of the system a frame belongs to: ``broker.protocol``, ``plugins.storage``, ``trio``..."""
    if (frame.file_path_short or "").startswith("<built-in>") and frame.parent is not None:
        return _area(frame.parent)  # a C call counts for the code that made it
    path = (frame.file_path or "").replace("\\", "/")
    for marker, prefix in (("/broker/", "broker."), ("/plugins/", "plugins."), ("/broker_plugins/", "plugins.")):
        if marker in path:
            rest = path.split(marker, 1)[1].split("/")
            return prefix + (rest[0] if len(rest) > 1 else rest[0].removesuffix(".py"))
    if "/trio/" in path:
        return "trio"
    return "python (stdlib and other libraries)"


def top_frames(session_path: Path, count: int = 5) -> dict[str, Any]:
    """The ``count`` functions with the most self time while the broker was serving.

    Returns:
        ``total_s`` (sampled while serving), ``idle_s`` (waiting for I/O), ``top``: dicts with
        ``function``, ``where``, ``self_s`` and ``share`` (of the busy time), and ``by_area``: the
        share of the busy time spent in each package (``broker.protocol``, ``plugins.storage``...).
    """
    from pyinstrument.session import Session

    session = Session.load(str(session_path))
    root = session.root_frame()
    if root is None:
        return {"total_s": 0.0, "idle_s": 0.0, "top": []}
    roots = _serving_roots(root)
    self_time: dict[tuple[str, str], float] = defaultdict(float)
    by_area: dict[str, float] = defaultdict(float)
    idle = 0.0
    stack = list(roots)
    while stack:
        frame = stack.pop()
        if frame.function == "_find_and_load":
            continue  # a first-use import: start-up cost, not steady-state work
        stack.extend(frame.children)
        if frame.is_synthetic:
            continue  # [self]/[await] leaves: already in their parent's total_self_time
        own = frame.total_self_time
        if frame.function in IDLE_FUNCTIONS:
            idle += own
            continue
        self_time[(frame.function or "?", _where(frame))] += own
        by_area[_area(frame)] += own
    busy = sum(self_time.values()) or 1e-9
    ranked = sorted(self_time.items(), key=lambda kv: kv[1], reverse=True)[:count]
    return {
        "total_s": round(sum(r.time for r in roots), 3),
        "idle_s": round(idle, 3),
        "top": [{"function": f, "where": w, "self_s": round(t, 3), "share": round(t / busy, 3)}
                for (f, w), t in ranked],
        "by_area": {a: round(t / busy, 3) for a, t in sorted(by_area.items(), key=lambda kv: -kv[1])},
    }


def save_html(session_path: Path, html_path: Path) -> None:
    """Render a saved session as pyinstrument's interactive HTML page."""
    from pyinstrument.renderers import HTMLRenderer
    from pyinstrument.session import Session

    html_path.write_text(HTMLRenderer().render(Session.load(str(session_path))))


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.profiling --stages``: the per-stage cost of one publish (see :mod:`bench.stages`)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if "--stages" in args:
        from bench.stages import main as stages

        return stages(args)
    print("usage: python -m bench.profiling --stages [-n PUBLISHES] [--keys K] [--json FILE]\n"
          "(a workload's whole profile: python -m bench --profile W1)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
