"""tests/server: in-process broker tests. ``engine_fakes.py`` next to this file holds what they share."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib puts no test directory on sys.path: make the shared module importable by name.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
