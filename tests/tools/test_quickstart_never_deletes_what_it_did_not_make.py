"""`rsm quickstart` never deletes what it did not make: a directory holding other files is refused and left
as it was, `.` keeps the current directory, a second run replaces only the quickstart's own files; an
empty or new directory is used, and an unwritable directory or a file given as the directory is one line.
"""

from __future__ import annotations

from pathlib import Path

from cli_runs import one_line, rsm

from rsm.cli.main import main


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
