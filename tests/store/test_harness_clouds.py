"""The emulator harness itself: a missing tool chain skips the cloud tests locally and fails them under
CI=true; the emulators answer the real SDKs over HTTP on loopback and stop with their process gone."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped
from harness import emulators
from harness.clouds import FakeGcsServer
from harness.ports import port_open


def test_a_missing_emulator_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(Skipped):
        emulators.unavailable("azurite: npm is not on the PATH")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Failed, match="CI=true: emulator tests must run"):
        emulators.unavailable("azurite: npm is not on the PATH")


def test_an_install_without_its_tool_chain_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setattr(emulators, "CACHE_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no go, no npm
    with pytest.raises(emulators.EmulatorUnavailable, match="go is not on the PATH"):
        emulators.fake_gcs_command()
    with pytest.raises(emulators.EmulatorUnavailable, match="npm is not on the PATH"):
        emulators.azurite_blob_command()


def test_the_emulators_listen_on_loopback_and_answer(gcs_server, azurite_server) -> None:  # noqa: ANN001
    for server in (gcs_server, azurite_server):
        assert server.host == "127.0.0.1" and port_open(server.host, server.port)
        bucket = server.make_bucket()
        assert bucket in str(server.filesystem().ls(""))


def test_a_stopped_emulator_is_gone(gcs_server) -> None:  # noqa: ANN001 - the binary is installed
    own = FakeGcsServer(binary=gcs_server.binary).start()
    port = own.port
    own.stop()
    assert not port_open("127.0.0.1", port) and own._proc is None
