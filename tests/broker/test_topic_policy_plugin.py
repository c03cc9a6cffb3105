"""The JVM plugin's topic policy class, driven as Kafka's controller drives it (no broker needed):
``PolicyDriver`` configures one ``BridgeTopicPolicy`` as the create policy and one as the alter policy with
a broker's whole properties, and calls ``validate``. The bridge is the real one, hosting the real RSM and its
policy: started by the policy itself, refusing with the policy's message, refusing with a clear message
(never a silent pass, never a hang) when it is killed or stops answering, and answering again once back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import write_keyring
from test_bridge_plugin import REPO, bridge_command, bridge_plugin_jar, driver_classpath  # noqa: F401

from rsm.bridge.client import BridgeClient

pytestmark = pytest.mark.timeout(300)

SECRET = "s3-secret-that-must-never-show-0xFEED"
TIERED = {"remote.storage.enable": "true"}


class PolicyDriver:
    """The Java driver process: one command per line, one JSON answer per line."""

    def __init__(self, classpath: str, cwd: Path) -> None:
        self.err = cwd / "policy-driver.err"
        self.proc = subprocess.Popen(
            ["java", "-cp", classpath, "io.tieredrsm.bridge.PolicyDriver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err.open("wb"),
            cwd=cwd,
            text=True,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)])),
        )

    def __call__(self, command: str, arg: Any = None) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(
            command + ("" if arg is None else " " + (arg if isinstance(arg, str) else json.dumps(arg))) + "\n"
        )
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"driver exited during {command!r}: {self.err.read_text()[-2000:]}")
            if line.startswith("@@ "):
                answer = json.loads(line[3:])
                assert SECRET not in line, line
                return answer

    def create(self, topic: str, configs: dict[str, str] | None = None) -> dict[str, Any]:
        return self("create", {"topic": topic, "partitions": 3, "replication": 1, "configs": configs or {}})

    def alter(self, name: str, configs: dict[str, str | None], type_: str = "TOPIC") -> dict[str, Any]:
        return self("alter", {"type": type_, "name": name, "configs": configs})

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def broker_properties(short_dir: Path, **extra: str) -> Path:
    """A broker's server.properties as the controller passes it to policies (rsm.config.* prefixed)."""
    keyring = write_keyring(short_dir / "keyring.json", ("k1",))
    keyring.chmod(0o600)
    rsm = {
        "storage.backend": "file",
        "storage.file.root": str(short_dir / "store"),
        "bucket": "main",
        "encryption.keyring.path": str(keyring),
        "storage.s3.secret.access.key": SECRET,
        "policy.encryption.required.topics": "pci-.*",
        "bridge.socket.path": str(short_dir / "b.sock"),
        "bridge.command": bridge_command(),
        "bridge.log.file": str(short_dir / "bridge.log"),
        "bridge.restart.backoff.ms": "100",
        "bridge.policy.timeout.ms": "1500",
        **extra,
    }
    lines = ["node.id=4", "log.retention.hours=168", f"ssl.key.password={SECRET}"]
    lines += [f"rsm.config.{k}={v}" for k, v in rsm.items()]
    path = short_dir / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def driver(bridge_plugin_jar: Path, java_build: Any, tmp_path: Path) -> Iterator[PolicyDriver]:  # noqa: F811
    d = PolicyDriver(driver_classpath(java_build), tmp_path)
    yield d
    d.stop()


def until_answered(driver: PolicyDriver, timeout: float = 90) -> dict[str, Any]:
    """Ask until the bridge answers (it starts in the background), returning the policy's own refusal."""
    deadline = time.monotonic() + timeout
    while True:
        answer = driver.create("pci-cards", TIERED)
        if "must be encrypted" in answer.get("message", ""):
            return answer
        assert "RSM bridge" in answer.get("message", ""), answer  # not started yet: refused, saying so
        assert time.monotonic() < deadline, answer
        time.sleep(0.5)


def bridge_pid(sock: Path) -> int:
    client = BridgeClient(sock, pool_size=1)
    try:
        return int(client.health()["pid"])
    finally:
        client.close()


def wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return
        except OSError:
            return
        time.sleep(0.01)


