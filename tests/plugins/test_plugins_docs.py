"""docs/plugins.md documents every hook (datasette's rule: an undocumented hook fails the build)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def hooks() -> list[Callable[..., Any]]:
    return [fn for name, fn in vars(hookspecs).items() if name.startswith("broker_") and hasattr(fn, "broker_spec")]


def signature_text(fn: Callable[..., Any]) -> str:
    """``name(arg: Type, ...) -> Return`` as written in the hookspec (annotations are strings there)."""
    sig = inspect.signature(fn)
    params = ", ".join(
        p.name if p.annotation is inspect.Parameter.empty else f"{p.name}: {p.annotation}"
        for p in sig.parameters.values()
    )
    return f"{fn.__name__}({params}) -> {sig.return_annotation}"


def prose(text: str) -> str:
    """``text`` with the content of fenced code blocks blanked (a ``# comment`` there is not a heading)."""
    return re.sub(r"^```.*?^```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S | re.M)


def headings() -> list[str]:
    return [line for line in prose(DOC.read_text()).splitlines() if line.startswith("#")]


def test_there_are_hooks_to_document() -> None:
    assert len(hooks()) >= 4


@pytest.mark.parametrize("hook", hooks(), ids=lambda fn: fn.__name__)
def test_every_hook_has_a_section_headed_by_its_signature(hook: Callable[..., Any]) -> None:
    expected = signature_text(hook)
    assert any(expected in heading for heading in headings()), f"docs/plugins.md needs a '### `{expected}`'"


def test_every_hook_section_has_an_example() -> None:
    text = DOC.read_text()
    for hook in hooks():
        start = text.index(f"### `{signature_text(hook)}`")
        section = text[start:prose(text).find("\n#", start)]
        assert f"def {hook.__name__}(registry" in section, f"the {hook.__name__} section needs an example"


def test_python_examples_compile() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        compile(block, str(DOC), "exec")


def test_no_section_for_a_hook_that_does_not_exist() -> None:
    names = {fn.__name__ for fn in hooks()}
    documented = {m for h in headings() for m in re.findall(r"`(broker_\w+)\(", h)}
    assert documented == names


@pytest.mark.parametrize(("kind", "name"), [("key_generators", "default"), ("key_generators", "chaining"),
                                            ("storage_engines", "memory"), ("storage_engines", "leveldb")])
def test_every_builtin_option_is_documented_in_its_section(kind: str, name: str) -> None:
    from broker.plugins import build_plugin_manager

    declared = getattr(build_plugin_manager(), kind).registration(name).options
    assert declared is not None, f"the built-in {name!r} should declare its options (an OptionSet)"
    text = DOC.read_text()
    start = text.index(f"### Built-in: `{name}`")
    section = text[start:prose(text).find("\n#", start + 1)]
    missing = [option for option in declared.names() if f"`{option}`" not in section]
    assert not missing, f"docs/plugins.md, Built-in: `{name}`, does not document {', '.join(missing)}"
    if not declared.names():
        assert "No options" in section
