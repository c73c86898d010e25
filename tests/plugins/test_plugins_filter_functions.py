"""docs/examples/filter_functions.py works as documented: loaded through <Modules>, used in filters."""

from __future__ import annotations

from pathlib import Path

from broker.plugins import build_plugin_manager
from broker.testing.process import BrokerProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "filter_functions.py"


def test_registers_its_functions_case_insensitively() -> None:
    pm = build_plugin_manager(modules=[("my-functions", str(EXAMPLE))])
    assert pm.filter_functions.get("twice")(21) == 42
    assert pm.filter_functions.get("TWICE")(None) is None
    assert pm.filter_functions.get("Initials")("ada  lovelace") == "AL"
    assert pm.filter_functions.get("INITIALS")(7) is None


def test_filters_with_the_functions_from_the_official_client(tmp_path: Path) -> None:
    import AMPS as amps
    modules = f"<Module><Name>my-functions</Name><Library>{EXAMPLE}</Library></Module>"
    sow = ("<Topic><Name>people</Name><MessageType>json</MessageType><Key>/id</Key>"
           "<FileName>./sow/%n.sow</FileName></Topic>")
    with BrokerProcess.from_xml(tmp_path, modules=modules, sow=sow) as broker:
        client = amps.Client("filter-functions")
        client.connect(broker.uri)
        client.logon(5000)
        try:
            for i, (name, qty) in enumerate([("ada lovelace", 4), ("alan turing", 7), ("grace hopper", 9)]):
                client.publish("people", f'{{"id": {i}, "name": "{name}", "qty": {qty}}}')

            def query(flt: str) -> list[str]:
                return sorted(m.get_data() for m in client.sow("people", flt, timeout=5000)
                              if m.get_command() == "sow")

            assert [d for d in query("TWICE(/qty) > 10")] == [
                '{"id": 1, "name": "alan turing", "qty": 7}', '{"id": 2, "name": "grace hopper", "qty": 9}']
            assert query("initials(/name) = 'AL'") == ['{"id": 0, "name": "ada lovelace", "qty": 4}']
            assert query("INITIALS(/missing) = 'AL'") == []
        finally:
            client.close()
