"""docs/plugins.md cannot drift from the code: its examples are excerpts of files under docs/examples/.

The convention: the paragraph just above a ```python block links the file it comes from
(``[`docs/examples/x.py`](examples/x.py)``; the last such link when there are several); ``# ...`` lines mark what the excerpt leaves out. Each part
between those marks must be in the file, verbatim and in order. A block that registers something (a
``@hookimpl`` or ``registry.add(``) must name its file. The files themselves are loaded through the config
by other tests (tests/keygen/test_keygen_docs_example.py, tests/plugins/test_plugins_options.py,
tests/e2e/test_e2e_storage_choice.py); the conformance example is run here, as its docstring says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugins.md"
EXAMPLES = ROOT / "docs" / "examples"

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_SOURCE = re.compile(r"\]\(examples/([\w./-]+\.py)\)")
_ELISION = re.compile(r"^\s*# \.\.\.\s*$", re.M)


@dataclass(frozen=True)
class Block:
    """A python code block of the page."""

    line: int
    heading: str
    source: str | None
    code: str

    @property
    def registers(self) -> bool:
        return "@hookimpl" in self.code or "registry.add(" in self.code

    def parts(self) -> list[str]:
        """The excerpt's pieces between ``# ...`` lines, without surrounding blank lines."""
        return [p.strip("\n") for p in _ELISION.split(self.code) if p.strip()]


def blocks() -> list[Block]:
    text = DOC.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].splitlines()
        lead = text[:match.start()].rstrip("\n").rsplit("\n\n", 1)[-1]  # the paragraph just above
        heading = next((line.lstrip("# ") for line in reversed(before) if line.startswith("#")), "")
        sources = _SOURCE.findall(lead)
        found.append(Block(line=len(before) + 1, heading=heading, source=sources[-1] if sources else None,
                           code=match.group(1)))
    return found


def case(block: Block) -> Any:
    """A test parameter, named by the block's line on the page."""
    return pytest.param(block, id=f"line{block.line}")


def test_the_page_has_sourced_examples() -> None:
    sourced = {b.source for b in blocks() if b.source}
    assert {"custom_keygen.py", "counting_storage.py", "test_example_plugins.py"} <= sourced


@pytest.mark.parametrize("block", [case(b) for b in blocks() if b.registers])
def test_every_registering_example_names_its_file(block: Block) -> None:
    assert block.source is not None, (
        f"docs/plugins.md:{block.line} ({block.heading}) registers a plugin but does not say which file under "
        "docs/examples/ it comes from: put the file there and link it in the paragraph above the block, "
        "e.g. From [`docs/examples/x.py`](examples/x.py):")


@pytest.mark.parametrize("block", [case(b) for b in blocks() if b.source])
def test_every_excerpt_is_in_its_file_in_order(block: Block) -> None:
    assert block.source is not None
    path = EXAMPLES / block.source
    assert path.is_file(), f"docs/plugins.md:{block.line} names {path}, which does not exist"
    text = path.read_text()
    at = 0
    for part in block.parts():
        found = text.find(part, at)
        assert found >= 0, (f"docs/plugins.md:{block.line}: this part of the example is not in "
                            f"docs/examples/{block.source} (after what came before it):\n{part}")
        at = found + len(part)


def test_excerpt_check_catches_a_drift() -> None:
    """The check itself: an edited line is not found, nor parts out of their file's order."""
    block = next(b for b in blocks() if b.source == "counting_storage.py" and b.registers)
    text = (EXAMPLES / "counting_storage.py").read_text()
    part = next(p for p in block.parts() if "self.reads += 1" in p)
    assert part in text
    assert part.replace("self.reads += 1", "self.reads += 2") not in text
    first, last = block.parts()[0], block.parts()[-1]
    assert text.find(first, text.find(last)) < 0


def test_the_conformance_example_passes_as_documented() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(EXAMPLES / "test_example_plugins.py")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert re.search(r"\b\d+ passed", out.stdout)
