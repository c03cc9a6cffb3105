"""Where the suite's files are: the tests folder, its feature folders and the checkout.

The tests are grouped in one folder per feature; a few import a sibling's fixtures or helpers by module name (the
bridge tests host ``test_bridge_server:MemoryRSM`` in a child process, for one), so the conftest and every child
process that imports test code put all of them on the import path.
"""

from __future__ import annotations

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent
FEATURES = ("format", "rsm", "store", "broker", "spark", "migrate", "tools")
FEATURE_DIRS = tuple(TESTS_DIR / name for name in FEATURES)
