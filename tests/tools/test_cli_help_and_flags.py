"""The command line as a newcomer meets it: help without doc markup, `--json` where a list is printed,
`--debug` that shows our traceback without every SDK's wire log, and a word before a long build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rsm.cli.main import main

COMMANDS = ["keyring", "topic-config", "dump-log", "spark", "store", "migrate", "quickstart", "bridge"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_no_doc_markup(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:`" not in text and ":class:`" not in text, text


def test_keyring_list_prints_json_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keyring.json"
    assert main(["keyring", "new", str(path), "--key-id", "k1"]) == 0
    assert main(["keyring", "add", str(path), "k2"]) == 0
    capsys.readouterr()
    assert main(["keyring", "list", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(path), "key_ids": ["k1", "k2"]}


def test_debug_shows_the_traceback_without_the_sdks_wire_log(tmp_path: Path) -> None:
    """A refused S3 connection under --debug: our traceback, not botocore's hundreds of DEBUG lines."""
    props = tmp_path / "s3.properties"
    props.write_text(
        "rsm.config.storage.backend=s3\nrsm.config.storage.s3.endpoint.url=http://127.0.0.1:9\n"
        "rsm.config.storage.s3.region=us-east-1\nrsm.config.storage.s3.retry.max.attempts=1\n"
        "rsm.config.bucket=nowhere\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    done = subprocess.run([sys.executable, "-m", "rsm.cli.main", "--debug", "store", "--config", str(props), "du"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert not [line for line in lines if " DEBUG botocore" in line or " DEBUG urllib3" in line], lines[:20]
    assert len(lines) < 150, len(lines)
