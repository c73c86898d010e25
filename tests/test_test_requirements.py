"""The suite's own prerequisite check (tests/conftest.py): a package of the test extra that is missing, or
installed outside its bounds, is named, so the run stops instead of skipping."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

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




def test_what_an_extra_adds_is_required_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pkg[fast]`` needs what the ``fast`` extra adds (as ``redis[hiredis]`` needs hiredis)."""
    dist = tmp_path / "site" / "broker_fake_dist-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broker-fake-dist\nVersion: 1.0\n"
                                   "Provides-Extra: fast\n"
                                   'Requires-Dist: no-such-speedup-for-broker>=2; extra == "fast"\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.optional-dependencies]\n'
                         'test = ["broker-fake-dist>=1.0", "broker-fake-dist[fast]>=1.0"]\n')
    assert _conftest().missing_test_requirements(pyproject) == [
        'no-such-speedup-for-broker>=2; extra == "fast" (not installed)']
