"""README's table of settings is the one generated from `rsm.config.settings.SETTINGS`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rsm.config.reference import END, START, replace_table, settings_table
from rsm.config.settings import SETTINGS

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_holds_the_generated_settings_table() -> None:
    text = README.read_text()
    assert START in text and END in text, "README has no generated settings table"
    assert replace_table(text) == text, (
        "README's settings table is stale: python -m rsm.config.reference --write README.md"
    )


def test_the_table_names_every_setting_with_its_default() -> None:
    table = settings_table()
    for s in SETTINGS:
        assert f"| `{s.name}` |" in table
    assert "| `storage.s3.endpoint.url` | (unset) |" in table
    assert "| `bucket` | `kafka-tiered-storage` | `unchecked.rsm.bucket` |" in table
    done = subprocess.run(
        [sys.executable, "-m", "rsm.config.reference"], capture_output=True, text=True, check=True
    )
    assert done.stdout == table
