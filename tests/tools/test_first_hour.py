"""Issue 16: the product as a new operator meets it in its first hour.

Each mistake is one line naming what is wrong (never a traceback, never log spam); quickstart never
deletes what it did not make; keyrings are made owner-only and their keys never printed; the README
tells what a fresh clone needs; `--version`, `build-plugin --force`, tables that fit a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsm.cli.main import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def rsm(
    *args: str, env: dict[str, str | None] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`rsm ...` in its own process, as an operator runs it."""
    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command failed with exactly one line on stderr holding every expected fragment."""
    assert done.returncode != 0, done.stdout[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    return lines[0]


def properties(path: Path, **configs: str) -> Path:
    path.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))
    return path


# -- quickstart: never delete what we did not create --------------------------------------------------


def test_quickstart_refuses_a_directory_it_did_not_make(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "mine"
    work.mkdir()
    (work / "thesis.tex").write_text("years of work")
    (work / "store").mkdir()  # a name the quickstart uses, but not made by it
    (work / "store" / "data.bin").write_bytes(b"x")
    assert main(["quickstart", "--dir", str(work), "--records", "50", "--no-spark"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not empty" in err[0] and "nothing is deleted" in err[0]
    assert (work / "thesis.tex").read_text() == "years of work" and (work / "store" / "data.bin").exists()


def test_quickstart_dot_keeps_the_current_directory(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "notes.txt").write_text("keep me")
    monkeypatch.chdir(tmp_path)
    assert main(["quickstart", "--dir", ".", "--records", "50", "--no-spark"]) == 1
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_quickstart_again_cleans_only_its_own_files(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "qs"
    assert main(["quickstart", "--dir", str(work), "--records", "60", "--no-spark"]) == 0
    (work / "my-notes.md").write_text("mine")
    keyring = (work / "secrets" / "keyring.json").read_text()
    assert main(["quickstart", "--dir", str(work), "--records", "60", "--no-spark"]) == 0
    assert (work / "my-notes.md").read_text() == "mine"
    assert (work / "secrets" / "keyring.json").read_text() != keyring  # ours: made anew
    assert main(["quickstart", "--dir", str(work), "--records", "60", "--no-spark", "--keep"]) == 0


def test_quickstart_into_an_empty_or_new_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["quickstart", "--dir", str(tmp_path / "empty"), "--records", "40", "--no-spark"]) == 0
    assert main(["quickstart", "--dir", str(tmp_path / "a" / "b"), "--records", "40", "--no-spark"]) == 0


def test_quickstart_into_an_unwritable_directory_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    locked = tmp_path / "locked"
    locked.mkdir()
    real_write = Path.write_text

    def read_only(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.parent == locked:  # root ignores 0500, so the file system's answer is simulated
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", read_only)
    assert main(["quickstart", "--dir", str(locked), "--records", "40", "--no-spark"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rsm quickstart: cannot write in {locked / '.rsm-quickstart'}: Permission denied"]


def test_quickstart_a_file_as_dir_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line(rsm("quickstart", "--dir", str(afile), "--no-spark"), "is a file, not a directory")
    assert afile.read_text() == "x"


@pytest.mark.parametrize("records", ["0", "-1", "many"])
def test_quickstart_refuses_bad_record_counts(records: str) -> None:
    done = rsm("quickstart", "--records", records, "--no-spark")
    assert done.returncode == 2
    one_line(done, "--records", "(see rsm quickstart --help)")


def test_quickstart_tables_fit_80_columns_without_cutting_names(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the capture as a terminal of 80 columns
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["quickstart", "--dir", str(tmp_path / "qs"), "--records", "40", "--no-spark"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert "…" not in out
    tables = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert tables and max(len(line) for line in tables) <= 80
    first_column = "".join(line.split("│")[1].strip() for line in tables if line.startswith("│"))
    for base in (0, 40, 80, 120, 160):
        assert f"{base:020d}.log" in first_column  # folded onto two lines maybe, never shortened


# -- one line per mistake ------------------------------------------------------------------------------


def test_version() -> None:
    done = rsm("--version")
    assert done.returncode == 0 and re.fullmatch(r"rsm \(kafka-tiered-rsm\) \S+\n", done.stdout)


def test_s3_without_credentials_is_one_line(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "s3.properties",
        **{"storage.backend": "s3", "storage.s3.endpoint.url": "http://127.0.0.1:9", "storage.s3.region": "us-east-1",
           "bucket": "my-bucket"},
    )  # fmt: skip
    env: dict[str, str | None] = dict.fromkeys(
        (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
        )
    )
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))  # fmt: skip
    for command in (
        ["topic-config", "--config", str(props), "list"],
        ["store", "--config", str(props), "du"],
    ):
        one_line(rsm(*command, env=env), "no S3 credentials", "storage.s3.access.key.id", "--debug")
    done = rsm("--debug", "store", "--config", str(props), "du", env=env)
    assert "Traceback" in done.stderr and "NoCredentialsError" in done.stderr


def test_file_root_that_is_a_file(tmp_path: Path) -> None:
    from rsm import RemoteStorageManager
    from rsm.api.errors import ConfigException

    afile = tmp_path / "afile"
    afile.write_text("x")
    for root, problem in ((afile, "is a file, not a directory"), (afile / "sub", "cannot be created")):
        with pytest.raises(ConfigException, match=re.escape(f"config storage.file.root {root} {problem}")):
            RemoteStorageManager().configure({"storage.backend": "file", "storage.file.root": str(root)})
        props = properties(
            tmp_path / "p.properties", **{"storage.backend": "file", "storage.file.root": str(root)}
        )
        # the read-only tools (and topic-config's list) create no root: one under a file does not exist
        # (issue 26, item 7)
        for tool in (
            ("topic-config", "--config", str(props), "list"),
            ("store", "--config", str(props), "du"),
        ):
            one_line(
                rsm(*tool),
                "storage.file.root",
                "does not exist" if problem == "cannot be created" else problem,
            )
        done = rsm(
            "bridge", "serve", "--config", str(props), "--socket", str(tmp_path / "b.sock"), timeout=60
        )
        one_line(done, "storage.file.root", problem)


def test_bad_bridge_setting_names_the_key(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "p.properties",
        **{"storage.backend": "file", "storage.file.root": str(tmp_path / "s"), "bridge.frame.bytes": "abc"},
    )
    done = rsm("bridge", "serve", "--config", str(props), "--socket", str(tmp_path / "b.sock"), timeout=60)
    one_line(done, "bridge.frame.bytes", "abc")
    assert "invalid literal" not in done.stderr


def test_dry_run_with_a_missing_keyring_says_why(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "p.properties",
        **{"storage.backend": "file", "storage.file.root": str(tmp_path / "s"),
           "encryption.keyring.path": str(tmp_path / "missing.json"), "encryption.key.id": "k1"},
    )  # fmt: skip
    done = rsm("topic-config", "--config", str(props), "set", "--topic", "t", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ",
               "unchecked.rsm.encryption.enabled=true", "--dry-run")  # fmt: skip
    one_line(done, "missing.json", "No such file or directory")


def test_bootstrap_server_without_a_broker_is_one_quick_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    props = properties(
        tmp_path / "p.properties", **{"storage.backend": "file", "storage.file.root": str(tmp_path)}
    )
    (tmp_path / "kafka-tiered-storage").mkdir()  # the store's bucket: describe reads it
    started = time.monotonic()
    done = rsm("topic-config", "--config", str(props), "describe", "--topic", "t",
               "--bootstrap-server", f"127.0.0.1:{port}")  # fmt: skip
    assert time.monotonic() - started < 15
    one_line(done, f"no broker answers at 127.0.0.1:{port}", "--topic-id")


def test_every_error_in_main_is_one_line_and_debug_shows_it(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import rsm.cli.dump_log as dump_log

    def boom(args):  # type: ignore[no-untyped-def]
        raise RuntimeError("something specific broke")

    monkeypatch.setattr(dump_log, "run", boom)
    assert main(["dump-log", "x.log"]) == 1
    assert capsys.readouterr().err == "rsm dump-log: something specific broke (--debug shows the traceback)\n"
    with pytest.raises(RuntimeError):
        main(["--debug", "dump-log", "x.log"])


# -- config hygiene ------------------------------------------------------------------------------------


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


def test_unknown_config_keys_are_warned_about_once_per_process(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    from rsm import RemoteStorageManager

    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path), "bukket": "typo",
               "chunk.sise": "1", "bridge.frame.bytes": "262144"}  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="rsm.manager"):
        for _ in range(5):  # a bridge configures one RSM per connection
            rsm_ = RemoteStorageManager()
            rsm_.configure(configs)
            rsm_.close()
    warnings = [r.getMessage() for r in caplog.records if "unknown RSM config" in r.getMessage()]
    assert len(warnings) == 1 and "bukket" in warnings[0] and "chunk.sise" in warnings[0]
    assert "bridge.frame.bytes" not in warnings[0]


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


# -- README and CLI ------------------------------------------------------------------------------------


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


def test_dump_log_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    from segment_format import SegmentWriter, build_batch

    with SegmentWriter(tmp_path, 0) as w:
        for i in range(0, 20_000, 100):
            w.append(build_batch([(b"k", b"v" * 200, [], i + j) for j in range(100)], base_offset=i))
    done = subprocess.run(
        f"{sys.executable} -m rsm.cli.main dump-log --print-data-log {w.log_path} | head -n 1",
        shell=True, capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout == f"Dumping {w.log_path}\n" and done.stderr == ""
