"""docs/examples/custom_keygen.py works as documented, loaded by .py file and by dotted path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from broker.errors import ConfigError, KeyGenerationError
from broker.options import OptionError
from broker.plugins import build_plugin_manager
from broker.sow.keys import KeyGenerator, KeySpec
from broker.testing import DictMessage, KeyGeneratorConformance

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
EXAMPLE = EXAMPLES / "custom_keygen.py"


def spec(**options: str) -> KeySpec:
    return KeySpec(topic="orders", key_domain="orders", key_fields=("/id", "/region"), options=options)


def check_keys(factory: type) -> None:
    message = DictMessage({"id": "a-17", "region": "eu", "qty": 5})
    assert factory(spec()).generate(message) == "A-17|EU"
    assert factory(spec(Separator=";")).generate(message) == "A-17;EU"


def test_loaded_by_py_file() -> None:
    pm = build_plugin_manager(modules=[("upper", str(EXAMPLE))])
    assert dict(pm.plugins())["upper"] == f"<Modules> {EXAMPLE}"
    check_keys(pm.key_generators.get("upper"))


def test_loaded_by_py_file_relative_to_config_dir() -> None:
    pm = build_plugin_manager(modules=[("upper", "examples/custom_keygen.py")], base_dir=EXAMPLES.parent)
    check_keys(pm.key_generators.get("upper"))


def test_loaded_by_dotted_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "custom_keygen", raising=False)
    pm = build_plugin_manager(modules=[("upper", "custom_keygen")])
    check_keys(pm.key_generators.get("upper"))


@pytest.mark.parametrize(("body", "message"), [
    ({"id": "a"}, "'/region'"),
    ({"id": "a,b", "region": "eu"}, "without ','"),
    ({"id": "a|b", "region": "eu"}, "'|'"),
    ({"id": "é", "region": "eu"}, "printable ASCII"),
])
def test_bad_values_are_key_generation_errors(body: dict[str, str], message: str) -> None:
    generator = build_plugin_manager(modules=[("upper", str(EXAMPLE))]).key_generators.get("upper")(spec())
    with pytest.raises(KeyGenerationError, match=message):
        generator.generate(DictMessage(body))


@pytest.mark.parametrize(("options", "message"), [
    ({"Separator": ","}, r"option <Separator>: ',' must be one printable ASCII character other than ','"),
    ({"Separator": "--"}, r"option <Separator>: '--' must be one printable"),
    ({"Sep": "|"}, r"unknown option <Sep> \(accepted: Separator\)"),
])
def test_bad_options_name_the_generator_and_the_option(options: dict[str, str], message: str) -> None:
    factory = build_plugin_manager(modules=[("upper", str(EXAMPLE))]).key_generators.get("upper")
    with pytest.raises(OptionError, match=message) as info:
        factory(spec(**options))
    assert str(info.value).startswith("key generator 'upper' of topic 'orders'")


def test_no_key_fields_is_a_config_error() -> None:
    factory = build_plugin_manager(modules=[("upper", str(EXAMPLE))]).key_generators.get("upper")
    with pytest.raises(ConfigError, match="at least one <Key>"):
        factory(KeySpec(topic="orders", key_domain="orders", key_fields=()))


def test_declares_its_options_for_broker_check() -> None:
    registration = build_plugin_manager(modules=[("upper", str(EXAMPLE))]).key_generators.registration("upper")
    assert registration.options is not None and registration.options.names() == ["Separator"]


class TestExampleConformance(KeyGeneratorConformance):
    """The example passes the same suite as the built-ins, as docs/plugins.md promises."""

    key_fields = ("/id", "/region")

    def make_key_generator(self, spec: KeySpec) -> KeyGenerator:
        factory = build_plugin_manager(modules=[("upper", str(EXAMPLE))], entry_points=False)
        return factory.key_generators.get("upper")(spec)
