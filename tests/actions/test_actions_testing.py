"""broker.testing's action helpers catch what they claim to: the conformance suites fail on broken plugins,
and FakeHost answers as the broker does."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

import pytest

from broker import hookimpl
from broker.actions import ActionError, RunContext, Step
from broker.options import Option, OptionSet, interval
from broker.testing import FakeHost, StepConformance, check_gate, run_step


def plugin_with(name: str, step: type, options: OptionSet | None) -> ModuleType:
    module = ModuleType(f"plugin_{name.replace('-', '_')}")

    @hookimpl
    def broker_register_actions(registry) -> None:  # noqa: ANN001
        registry.add(name, step, options=options)

    module.broker_register_actions = broker_register_actions  # type: ignore[attr-defined]
    return module


class Eager(Step):
    """Parses its options in the factory: a {{VARIABLE}} there breaks start-up."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.age = interval(options["Age"])

    async def run(self, ctx: RunContext) -> str:
        return f"age {self.age}"


class Silent(Step):
    def __init__(self, options: Mapping[str, str]) -> None:
        pass

    async def run(self, ctx: RunContext) -> str:
        return ""


AGE = OptionSet(Option("Age", interval, required=True, doc="how old"))


def suite(step: type, options: OptionSet | None, **attributes: object) -> StepConformance:
    cls = type("TestIt", (StepConformance,), {"plugin": plugin_with("x-step", step, options), "name": "x-step",
                                              "options": {"Age": "1d"}, **attributes})
    return cls()


def test_a_factory_that_parses_variables_eagerly_fails_the_suite() -> None:
    with pytest.raises(ValueError, match="'{{SOME_VARIABLE}}' is not an interval"):
        suite(Eager, AGE).test_the_factory_accepts_variables_in_any_option()
    suite(Eager, AGE).test_a_run_succeeds_and_says_what_it_did()  # the rest is fine


def test_undeclared_or_undocumented_options_fail_the_suite() -> None:
    with pytest.raises(AssertionError, match="pass options=OptionSet"):
        suite(Silent, None).test_options_are_declared_and_documented()
    with pytest.raises(AssertionError, match=r"give these options a doc: \['Age'\]"):
        suite(Silent, OptionSet(Option("Age", interval))).test_options_are_declared_and_documented()


def test_a_step_that_says_nothing_fails_the_suite() -> None:
    with pytest.raises(AssertionError, match="return one line saying what was done"):
        suite(Silent, AGE).test_a_run_succeeds_and_says_what_it_did()


def test_failing_options_must_fail() -> None:
    with pytest.raises(AssertionError):
        suite(Silent, AGE, failing_options={"Age": "2d"}).test_a_failure_is_reported_not_raised()
    suite(Silent, AGE, failing_options={"Age": "{{NOT_SET}}"}).test_a_failure_is_reported_not_raised()


async def test_run_step_refuses_options_broker_check_would_refuse() -> None:
    with pytest.raises(Exception, match="option <Age> is required"):
        await run_step(plugin_with("x-step", Silent, AGE), "x-step", {})
    with pytest.raises(TypeError, match="'x-step' built a Silent, not a Gate"):
        await check_gate(plugin_with("x-step", Silent, AGE), "x-step", {"Age": "1d"})


async def test_fake_host_matches_topics_and_checks_filters_as_the_broker_does() -> None:
    host = FakeHost(sow={"orders": "json", "orders-eu": "json", "quotes": "xml"}, delete_counts={"orders": 3})
    assert await host.delete_sow("orders.*", "JSON", "/status = 'closed'") == {"orders": 3, "orders-eu": 0}
    assert host.deletes == [("orders.*", "JSON", "/status = 'closed'")]
    with pytest.raises(ActionError, match=r"no SOW topic of MessageType 'xml' matches Topic 'orders'; SOW topics: "
                                          r"orders \(json\), orders-eu \(json\), quotes \(xml\)"):
        await host.delete_sow("orders", "xml", "1 = 1")
    with pytest.raises(ActionError, match="a Filter is required"):
        await host.delete_sow("orders", None, "  ")
    with pytest.raises(ActionError, match="Filter '/a = ': "):
        await host.delete_sow("orders", None, "/a = ")
    assert host.deletes == [("orders.*", "JSON", "/status = 'closed'")]  # refused deletes are not recorded
    assert await host.compact_sow(None, None) == ["orders", "orders-eu", "quotes"]
    assert await host.compact_sow("quotes", "xml") == ["quotes"]
    host.request_shutdown("disk full")
    assert host.shutdown_requests == ["disk full"]
