"""tests/faults: crash-point tests (issue 13). The harness is ``crash_harness.py`` next to this file."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib puts no test directory on sys.path: make the harness importable by name.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
