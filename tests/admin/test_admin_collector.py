"""The collector, docs/metrics.md and docs/grafana-dashboard.json agree on metric names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.stats.collector import METRICS, BrokerCollector, make_registry
from broker.stats.snapshot import empty_snapshot

DOCS = Path(__file__).resolve().parents[2] / "docs"


def exposed_names(registry) -> set[str]:
    """Metric names as users type them (counters with ``_total``, info with ``_info``)."""
    suffix = {"counter": "_total", "info": "_info"}
    return {family.name + suffix.get(family.type, "") for family in registry.collect()}


def test_registry_is_private_and_journal_metrics_need_a_journal(make_source) -> None:
    with_journal = make_source()
    registry = make_registry(with_journal)
    names = exposed_names(registry)
    assert "broker_journal_fsync_seconds" in names and "process_cpu_seconds_total" in names
    assert "broker_messages_received_total" not in exposed_names(REGISTRY)

    without = make_registry(make_source(with_journal=False), runtime_metrics=False)
    names = exposed_names(without)
    assert not {n for n in names if n.startswith(("broker_journal", "broker_replays"))}
    assert not {n for n in names if n.startswith(("process_", "python_"))}
    assert names == {
        spec.name for spec in METRICS if not spec.name.startswith(("broker_journal", "broker_repl"))
    }


def test_an_empty_broker_is_scrapeable() -> None:
    registry = make_registry(lambda: empty_snapshot("fresh"), runtime_metrics=False)
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["broker_messages_received"].samples[0].value == 0
    assert (
        families["broker_delivery_latency_seconds"].samples[-1].name == "broker_delivery_latency_seconds_sum"
    )


def test_describe_does_not_call_the_source() -> None:
    def source():
        raise AssertionError("describe must not take a snapshot")

    assert {m.name for m in BrokerCollector(source).describe()} >= {"broker_messages_received", "broker_oof"}


def test_every_emitted_metric_is_documented(make_source) -> None:
    docs = (DOCS / "metrics.md").read_text()
    documented = set(re.findall(r"`((?:broker|process|python)_[a-z0-9_]+)`", docs))
    emitted = exposed_names(make_registry(make_source()))
    missing = sorted(emitted - documented)
    assert not missing, f"add these to docs/metrics.md: {missing}"
    stale = sorted(n for n in documented if n.startswith("broker_") and n not in {s.name for s in METRICS})
    assert not stale, f"docs/metrics.md names metrics the collector does not have: {stale}"
    for spec in METRICS:  # the documented type matches
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{spec.name}` |"))
        assert row.split("|")[2].strip().startswith(spec.type), row


# ------------------------------------------------------------------------------------------------
# Grafana
# ------------------------------------------------------------------------------------------------

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "le", "inf", "nan",
}  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (identifiers that are neither functions nor keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word = match.group()
        after = expr[match.end() :].lstrip()
        if after.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function call or a keyword
        if match.start() > 0 and expr[match.start() - 1] in "$0123456789.":
            continue  # a Grafana variable or part of a number (1e3)
        names.add(word)
    return names


def test_promql_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(broker_x_bucket{a=~"$v", b="c d"}[$__rate_interval])))'
        " / on (instance) group_left broker_y"
    )
    assert promql_metric_names(expr) == {"broker_x_bucket", "broker_y"}


def _exprs(node) -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            is_query = key in ("expr", "definition") or (key == "query" and "(" in str(value))
            if is_query and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_exprs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_exprs(value))
    return found


def test_grafana_dashboard_uses_only_known_metric_names(make_source) -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    known = set()
    for family in make_registry(make_source()).collect():
        known.update(sample.name for sample in family.samples)
        known.add(family.name + ("_info" if family.type == "info" else ""))
    exprs = _exprs(dashboard)
    assert len(exprs) >= 20
    used = set()
    for expr in exprs:
        # Grafana's template function label_values(<series selector>, <label>): only the selector is PromQL.
        inner = re.sub(r"^label_values\((.*),\s*\w+\s*\)$", r"\1", expr)
        names = promql_metric_names(inner)
        unknown = names - known
        assert not unknown, f"unknown metric names {unknown} in {expr!r}"
        used |= names
    assert "broker_messages_received_total" in used
    assert "broker_delivery_latency_seconds_bucket" in used
