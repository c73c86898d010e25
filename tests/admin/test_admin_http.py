"""The Admin server over real HTTP: /metrics, /amps, administrator actions, errors, lifecycle."""

from __future__ import annotations

import gzip
import json
import re
import socket
from functools import partial

import pytest
import trio
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from broker.actions.runtime import ActionDescription
from broker.admin import AdminEndpoint, serve_admin
from broker.errors import ConfigError, ParameterError
from broker.stats.snapshot import counts

pytestmark = pytest.mark.timeout(30)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str, *, openmetrics: bool = False) -> Samples:
    parse = parse_openmetrics if openmetrics else text_string_to_metric_families
    return {(s.name, frozenset(s.labels.items())): s.value for family in parse(text) for s in family.samples}


def value(found: Samples, metric: str, /, **labels: str) -> float:
    return found[(metric, frozenset(labels.items()))]


async def scrape(http, port: int, **headers: str) -> str:
    reply = await http(f"http://127.0.0.1:{port}/metrics", headers=headers)
    assert reply.status == 200, reply.text
    return reply.text


# ------------------------------------------------------------------------------------------------
# /metrics
# ------------------------------------------------------------------------------------------------


async def test_metrics_values_equal_the_snapshot(admin_port, source, http) -> None:
    reply = await http(f"http://127.0.0.1:{admin_port}/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert len(source.served) == 1, "one scrape must take exactly one snapshot"
    snap = source.served[-1]
    found = samples(reply.text)

    c = snap.counters
    assert value(found, "broker_messages_received_total") == c.messages_received
    assert value(found, "broker_messages_delivered_total") == c.messages_delivered
    assert value(found, "broker_bytes_received_total") == c.bytes_in
    assert value(found, "broker_bytes_sent_total") == c.bytes_out
    assert value(found, "broker_client_disconnects_total") == c.client_disconnects
    assert value(found, "broker_slow_client_disconnects_total") == c.slow_client_disconnects
    assert value(found, "broker_protocol_errors_total") == c.protocol_errors
    assert value(found, "broker_commands_failed_total") == c.commands_failed
    for topic, flows in snap.topics.items():
        assert value(found, "broker_topic_messages_received_total", topic=topic) == flows.messages_received
        assert (
            value(found, "broker_topic_messages_delivered_total", topic=topic) == flows.messages_delivered
        )
    assert value(found, "broker_clients_connected") == len(snap.clients)
    assert value(found, "broker_client_queued_bytes") == sum(cl.queued_bytes for cl in snap.clients)
    for kind, n in counts(snap.subscriptions):
        assert value(found, "broker_subscriptions", kind=kind) == n
    for topic, sow in snap.sow.items():
        assert value(found, "broker_sow_records", topic=topic) == sow.records
        for field in ("inserts", "updates", "deletes", "queries", "expirations"):
            assert value(found, f"broker_sow_{field}_total", topic=topic) == getattr(sow, field)
    for reason, n in counts(snap.oof):
        assert value(found, "broker_oof_total", reason=reason) == n
    journal = snap.journal
    assert journal is not None
    for state, n in counts(journal.files):
        assert value(found, "broker_journal_files", state=state) == n
    assert value(found, "broker_journal_bytes") == journal.bytes
    assert value(found, "broker_journal_last_sequence") == journal.last_sequence
    assert value(found, "broker_journal_durable_sequence") == journal.durable_sequence
    assert value(found, "broker_journal_records_appended_total") == journal.records_appended
    assert value(found, "broker_replays_active") == journal.replays_active
    assert value(found, "broker_journal_fsync_seconds_count") == journal.fsync.count
    for name, action in snap.actions.items():
        for outcome, n in counts(action.outcomes):
            assert value(found, "broker_action_runs_total", action=name, outcome=outcome) == n
        assert value(found, "broker_action_failures_total", action=name) == action.outcomes.failure
        assert value(found, "broker_action_running", action=name) == float(action.running)
        assert value(found, "broker_action_last_run_timestamp_seconds", action=name) == action.last_run_start
        assert value(found, "broker_action_last_run_duration_seconds", action=name) == action.last_run_duration
        assert value(found, "broker_action_trigger_failures_total", action=name) == action.trigger_failures
    assert value(found, "broker_instance_info", name="synthetic", version="9.9.9") == 1
    assert 3725 < value(found, "broker_uptime_seconds") < 3725 + 60

    latency = snap.latency
    assert value(found, "broker_delivery_latency_seconds_count") == latency.count
    assert value(found, "broker_delivery_latency_seconds_sum") == pytest.approx(latency.sum)
    for bound, count in latency.buckets:
        le = "+Inf" if bound == float("inf") else repr(bound)
        assert value(found, "broker_delivery_latency_seconds_bucket", le=le) == count

    # Runtime metrics come from the same private registry.
    assert value(found, "process_resident_memory_bytes") > 0
    assert any(name == "python_info" for name, _ in found)


async def test_counters_move_by_exactly_the_delta(admin_port, source, sampler, http) -> None:
    first = samples(await scrape(http, admin_port))
    assert samples(await scrape(http, admin_port)) == first, "requests between two samples see the same values"
    await sampler.sample()
    second = samples(await scrape(http, admin_port))
    assert (
        value(second, "broker_messages_received_total") - value(first, "broker_messages_received_total") == 7
    )
    assert (
        value(second, "broker_messages_delivered_total") - value(first, "broker_messages_delivered_total")
        == 11
    )
    assert value(second, "broker_bytes_received_total") - value(first, "broker_bytes_received_total") == 1000
    assert value(second, "broker_bytes_sent_total") - value(first, "broker_bytes_sent_total") == 2500
    delta_orders = value(second, "broker_topic_messages_received_total", topic="orders") - value(
        first, "broker_topic_messages_received_total", topic="orders"
    )
    assert delta_orders == 3
    delta_inserts = value(second, "broker_sow_inserts_total", topic="orders") - value(
        first, "broker_sow_inserts_total", topic="orders"
    )
    assert delta_inserts == 2
    # One more latency observation pair per step.
    delta_count = value(second, "broker_delivery_latency_seconds_count") - value(
        first, "broker_delivery_latency_seconds_count"
    )
    assert delta_count == 2
    # Gauges follow the snapshot, up or down.
    assert value(second, "broker_clients_connected") == len(source.served[-1].clients)
    assert value(first, "broker_clients_connected") == len(source.served[-2].clients)


async def test_openmetrics_is_negotiated_by_accept_header(admin_port, source, http) -> None:
    reply = await http(
        f"http://127.0.0.1:{admin_port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert reply.text.endswith("# EOF\n")
    found = samples(reply.text, openmetrics=True)
    snap = source.served[-1]
    assert value(found, "broker_messages_received_total") == snap.counters.messages_received
    assert value(found, "broker_sow_records", topic="orders") == snap.sow["orders"].records

    # Prometheus's own Accept header (OpenMetrics first, text as fallback).
    prometheus_accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    reply = await http(f"http://127.0.0.1:{admin_port}/metrics", headers={"Accept": prometheus_accept})
    assert reply.headers["content-type"].startswith("application/openmetrics-text")

    plain = await http(f"http://127.0.0.1:{admin_port}/metrics", headers={"Accept": "text/plain"})
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in plain.text


async def test_metrics_gzip_and_name_filter(admin_port, http) -> None:
    reply = await http(f"http://127.0.0.1:{admin_port}/metrics", headers={"Accept-Encoding": "gzip"})
    assert reply.headers["content-encoding"] == "gzip"
    assert "broker_messages_received_total" in gzip.decompress(reply.body).decode()

    only = await http(f"http://127.0.0.1:{admin_port}/metrics?name[]=broker_bytes_sent_total")
    names = {name for name, _ in samples(only.text)}
    assert names == {"broker_bytes_sent_total"}


async def test_source_failure_is_a_500_and_the_server_recovers(admin_port, source, sampler, http) -> None:
    source.fail_next = True
    reply = await http(f"http://127.0.0.1:{admin_port}/metrics")
    assert reply.status == 500
    assert "synthetic statistics failure" in reply.text
    assert (await http(f"http://127.0.0.1:{admin_port}/amps.json")).status == 500, "until the next sample"
    await sampler.sample()
    assert (await http(f"http://127.0.0.1:{admin_port}/metrics")).status == 200
    source.fail_next = True
    await sampler.sample()
    assert (await http(f"http://127.0.0.1:{admin_port}/amps.json")).status == 500
    await sampler.sample()
    assert (await http(f"http://127.0.0.1:{admin_port}/amps.json")).status == 200


# ------------------------------------------------------------------------------------------------
# /amps
# ------------------------------------------------------------------------------------------------

UPTIME = re.compile(r"^\d{2,}:\d{2}:\d{2}\.\d{6}$")


def _all_leaves_are_strings(node) -> bool:
    if isinstance(node, dict):
        return all(_all_leaves_are_strings(v) for v in node.values())
    if isinstance(node, list):
        return all(isinstance(v, dict) and "id" in v and _all_leaves_are_strings(v) for v in node)
    return isinstance(node, str)


async def test_amps_json_tree_shape(admin_port, source, http) -> None:
    reply = await http(f"http://127.0.0.1:{admin_port}/amps.json")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    doc = reply.json()
    snap = source.served[-1]
    assert set(doc) == {"amps"}
    assert {"host", "instance"} <= set(doc["amps"])
    instance = doc["amps"]["instance"]
    assert _all_leaves_are_strings(doc), "AMPS renders every value as a string; collections carry an id"

    assert instance["name"] == "synthetic"
    assert instance["version"] == "9.9.9"
    assert instance["config_path"] == "/etc/broker/config.xml"
    assert instance["pid"] == str(snap.instance.pid)
    assert UPTIME.match(instance["uptime"]), instance["uptime"]
    assert instance["uptime"].startswith("01:02:0")

    clients = instance["clients"]
    assert [c["id"] for c in clients] == [c.id for c in snap.clients]
    first, expected = clients[0], snap.clients[0]
    assert first["client_name"] == expected.client_name
    assert first["remote_address"] == expected.remote
    assert first["bytes_in"] == str(expected.bytes_in)
    assert first["messages_out"] == str(expected.messages_out)
    assert first["subscription_count"] == str(expected.subscriptions)
    assert first["connect_time"] == "20231114T221321.000000Z"  # 1_700_000_000 + 1 s, UTC

    sow = {entry["id"]: entry for entry in instance["sow"]}
    assert set(sow) == set(snap.sow)
    assert sow["orders"]["topic"] == "orders"
    assert sow["orders"]["valid_keys"] == str(snap.sow["orders"].records)
    assert sow["orders"]["insert_count"] == str(snap.sow["orders"].inserts)
    assert sow["orders"]["query_count"] == str(snap.sow["orders"].queries)

    assert instance["processors"][0]["id"] == "all"
    assert instance["processors"][0]["messages_received"] == str(snap.counters.messages_received)
    assert instance["transaction_log"]["last_sequence"] == str(snap.journal.last_sequence)
    assert {s["id"]: s["subscription_count"] for s in instance["subscriptions"]} == {
        k: str(v) for k, v in counts(snap.subscriptions)
    }


#: What 60East's Prometheus exporter (amps-integration-prometheus/amps-exporter.py) reads from /amps.json.
EXPORTER_READS = {
    "/amps/host/memory": ["free", "in_use", "swap_free", "swap_total"],
    "/amps/host/network": ["bytes_in", "bytes_out"],
    "/amps/host/disks": ["file_system_free_percent"],
    "/amps/host/cpus": ["iowait_percent", "idle_percent"],
    "/amps/instance/processors": [
        "messages_received_per_sec", "denied_reads", "denied_writes", "throttle_count",
    ],
    "/amps/instance/sow": [
        "inserts_per_sec", "updates_per_sec", "deletes_per_sec", "queries_per_sec",
        "insert_count", "delete_count", "update_count",
    ],
    "/amps/instance/views": ["queue_depth"],
    "/amps/instance/queues": ["seconds_behind", "queue_depth", "transferred_in", "transferred_out", "owned"],
    "/amps/instance/replication": ["is_connected", "seconds_behind", "messages_out_per_sec"],
    "/amps/instance/clients": [
        "transport_rx_queue", "transport_tx_queue", "bytes_in_per_sec", "bytes_out_per_sec",
        "queue_depth_out", "queue_max_latency",
    ],
}  # fmt: skip


async def test_amps_json_satisfies_60easts_prometheus_exporter(admin_port, http) -> None:
    doc = (await http(f"http://127.0.0.1:{admin_port}/amps.json")).json()
    for path, metrics in EXPORTER_READS.items():
        node = doc
        for key in path.split("/")[1:]:
            node = node[key]
        entries = node if isinstance(node, list) else [node]
        for entry in entries:
            for metric in metrics:
                if path == "/amps/host/memory" and not entry:
                    continue  # no /proc/meminfo on this system
                float(entry[metric])  # the exporter's GaugeMetricFamily needs a number


async def test_amps_sub_paths_return_the_sub_tree(admin_port, source, http) -> None:
    base = f"http://127.0.0.1:{admin_port}"
    instance = (await http(f"{base}/amps/instance.json")).json()
    assert set(instance) == {"amps"} and set(instance["amps"]) == {"instance"}
    assert instance["amps"]["instance"]["name"] == "synthetic"

    clients = (await http(f"{base}/amps/instance/clients.json")).json()
    assert list(clients["amps"]["instance"]) == ["clients"]
    assert clients["amps"]["instance"]["clients"][0]["id"] == "c1"

    one = (await http(f"{base}/amps/instance/clients/c1.json")).json()
    assert [c["id"] for c in one["amps"]["instance"]["clients"]] == ["c1"]

    leaf = (await http(f"{base}/amps/instance/clients/c1/client_name.json")).json()
    assert leaf == {"amps": {"instance": {"clients": [{"id": "c1", "client_name": "client-1"}]}}}

    # Topic names may contain "/": the longest matching id wins.
    fx = (await http(f"{base}/amps/instance/sow//prices/fx/topic.json")).json()
    assert fx == {"amps": {"instance": {"sow": [{"id": "/prices/fx", "topic": "/prices/fx"}]}}}

    name = (await http(f"{base}/amps/instance/name.json")).json()
    assert name == {"amps": {"instance": {"name": "synthetic"}}}

    assert (await http(f"{base}/amps/instance/nothing.json")).status == 404
    assert (await http(f"{base}/amps/instance/clients/nobody.json")).status == 404
    assert (await http(f"{base}/amps/instance/name/deeper.json")).status == 404


async def test_amps_without_suffix_is_browsable_html(admin_port, http) -> None:
    base = f"http://127.0.0.1:{admin_port}"
    page = await http(f"{base}/amps")
    assert page.status == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'href="/amps/instance"' in page.text and 'href="/amps.json"' in page.text
    clients = await http(f"{base}/amps/instance/clients")
    assert 'href="/amps/instance/clients/c1"' in clients.text
    leaf = await http(f"{base}/amps/instance")
    assert "<code>synthetic</code>" in leaf.text
    head = await http(f"{base}/amps.json", method="HEAD")
    assert head.status == 200 and head.body == b""


# ------------------------------------------------------------------------------------------------
# Routing, administrator actions
# ------------------------------------------------------------------------------------------------


async def test_unknown_paths_are_404_and_bad_methods_405(admin_port, http) -> None:
    base = f"http://127.0.0.1:{admin_port}"
    for path in ("/nope", "/metrics/extra", "/ampsx", "/amps.xml.json"):
        assert (await http(base + path)).status == 404, path
    post = await http(f"{base}/metrics", method="POST", data=b"x")
    assert post.status == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert (await http(f"{base}/amps.json", method="DELETE")).status == 405
    assert (await http(f"{base}/amps/administrator/x", method="PUT", data=b"")).status == 405


async def test_administrator_actions_registry(nursery, source, http) -> None:
    actions = {}
    port = await nursery.start(partial(serve_admin, "127.0.0.1", 0, source, admin_actions=actions))
    base = f"http://127.0.0.1:{port}/amps/administrator"

    missing = await http(f"{base}/actions/archive")
    assert missing.status == 404 and "Unknown administrator action 'actions/archive'" in missing.text

    calls = []

    async def archive() -> str:
        calls.append("archive")
        return "archived 2 journals"

    async def broken() -> str:
        raise ValueError("disk on fire")

    actions["actions/archive"] = archive  # registered after start: the dict is used by reference
    actions["actions/broken"] = broken
    reply = await http(f"{base}/actions/archive")
    assert (reply.status, reply.text) == (200, "archived 2 journals\n")
    reply = await http(f"{base}/actions/archive", method="POST", data=b"")
    assert reply.status == 200
    assert calls == ["archive", "archive"]

    failed = await http(f"{base}/actions/broken")
    assert failed.status == 500 and "disk on fire" in failed.text
    listing = await http(base)
    assert listing.text.splitlines() == [
        "/amps/administrator/actions  Index of the configured actions (JSON)",
        "/amps/administrator/actions/archive",
        "/amps/administrator/actions/broken",
    ]


async def test_endpoints_get_query_parameters_and_choose_their_status(nursery, source, http) -> None:
    seen: list[dict[str, str]] = []

    async def archive(parameters) -> tuple[int, str]:
        seen.append(dict(parameters))
        if "AGE" not in parameters:
            return 400, "AGE is required"
        return 200, f"archived journals older than {parameters['AGE']}"

    actions = {
        "actions/archive": AdminEndpoint(archive, name="Archive Journals", description="Archive old journals",
                                         required=("AGE",)),
        "actions/plain": lambda: _text("plain"),
    }
    port = await nursery.start(partial(serve_admin, "127.0.0.1", 0, source, admin_actions=actions))
    base = f"http://127.0.0.1:{port}/amps/administrator"

    ok = await http(f"{base}/actions/archive?AGE=12h&Mixed=A%20b&x=1&x=2&empty=")
    assert (ok.status, ok.text) == (200, "archived journals older than 12h\n")
    assert seen[-1] == {"AGE": "12h", "Mixed": "A b", "x": "2", "empty": ""}  # case kept, last value wins
    refused = await http(f"{base}/actions/archive?age=12h")
    assert (refused.status, refused.text) == (400, "AGE is required\n")
    assert (await http(f"{base}/actions/plain?ignored=1")).text == "plain\n"
    listing = await http(base)
    assert listing.text.splitlines() == [
        "/amps/administrator/actions  Index of the configured actions (JSON)",
        "/amps/administrator/actions/archive  Archive Journals: Archive old journals (required parameters: AGE)",
        "/amps/administrator/actions/plain",
    ]


async def _text(value: str) -> str:
    return value


async def test_the_actions_index_and_parameter_errors(nursery, source, http) -> None:
    calls: list[str] = []

    async def refuse(parameters) -> tuple[int, str]:
        calls.append("refuse")
        raise ParameterError("N", f"N={parameters.get('N')!r} is not a whole number")

    catalog = [
        ActionDescription("Refuser", "c.xml:3", ({"Module": "amps-action-on-admin", "Path": "refuse"},),
                          ("do step-a",), ("N", "Note")),
        ActionDescription("nightly", "c.xml:9", ({"Module": "amps-action-on-schedule", "Every": "02:30"},),
                          ("do step-b",), ()),
    ]
    actions = {"actions/refuse": AdminEndpoint(refuse, name="Refuser", description="Refuses", required=("N",)),
               "actions/plain": lambda: _text("plain"), "authorization/authentication/reset": lambda: _text("ok")}
    port = await nursery.start(partial(serve_admin, "127.0.0.1", 0, source, admin_actions=actions,
                                       actions_catalog=lambda: catalog))
    base = f"http://127.0.0.1:{port}/amps/administrator"

    refused = await http(f"{base}/actions/refuse?N=x")  # a ParameterError from an endpoint is the client's: 400
    assert (refused.status, refused.text) == (400, "Action 'actions/refuse' refused: N='x' is not a whole number\n")
    index = await http(f"{base}/actions")
    assert index.status == 200 and index.headers["content-type"] == "application/json"
    assert json.loads(index.text) == {
        "rest": [
            {"path": "/amps/administrator/actions/plain", "name": "plain", "description": "", "action": None,
             "required": [], "optional": []},
            {"path": "/amps/administrator/actions/refuse", "name": "Refuser", "description": "Refuses",
             "action": "Refuser", "required": ["N"], "optional": [{"name": "Note", "default": ""}]},
        ],
        "actions": [
            {"name": "Refuser", "where": "c.xml:3", "triggers": [{"Module": "amps-action-on-admin", "Path": "refuse"}],
             "steps": ["do step-a"], "variables": ["N", "Note"]},
            {"name": "nightly", "where": "c.xml:9",
             "triggers": [{"Module": "amps-action-on-schedule", "Every": "02:30"}], "steps": ["do step-b"],
             "variables": []},
        ],
    }
    assert calls == ["refuse"]  # listing runs nothing


# ------------------------------------------------------------------------------------------------
# Robustness and lifecycle
# ------------------------------------------------------------------------------------------------


async def _raw_exchange(port: int, payload: bytes, *, read: bool = True) -> bytes:
    sock = trio.socket.socket()
    with sock:
        await sock.connect(("127.0.0.1", port))
        await sock.send(payload)
        if not read:
            return b""
        received = b""
        with trio.move_on_after(5):
            while chunk := await sock.recv(65536):
                received += chunk
        return received


async def test_garbage_requests_do_not_kill_the_server(admin_port, http) -> None:
    bad_line = await _raw_exchange(admin_port, b"\x16\x03\x01\x02\x00garbage \x00\xff\r\n\r\n")
    assert bad_line.startswith(b"HTTP/1.1 400")
    huge_header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
    assert (await _raw_exchange(admin_port, huge_header)).startswith(b"HTTP/1.1 431")
    assert (await _raw_exchange(admin_port, b"GET\r\n\r\n")).startswith(b"HTTP/1.1 400")
    await _raw_exchange(
        admin_port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64, read=False
    )  # broken HTTP/2
    await _raw_exchange(admin_port, b"GET /metrics HTTP/1.1\r\nHost:", read=False)  # half a request, gone
    await _raw_exchange(admin_port, b"", read=False)  # connect and close
    # Pipelined valid requests still work on a raw socket...
    pipelined = await _raw_exchange(
        admin_port,
        b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /amps/instance/name.json HTTP/1.1\r\nHost: x\r\n"
        b"Connection: close\r\n\r\n",
    )
    assert (
        pipelined.startswith(b"HTTP/1.1 404") and b'{"amps":{"instance":{"name":"synthetic"}}}' in pipelined
    )
    # ...and so does a normal client.
    assert (await http(f"http://127.0.0.1:{admin_port}/metrics")).status == 200


def _connectable(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_cancellation_closes_the_listener(source, http) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_admin, "127.0.0.1", 0, source)
        assert (await http(f"http://127.0.0.1:{port}/metrics")).status == 200
        nursery.cancel_scope.cancel()
    assert not _connectable(port)


async def test_shutdown_trigger_stops_gracefully(source, http) -> None:
    stop = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(serve_admin, "127.0.0.1", 0, source, shutdown_trigger=stop.wait)
            )
            assert (await http(f"http://127.0.0.1:{port}/amps.json")).status == 200
            stop.set()
    assert not _connectable(port)


async def test_busy_port_is_a_config_error_that_says_what_to_do(source) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"cannot listen on 127\.0\.0\.1:\d+ .*Choose a free port"):
            await serve_admin("127.0.0.1", port, source)
