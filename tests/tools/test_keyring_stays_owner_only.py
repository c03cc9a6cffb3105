"""Keyrings stay owner-only and their keys are never printed: `rsm keyring new|add|list` writes mode 600,
never overwrites a keyring or a key id, refuses to list a keyring others can read, and the RSM warns once
about such a keyring.
"""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

from cli_runs import one_line, rsm


def test_a_keyring_others_can_read_is_warned_about_once(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    from rsm.config.keyring import Keyring, generate_key

    path = tmp_path / "keyring.json"
    path.write_text(json.dumps({"k1": generate_key()}))
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="rsm.config.keyring"):
        Keyring(path)
        Keyring(path)
    warnings = [r.getMessage() for r in caplog.records if r.name == "rsm.config.keyring"]
    assert len(warnings) == 1 and "chmod 600" in warnings[0] and "mode 644" in warnings[0]
    assert generate_key()[:8] not in warnings[0]
    caplog.clear()
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="rsm.config.keyring"):
        Keyring(tmp_path / "keyring.json")
    assert not [r for r in caplog.records if r.name == "rsm.config.keyring"]


def test_keyring_command_writes_owner_only_and_never_prints_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "keyring.json"
    path.parent.mkdir()
    done = rsm("keyring", "new", str(path))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert rsm("keyring", "add", str(path), "k2").returncode == 0
    keys = json.loads(path.read_text())
    assert sorted(keys) == ["k1", "k2"] and stat.S_IMODE(path.stat().st_mode) == 0o600
    listed = rsm("keyring", "list", str(path))
    assert listed.stdout == "k1\nk2\n"
    printed = done.stdout + done.stderr + listed.stdout + listed.stderr
    assert not any(key in printed for key in keys.values())
    from rsm.config.keyring import Keyring

    assert Keyring(path).key_ids() == ["k1", "k2"]
    one_line(rsm("keyring", "new", str(path)), "exists")  # never overwritten
    one_line(rsm("keyring", "add", str(path), "k2"), "already in")
    path.chmod(0o640)
    one_line(rsm("keyring", "list", str(path)), "chmod 600")
