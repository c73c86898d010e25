"""The plugin manager: entry points, <Modules>, misspelled hooks, duplicates, unknown names."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import broker
from broker.errors import PluginError
from broker.plugins import PluginManager, build_plugin_manager
from broker.sow.storage import StorageSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"
BUILTINS = {
    "keygen-default": ("key_generators", "default"),
    "keygen-chaining": ("key_generators", "chaining"),
    "storage-memory": ("storage_engines", "memory"),
    "storage-leveldb": ("storage_engines", "leveldb"),
}


def fixture(name: str) -> str:
    return str(FIXTURES / f"fixture_{name}_plugin.py")


# -- built-ins through entry points ------------------------------------------------------------------
def test_builtins_are_found_through_entry_points() -> None:
    pm = PluginManager().collect()
    sources = dict(pm.plugins())
    for plugin, (registry, name) in BUILTINS.items():
        assert sources[plugin] == f"entry point of broker {broker.__version__}"
        registration = next(r for r in getattr(pm, registry) if r.name == name)
        assert registration.plugin == plugin
        assert registration.source.startswith("entry point of broker ")
        assert registration.description
    assert {"default", "chaining"} <= set(pm.key_generators.names())
    assert {"memory", "leveldb"} <= set(pm.storage_engines.names())


def test_builtin_factories_are_the_plugin_classes() -> None:
    from broker_plugins.keygen.chaining import ChainingKeyGenerator
    from broker_plugins.keygen.default import DefaultKeyGenerator
    from broker_plugins.storage.leveldb import LevelDBStorage
    from broker_plugins.storage.memory import MemoryStorage

    pm = build_plugin_manager()
    assert pm.key_generators.get("default") is DefaultKeyGenerator
    assert pm.key_generators.get("chaining") is ChainingKeyGenerator
    assert pm.storage_engines.get("memory") is MemoryStorage
    assert pm.storage_engines.get("leveldb") is LevelDBStorage


def test_without_entry_points_nothing_is_registered() -> None:
    pm = build_plugin_manager(entry_points=False)
    assert pm.plugins() == []
    assert pm.key_generators.names() == []


# -- a third-party plugin advertised only by an entry point ------------------------------------------
def _install_entry_point(site: Path, *, dist: str, module: str, ep_name: str, source: str) -> None:
    """Write what pip would: the module plus a *.dist-info with METADATA and entry_points.txt."""
    shutil.copy(source, site / f"{module}.py")
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[broker]\n{ep_name} = {module}\n")


def test_plugin_installed_only_as_an_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_entry_point(tmp_path, dist="broker-ep-sample", module="broker_fixture_ep_sample",
                         ep_name="ep-sample", source=fixture("ep"))
    assert "ep-sample" not in build_plugin_manager().key_generators  # not installed yet
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = build_plugin_manager()
    assert dict(pm.plugins())["ep-sample"] == "entry point of broker-ep-sample 1.0"
    registration = next(r for r in pm.key_generators if r.name == "ep-sample")
    assert registration.source == "entry point of broker-ep-sample 1.0"
    assert {"default", "chaining", "ep-sample"} <= set(pm.key_generators.names())


def test_entry_point_that_fails_to_import_names_plugin_and_distribution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken_src.py"
    broken.write_text("raise ImportError('needs libfoo')\n")
    _install_entry_point(tmp_path, dist="broker-broken", module="broker_fixture_broken",
                         ep_name="broken-ep", source=str(broken))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'broken-ep'.*broker-broken 1\.0.*needs libfoo"):
        PluginManager()


# -- plugins loaded only through <Modules> -----------------------------------------------------------
def test_module_loaded_by_py_file() -> None:
    pm = build_plugin_manager(modules=[("sample", fixture("modules"))])
    assert "modules-sample" in pm.storage_engines
    assert dict(pm.plugins())["sample"] == f"<Modules> {fixture('modules')}"
    assert pm.filter_functions.get("twice")(21) == 42  # filter function names are case-insensitive


def test_module_loaded_by_py_file_relative_to_base_dir() -> None:
    pm = build_plugin_manager(modules=[("sample", "fixture_modules_plugin.py")], base_dir=FIXTURES)
    assert "modules-sample" in pm.storage_engines


def test_module_loaded_by_dotted_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.delitem(sys.modules, "fixture_modules_plugin", raising=False)
    pm = build_plugin_manager(modules=[("sample", "fixture_modules_plugin")])
    assert dict(pm.plugins())["sample"] == "<Modules> fixture_modules_plugin"
    assert "modules-sample" in pm.storage_engines
    storage = pm.storage_engines.get("modules-sample")(StorageSpec(topic="t"))
    storage.write(puts=[(b"k", b"v")])
    assert storage.count() == 1


def test_modules_plugin_is_not_an_entry_point() -> None:
    assert "modules-sample" not in build_plugin_manager().storage_engines


def test_missing_module_file_is_a_plugin_error(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"does not exist.*<Library>"):
        build_plugin_manager(modules=[("gone", str(tmp_path / "nope.py"))])


def test_unimportable_dotted_path_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match=r"Cannot import module 'no_such_broker_plugin_module'"):
        build_plugin_manager(modules=[("gone", "no_such_broker_plugin_module")])


def test_module_file_that_raises_on_import_is_a_plugin_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("1 / 0\n")
    with pytest.raises(PluginError, match=r"bad_plugin\.py.*failed to import.*ZeroDivisionError"):
        build_plugin_manager(modules=[("bad", str(bad))])


# -- contract violations -----------------------------------------------------------------------------
def test_misspelled_hook_fails_at_load_naming_the_plugin() -> None:
    with pytest.raises(PluginError) as info:
        build_plugin_manager(modules=[("typo", fixture("misspelled"))])
    message = str(info.value)
    assert "Plugin 'typo'" in message
    assert "broker_register_key_generator" in message
    assert "broker_register_key_generators" in message  # the known hooks are listed


def test_hook_with_wrong_arguments_fails_at_load() -> None:
    with pytest.raises(PluginError, match=r"Plugin 'sig'.*invalid"):
        build_plugin_manager(modules=[("sig", fixture("bad_signature"))])


def test_duplicate_name_names_both_plugins() -> None:
    with pytest.raises(PluginError) as info:
        build_plugin_manager(modules=[("dup", fixture("duplicate"))])
    message = str(info.value)
    assert "key generator 'default' is registered twice" in message
    assert "'keygen-default'" in message and "entry point of broker" in message
    assert "'dup'" in message and "fixture_duplicate_plugin.py" in message


def test_same_file_loaded_under_two_names_is_a_duplicate() -> None:
    with pytest.raises(PluginError, match="'modules-sample' is registered twice") as info:
        build_plugin_manager(modules=[("one", fixture("modules")), ("two", fixture("modules"))])
    assert "plugin 'one'" in str(info.value)
    assert "plugin 'two'" in str(info.value)


def test_two_plugins_with_one_name_are_rejected() -> None:
    with pytest.raises(PluginError, match=r"Two plugins are named 'x'"):
        build_plugin_manager(modules=[("x", fixture("modules")), ("x", fixture("duplicate"))])


def test_failing_registration_hook_names_plugin_and_hook() -> None:
    with pytest.raises(PluginError, match=r"Plugin 'fails' failed in broker_register_actions.*boom"):
        build_plugin_manager(modules=[("fails", fixture("failing"))])


def test_unknown_name_lists_installed_ones() -> None:
    pm = build_plugin_manager()
    with pytest.raises(PluginError) as info:
        pm.key_generators.get("crc32c", where="Topic 'orders' (config.xml:14)")
    message = str(info.value)
    assert "Unknown key generator 'crc32c' in Topic 'orders' (config.xml:14)" in message
    assert "Installed: chaining, default" in message
    with pytest.raises(PluginError, match=r"Installed: leveldb, memory"):
        pm.storage_engines.get("rocksdb")


def test_registering_after_collect_is_refused() -> None:
    pm = build_plugin_manager()
    with pytest.raises(PluginError, match="after the registries were built"):
        pm.load_module("late", fixture("modules"))


# -- registration order and re-registration ------------------------------------------------------------
def test_registration_hooks_run_in_registration_order() -> None:
    with pytest.raises(PluginError) as info:
        build_plugin_manager(modules=[("dup", fixture("duplicate"))])
    message = str(info.value)
    # The first registrant (the built-in entry point) is the one already holding the name.
    assert message.index("'keygen-default'") < message.index("'dup'")


def test_builtin_module_named_in_modules_is_refused_naming_both() -> None:
    with pytest.raises(PluginError, match="keygen-chaining"):
        build_plugin_manager(modules=[("key-chaining", "broker_plugins.keygen.chaining")])
