"""The suite's own prerequisite check (tests/conftest.py): a package of the test extra that is missing, or
installed outside its bounds, is named, so the run stops instead of skipping."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT_CONFTEST = Path(__file__).parent / "conftest.py"


def _conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("root_conftest_under_test", ROOT_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_and_out_of_bounds_packages_are_named(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.optional-dependencies]\n'
                         'test = ["pytest>=8.0", "no-such-package-for-broker>=1.0", "trio<0.1"]\n')
    problems = _conftest().missing_test_requirements(pyproject)
    assert len(problems) == 2
    assert problems[0] == "no-such-package-for-broker>=1.0 (not installed)"
    assert problems[1].startswith("trio<0.1 (") and problems[1].endswith(" installed)")

