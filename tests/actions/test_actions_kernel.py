"""The runtime inside a real (in-process) Broker: BrokerHost over the engine, start-up after the listeners,
shutdown actions before the journal closes, statistics, stop requests."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from broker import hookimpl
from broker.actions import ActionError, RunContext, Step
from broker.config import load_config
from broker.plugins import PluginManager
from broker.server.kernel import Broker, build_broker
from broker.testing.clients import Delivered, RecordingClient
from broker.txlog import Command, JournalWriter, ReplayStart

SOW = """<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic>
  <Topic><Name>orders-eu</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
  <Topic><Name>quotes</Name><MessageType>xml</MessageType><Key>/q/id</Key><Durability>transient</Durability></Topic></SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <Topic><Name>orders.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"""

EVENTS: list[str] = []


class DeleteClosed(Step):
    """Deletes closed orders through the host and notes it (the e2e tests use a similar step)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.note = options.get("Note", "delete")

    async def run(self, ctx: RunContext) -> str:
        deleted = await ctx.host.delete_sow("orders", None, "/status = 'closed'")
        EVENTS.append(f"{self.note}: {deleted}")
        return f"deleted {deleted}"


class Note(Step):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.text = options.get("Text", "")

    async def run(self, ctx: RunContext) -> str:
        EVENTS.append(ctx.options["Text"])
        if ctx.options.get("Sleep"):
            await trio.sleep(float(ctx.options["Sleep"]))
        if ctx.options.get("Stop"):
            ctx.host.request_shutdown(ctx.options["Stop"])
        return "noted"


def steps_plugin() -> ModuleType:
    module = ModuleType("kernel_test_steps")

    @hookimpl
    def broker_register_actions(registry) -> None:  # noqa: ANN001
        registry.add("test-delete-closed", DeleteClosed)
        registry.add("test-note", Note)

    module.broker_register_actions = broker_register_actions  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def _events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    EVENTS.clear()
    monkeypatch.chdir(tmp_path)


def make_broker(tmp_path: Path, actions: str = "", *, admin: bool = False) -> Broker:
    admin_xml = "<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>" if admin else ""
    path = tmp_path / "config.xml"
    path.write_text(f"""<AMPSConfig><Name>kernel-test</Name>{admin_xml}
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>{SOW}<Actions>{actions}</Actions></AMPSConfig>""")
    pm = PluginManager()
    pm.register(steps_plugin(), name="kernel-test-steps")
    return build_broker(load_config(path), plugins=pm.collect())


