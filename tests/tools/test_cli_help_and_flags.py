"""The command line as a newcomer meets it: help without doc markup, `--json` where a list is printed,
`--debug` that shows our traceback without every SDK's wire log, a word before a long build, `--version`,
README naming every subcommand, and `build-plugin --force` that really rebuilds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runs import REPO, rsm

from rsm.cli.console import PIPE_WIDTH, out_console
from rsm.cli.main import SUBCOMMANDS, main

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


def test_version() -> None:
    done = rsm("--version")
    assert done.returncode == 0 and re.fullmatch(r"rsm \(kafka-tiered-rsm\) \S+\n", done.stdout)


def test_readme_names_every_subcommand_the_fixtures_and_the_keyring_command() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme[readme.index("## Layout") :].split("\n## ", 1)[0]
    tools = readme[readme.index("## Tools") :].split("\n## ", 1)[0]
    for command in SUBCOMMANDS:
        assert f"`{command}`" in layout, command
        assert f"`rsm {command}" in tools, command
    assert "../shared" in readme
    assert "rsm keyring new" in readme


def test_build_plugin_force_really_rebuilds(tmp_path: Path, monkeypatch) -> None:
    """Maven's `package` keeps an up-to-date jar as it is; --force must give a new one."""
    from rsm.cli.bridge import build_plugin, plugin_jar_path

    jvm = tmp_path / "jvm"
    (jvm / "src").mkdir(parents=True)
    (jvm / "pom.xml").write_text("<project/>")
    (jvm / "src" / "A.java").write_text("class A {}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(  # a stand-in with Maven's behaviour: package is a no-op on a fresh jar, clean removes it
        "#!/bin/sh\n"
        f'jar="{plugin_jar_path(jvm)}"\n'
        'for a in "$@"; do [ "$a" = clean ] && rm -rf "$(dirname "$jar")"; done\n'
        '[ -f "$jar" ] || { mkdir -p "$(dirname "$jar")"; date +%s%N > "$jar"; }\n'
    )
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    jar = build_plugin(jvm)
    first = jar.read_text()
    assert build_plugin(jvm).read_text() == first  # fresh: not rebuilt
    time.sleep(0.01)
    assert build_plugin(jvm, force=True).read_text() != first


def test_a_piped_table_keeps_every_name_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """Piped into a file there is no terminal width to fit: a table's long topic name and id stay whole on
    their row (`rsm store du > usage.txt`), not folded or cut with an ellipsis."""
    from rich.table import Table

    name = "orders." + "x" * 240
    table = Table("topic", "topic id", "bytes")
    table.add_row(name, "AAAAAAAAAAAAAAAAAAAAAQ", "1,234")
    console = out_console()
    assert not console.is_terminal and console.width == PIPE_WIDTH
    console.print(table)
    rows = [line for line in capsys.readouterr().out.splitlines() if name in line]
    assert len(rows) == 1 and "AAAAAAAAAAAAAAAAAAAAAQ" in rows[0] and "…" not in rows[0]
