"""The run's outputs: one rich table on the terminal, a Markdown copy for the README, and the JSON file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.figures import Figure, Row, human

HEADERS = ("workload", "case", "broker", "broker p50/p99/p99.9", "peers", "ratio", "machine limit",
           "broker CPU s", "broker peak RSS", "checks")


def _peers(row: Row) -> str:
    parts = []
    for p in row.peers:
        lat = p.latency.short()
        parts.append(f"{p.system} {p.short()}" + (f" ({lat})" if lat and p.value is not None else ""))
    return "; ".join(parts) if parts else "-"


def _ratio(row: Row) -> str:
    r = row.ratio()
    best = row.best_peer()
    if r is None or best is None:
        return "-"
    return f"{r:.2f}x {best.system}"


def _limit(limit: Figure | None) -> str:
    return f"{limit.system}: {limit.short()}" if limit is not None and limit.value is not None else "-"


def _checks(row: Row) -> str:
    figures = (row.broker, *row.peers)
    failed_own = [f"{f.system} {k}" for f in figures for k in f.failed_checks()]
    if "summary" in row.checks:
        summary = str(row.checks["summary"])
        return summary + ("; FAILED: " + ", ".join(failed_own) if failed_own else "")
    bad = [k for k, v in row.checks.items() if v is False] + failed_own
    if bad:
        return "FAILED: " + ", ".join(bad)
    held = [*row.checks.values(), *(v for f in figures for v in f.checks.values())]
    return "ok" if any(v is True for v in held) else ""


def cells(row: Row) -> list[str]:
    """The row's table cells, in :data:`HEADERS` order."""
    b = row.broker
    return [row.workload, row.case, b.short(), b.latency.short(), _peers(row), _ratio(row), _limit(row.limit),
            "-" if b.cpu_s is None else f"{b.cpu_s:.2f}",
            "-" if b.peak_rss_mb is None else f"{b.peak_rss_mb:.0f} MB", _checks(row)]


def print_table(rows: list[Row], title: str, caption: str, notes: list[str]) -> None:
    """Print the results table (wide even when stdout is not a terminal, so it stays readable in logs)."""
    console = Console(width=None if sys.stdout.isatty() else 220, soft_wrap=False)
    table = Table(title=title, caption=caption, show_lines=True)
    for h in HEADERS:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*cells(row))
    console.print(table)
    for n in notes:
        console.print(f"[dim]- {n}[/dim]", highlight=False)


def markdown(rows: list[Row], title: str, caption: str) -> str:
    """The table as Markdown (for the README)."""
    keep = (0, 1, 2, 3, 4, 5, 6, 7, 8)
    lines = [f"**{title}**", "", "| " + " | ".join(HEADERS[i] for i in keep) + " |",
             "|" + "---|" * len(keep)]
    for row in rows:
        c = cells(row)
        lines.append("| " + " | ".join(c[i].replace("|", "/") for i in keep) + " |")
    lines += ["", caption]
    return "\n".join(lines) + "\n"


def failures(rows: list[Row]) -> list[str]:
    """Why the run must fail, one line per problem naming the workload, the case and the system.

    Every figure that was measured and went wrong fails the run, the broker's and a peer's alike: a figure
    without a value (an error, a peer that is installed but did not start, a workload that crashed), one that
    is incomplete, and every check that is ``False`` (the row's and each figure's own). The only figures
    allowed to have no value are ``skipped:`` peers: not installed, or not selected (``--no-peers``,
    ``--no-install`` with the tool absent); the table's notes say why.
    """
    found = []
    for row in rows:
        where = f"{row.workload} {row.case}"
        note = row.broker.note
        if not row.broker.ok or note.startswith(("error", "incomplete")):
            found.append(f"{where}: {note or 'no value'}")
        for peer in row.peers:
            if peer.skipped:
                continue
            if not peer.ok or peer.note.startswith(("error", "incomplete")):
                found.append(f"{where}: {peer.system}: {peer.note or 'no value'}")
        bad = [k for k, v in row.checks.items() if v is False]
        bad += [f"{f.system} {k}" for f in (row.broker, *row.peers) for k in f.failed_checks()]
        if bad:
            found.append(f"{where}: check failed: {', '.join(bad)}")
    return found


def worst_ratios(rows: list[Row], count: int = 3) -> list[Row]:
    """The rows where the broker is furthest behind its best peer."""
    rated = [r for r in rows if r.ratio() is not None]
    return sorted(rated, key=lambda r: r.ratio() or 0.0)[:count]


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write the results file (atomically: a partial file never replaces a good one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)


def summary_lines(rows: list[Row]) -> list[str]:
    """One plain line per row: the figures, for logs and reports."""
    out = []
    for row in rows:
        r = row.ratio()
        out.append(f"{row.workload} | {row.case} | broker {row.broker.short()} {row.broker.latency.short()} | "
                   f"{_peers(row)} | ratio {'-' if r is None else f'{r:.2f}'} | {_limit(row.limit)}")
    return out


__all__ = ["cells", "human", "markdown", "print_table", "summary_lines", "worst_ratios", "write_json"]