class Client(RecordingClient):
    """What the engine needs of a connected client; records ``(command, topic, body, reason)`` of what it is sent."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker.services.message_type("json"), "test-client")

    def record(self, delivered: Delivered) -> None:
        self.sent.append((delivered.command, delivered.topic, delivered.body, delivered.reason))


def publish_orders(broker: Broker, client: Client) -> None:
    for i, status in enumerate(["open", "closed", "closed", "open"]):
        body = f'{{"id": {i}, "status": "{status}"}}'.encode()
        broker.engine.publish(client, {"topic": "orders", "seq": i + 1}, body)
    broker.engine.publish(client, {"topic": "orders-eu", "seq": 10}, b'{"id": 1, "status": "closed"}')


def journal_deletes(directory: Path) -> list[tuple[str, str]]:
    from broker.config.model import TransactionLogConfig

    with JournalWriter(TransactionLogConfig(str(directory)), "kernel-test") as journal:
        return [(r.topic, r.sow_key.decode()) for r in journal.replay(ReplayStart.epoch())
                if r.command == Command.SOW_DELETE]


# -- BrokerHost over the engine ------------------------------------------------------------------------

async def test_delete_sow_is_a_client_sow_delete_journaled_with_oof(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        client = Client(broker)
        broker.engine.subscribe(client, {"sub_id": "s1", "topic": "orders"}, oof=True)
        publish_orders(broker, client)
        client.sent.clear()
        host = broker.action_host
        deleted = await host.delete_sow("^orders", "JSON", "/status = 'closed'")
        assert deleted == {"orders": 2, "orders-eu": 1}
        assert sorted((c, t, r) for c, t, _b, r in client.sent) == [("oof", "orders", "deleted")] * 2
        assert broker.engine.sow_topics["orders"].count() == 2
        assert broker.statistics().sow["orders"].deletes == 2
        for bad, says in [(("orders", None, "/status = "), "Filter '/status = ': "),
                          (("nope", None, "1 = 1"), "no SOW topic matches Topic 'nope'; SOW topics: orders (json), "
                                                    "orders-eu (json), quotes (xml)"),
                          (("quotes", "json", "1 = 1"), "no SOW topic of MessageType 'json' matches Topic 'quotes'"),
                          (("orders(", None, "1 = 1"), "Topic 'orders(': bad regex topic"),
                          (("orders", None, ""), "a Filter is required")]:
            with pytest.raises(ActionError) as caught:
                await host.delete_sow(*bad)
            assert says in str(caught.value)
        assert broker.engine.sow_topics["orders"].count() == 2  # refused deletes deleted nothing
    finally:
        await broker.aclose()
    assert sorted(journal_deletes(tmp_path / "journal")) == sorted(
        [("orders", k) for k in _keys(broker, "orders", [1, 2])] + [("orders-eu", k) for k in _keys(broker, "orders-eu", [1])]
    )


def _keys(broker: Broker, topic: str, ids: list[int]) -> list[str]:
    """The SOW keys of records with these ``/id`` values."""
    from broker.testing import DictMessage

    keygen = broker.engine.sow_topics[topic].key_generator
    return [keygen.generate(DictMessage({"id": i})) for i in ids]


async def test_the_rest_of_the_host(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        host = broker.action_host
        assert host.instance_name == "kernel-test"
        assert (host.journal_directory, host.journal_archive_directory) == (Path("./journal"), Path("./archive"))
        assert host.sow_topics() == [("orders", "json"), ("orders-eu", "json"), ("quotes", "xml")]
        assert host.journal_writer_index() == 0
        assert await host.compact_sow(None, None) == ["orders", "orders-eu", "quotes"]
        assert await host.compact_sow("orders-.*", None) == ["orders-eu"]
        now = host.now()
        assert now.tzinfo is not None and now.utcoffset() is not None
        assert isinstance(host.rotate_logs(), list)
        assert not broker.stop_requested.is_set()
        host.request_shutdown("disk full")
        assert broker.stop_requested.is_set() and broker.stop_reason == "disk full"
        with pytest.raises(ActionError, match="Path 'a/b' cannot be served"):
            host.add_admin_action("a/b", _never, name="x", description="", required=())
    finally:
        await broker.aclose()


async def _never(request: Any) -> tuple[int, str]:
    raise AssertionError("not called")


# -- the runtime in the kernel's lifecycle --------------------------------------------------------------

STARTUP = """<Action><On><Module>amps-action-on-startup</Module><Options><Name>hello</Name></Options></On>
  <Do><Module>test-note</Module><Options><Text>startup {{AMPS_INSTANCE_NAME}}</Text></Options></Do></Action>"""
SHUTDOWN = """<Action><On><Module>amps-action-on-shutdown</Module><Options><Name>bye</Name></Options></On>
  <Do><Module>test-note</Module><Options><Text>shutdown</Text></Options></Do>
  <Do><Module>test-delete-closed</Module><Options><Note>at shutdown</Note></Options></Do></Action>"""


async def test_startup_runs_after_the_listeners_and_shutdown_journals_before_the_journal_closes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    broker = make_broker(tmp_path, STARTUP + SHUTDOWN)
    client = Client(broker)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(broker.serve)
        assert addresses and EVENTS == ["startup kernel-test"]  # ran before serve reported started
        publish_orders(broker, client)
        nursery.cancel_scope.cancel()  # cancelled from outside: serve's finally runs the shutdown actions
    assert EVENTS == ["startup kernel-test", "shutdown", "at shutdown: {'orders': 2}"]
    messages = [r.getMessage() for r in caplog.records]
    listening = next(i for i, m in enumerate(messages) if "listening on" in m)
    assert listening < next(i for i, m in enumerate(messages) if m.startswith("action 'hello': success"))
    # The deletes reached the journal (synced at close): a restart rebuilds the transient SOW without them.
    assert len(journal_deletes(tmp_path / "journal")) == 2
    again = make_broker(tmp_path)
    try:
        assert again.engine.sow_topics["orders"].count() == 2
    finally:
        await again.aclose()


async def test_graceful_shutdown_runs_the_actions_while_serving_once(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, SHUTDOWN)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        await broker.shutdown_actions()  # what the CLI does on SIGTERM, before cancelling
        assert EVENTS == ["shutdown", "at shutdown: {'orders': 0}"]
        assert broker.statistics().actions["bye"].runs == 1
        nursery.cancel_scope.cancel()
    assert EVENTS == ["shutdown", "at shutdown: {'orders': 0}"]  # not again in serve's finally


async def test_no_shutdown_actions_when_start_up_failed(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, SHUTDOWN + """<Action><On><Module>amps-action-on-admin</Module>
      <Options><Path>x</Path></Options></On><Do><Module>test-note</Module></Do></Action>
      <Action><On><Module>amps-action-on-admin</Module><Options><Path>x</Path></Options></On>
      <Do><Module>test-note</Module></Do></Action>""", admin=True)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.serve)
    errors = [e for e in _leaves(caught.value) if isinstance(e, ActionError)]
    assert len(errors) == 1
    assert str(errors[0]) == (f"action 'action-3' ({tmp_path / 'config.xml'}:12: /AMPSConfig/Actions/Action[3]/On): "
                              "amps-action-on-admin could not start: Path 'x' is already served by another "
                              "action; give each amps-action-on-admin its own Path")
    assert EVENTS == []


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def test_a_step_can_ask_the_broker_to_stop(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, """<Action><On><Module>amps-action-on-startup</Module></On>
      <Do><Module>test-note</Module><Options><Text>x</Text><Stop>disk above 95%</Stop></Options></Do></Action>""")
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        with trio.fail_after(5):
            await broker.stop_requested.wait()
        assert broker.stop_reason == "disk above 95%"
        nursery.cancel_scope.cancel()


async def test_shutdown_actions_have_a_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    import broker.server.kernel as kernel

    monkeypatch.setattr(kernel, "SHUTDOWN_ACTIONS_DEADLINE", 0.3)
    broker = make_broker(tmp_path, """<Action><On><Module>amps-action-on-shutdown</Module></On>
      <Do><Module>test-note</Module><Options><Text>hung</Text><Sleep>3600</Sleep></Options></Do></Action>""")
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - began < 5
    assert EVENTS == ["hung"]
    assert any("the on-shutdown actions did not finish within 0s; stopping without them" in r.getMessage()
               for r in caplog.records)
    assert broker.actions.statistics()["action-1"].outcomes.failure == 1  # counted as cut short


async def test_a_rest_action_without_admin_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = make_broker(tmp_path, """<Action><On><Module>amps-action-on-admin</Module>
      <Options><Path>archive</Path><Name>Archive</Name></Options></On><Do><Module>test-note</Module></Do></Action>""")
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        nursery.cancel_scope.cancel()
    assert any(r.levelno == logging.WARNING and "action 'Archive' (Path archive): no <Admin> is configured, so it "
               "cannot be requested; add <Admin><InetAddr>8085</InetAddr></Admin>" in r.getMessage()
               for r in caplog.records)