def test_the_policy_class_asks_the_bridge_and_refuses_when_it_cannot(
    driver: PolicyDriver,
    short_dir: Path,
) -> None:
    props = broker_properties(short_dir)
    assert driver("configure", str(props))["ok"]
    refusal = until_answered(driver)
    assert refusal["exception"] == "PolicyViolationException"
    assert refusal["message"].startswith("topic pci-cards: creation refused by the topic policy: ")
    assert "rsm topic-config --config server.properties set --topic pci-cards" in refusal["message"]
    # the bridge config the policy wrote for the bridge it started: owner-only, the rsm.config.* keys
    generated = short_dir / "bridge-4.properties"
    assert generated.stat().st_mode & 0o777 == 0o600 and "ssl.key.password" not in generated.read_text()

    assert driver.create("orders", TIERED)["ok"]
    assert driver.create("orders", {**TIERED, "unchecked.rsm.bukket": "x"})["message"].endswith(
        "did you mean 'unchecked.rsm.bucket'?"
    )
    # the broker's log.* defaults reach the policy: a week of total retention, two of local
    message = driver.create("orders", {**TIERED, "local.retention.ms": str(14 * 86_400_000)})["message"]
    assert "local.retention.ms=1209600000 but retention.ms=604800000" in message
    # alterations: switching remote storage on for a pci- topic is refused; other resources pass
    assert "must be encrypted" in driver.alter("pci-cache", {"remote.storage.enable": "true"})["message"]
    assert (
        "cleanup.policy=delete" in driver.alter("orders", {**TIERED, "cleanup.policy": "compact"})["message"]
    )
    assert driver.alter("4", {"log.retention.ms": "5"}, "BROKER")["ok"]

    # kill -9 the bridge: the next request is refused at once, saying why; a new bridge then answers
    pid = bridge_pid(short_dir / "b.sock")
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    down = driver.create("pci-cards", TIERED)
    assert not down["ok"] and down["exception"] == "PolicyViolationException", down
    assert (
        "creation of topic pci-cards refused: the RSM bridge that checks the topic policy" in down["message"]
    )
    assert "restarted" in down["message"] and down["ms"] < 5000
    # what does not concern tiered storage passes without the bridge (scope "tiered"), internal topics too
    assert driver.create("plain", {"cleanup.policy": "compact"})["ok"]
    assert driver.create("__consumer_offsets", {"cleanup.policy": "compact"})["ok"]
    until_answered(driver)
    assert bridge_pid(short_dir / "b.sock") != pid

    # a bridge that stops answering (SIGSTOP): refused within the timeout, not hung; fine once it goes on
    pid = bridge_pid(short_dir / "b.sock")
    os.kill(pid, signal.SIGSTOP)
    try:
        hung = driver.create("orders", TIERED)
        assert not hung["ok"] and "no answer from the bridge within 1500 ms" in hung["message"], hung
        assert hung["ms"] < 2 * 1500 + 1000
    finally:
        os.kill(pid, signal.SIGCONT)
    assert until_answered(driver)
    assert driver.create("orders", TIERED)["ok"]

    # closing the policies stops the bridge they started
    assert driver("close")["ok"]
    wait_gone(pid, 20)
    assert not (short_dir / "b.sock").exists()
    # the refusals are in the bridge's log; the secret is in neither log
    log = (short_dir / "bridge.log").read_text()
    assert "validate_create_topic: topic pci-cards: creation refused" in log
    assert SECRET not in log and SECRET not in driver.err.read_text()


def test_an_external_bridge_that_is_down_is_named_in_the_refusal(
    driver: PolicyDriver,
    short_dir: Path,
) -> None:
    props = broker_properties(short_dir, **{"bridge.command": "", "bridge.policy.scope": "all"})
    assert driver("configure", str(props))["ok"]
    down = driver.create("plain", {})  # scope "all": every topic asks
    assert (
        not down["ok"]
        and "rsm.config.bridge.command is empty, so start it (rsm bridge serve)" in down["message"]
    )
    assert driver.create("__internal", {})["ok"]  # never Kafka's own topics
    env = dict(os.environ, PYTHONPATH=str(REPO))
    bridge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsm.cli.main",
            "bridge",
            "serve",
            "--config",
            str(props),
            "--socket",
            str(short_dir / "b.sock"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(short_dir / "external.log").open("wb"),
    )
    try:
        deadline = time.monotonic() + 90
        while not driver.create("plain", {})["ok"]:
            assert time.monotonic() < deadline, (short_dir / "external.log").read_text()[-2000:]
            time.sleep(0.5)
        assert "must be encrypted" in driver.create("pci-cards", TIERED)["message"]
        assert driver("close")["ok"]
        assert bridge.poll() is None  # an operator's bridge is not the policy's to stop
    finally:
        bridge.terminate()
        bridge.wait(30)
