"""Every change path asks the topic policy: pending overlays adopted under the new topic id before the first
copy, the bridge's `validate_create_topic` / `validate_alter_config` (what the JVM policy classes call), and
`rsm topic-config set | unset` with its dry run (effective values, sources, masked secrets, violations)."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, write_keyring

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import uuid_to_base64
from rsm.bridge import protocol
from rsm.bridge.client import BridgeClient
from rsm.bridge.policy_ops import policy_handlers
from rsm.bridge.server import BridgeServer
from rsm.cli.main import main
from rsm.policy import PolicyViolationException
from rsm.store.objects import ObjectStore
from rsm.store.overlays import OverlayCache, TopicOverlayStore
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.overlay import OVERLAY_DIR
from rsm.stored.pending_overlay import PENDING_DIR, PENDING_TTL_MS

SECRET = "s3-secret-that-must-never-show-0xBEEF"
ENCRYPTED = {"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k2"}


@pytest.fixture
def props(tmp_path: Path) -> Path:
    """A broker's server.properties: file store, a keyring, encryption required for pci-* topics."""
    keyring = write_keyring(tmp_path / "keyring.json", ("k1", "k2"))
    keyring.chmod(0o600)
    path = tmp_path / "server.properties"
    path.write_text(
        "\n".join(
            [
                "node.id=1",
                "log.retention.hours=168",
                f"ssl.keystore.password={SECRET}",
                "rsm.config.storage.backend=file",
                f"rsm.config.storage.file.root={tmp_path / 'store'}",
                "rsm.config.bucket=main",
                "rsm.config.prefix=tiers/",
                f"rsm.config.encryption.keyring.path={keyring}",
                f"rsm.config.storage.s3.secret.access.key={SECRET}",
                "rsm.config.policy.encryption.required.topics=pci-.*",
                "rsm.config.topic.overlay.cache.ms=0",
            ]
        )
        + "\n"
    )
    return path


def rsm_configs(props: Path) -> dict[str, str]:
    from rsm.bridge.server import load_properties, split_rsm_configs

    return split_rsm_configs(load_properties(props))[0]


@pytest.fixture
def rsm(props: Path) -> Iterator[RemoteStorageManager]:
    manager = RemoteStorageManager()
    manager.configure(rsm_configs(props))
    yield manager
    manager.close()


def stored(tmp_path: Path) -> list[str]:
    base = tmp_path / "store" / "main"
    return (
        sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
        if base.exists()
        else []
    )


# ------------------------------------------------------------------------------------ pending overlays


def test_pending_overlay_store_round_trip_expiry_and_refusals(rsm: RemoteStorageManager) -> None:
    pending = rsm.pending_overlays
    written = pending.write("pci-cards", ENCRYPTED, now_ms=1_000)
    assert written is not None and written.expires_ms == 1_000 + PENDING_TTL_MS
    assert pending.read("pci-cards", include_expired=True) == written
    assert pending.read("pci-cards") is None  # expired long ago (written "at" 1 s after the epoch)
    fresh = pending.write("pci-cards", ENCRYPTED)
    assert pending.read("pci-cards") == fresh and [p.topic for p in pending.list()] == ["pci-cards"]
    with pytest.raises(ConfigException, match="looks sensitive"):
        pending.write("pci-cards", {"unchecked.rsm.secret": "x"})
    with pytest.raises(ConfigException, match="did you mean 'unchecked.rsm.bucket'"):
        pending.write("pci-cards", {"unchecked.rsm.bukket": "x"})
    with pytest.raises(ConfigException, match="invalid topic name"):
        pending.write("../etc", ENCRYPTED)
    assert pending.write("pci-cards", {}) is None and pending.list() == []


def test_a_new_topic_adopts_its_pending_overlay_before_its_first_copy(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    rsm.pending_overlays.write("pci-cards", ENCRYPTED)
    assert stored(tmp_path) == [f"tiers/{PENDING_DIR}pci-cards.json"]
    tip = TopicIdPartition(uuid.uuid4(), "pci-cards", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=3)
    rsm.copy_log_segment_data(seg.metadata, seg.data)  # would be refused unencrypted (policy)
    keys = stored(tmp_path)
    assert f"tiers/{PENDING_DIR}pci-cards.json" not in keys  # consumed
    assert f"tiers/{OVERLAY_DIR}pci-cards-{uuid_to_base64(tip.topic_id)}.json" in keys
    manifest = next((tmp_path / "store").rglob("*.manifest"))
    assert json.loads(manifest.read_text())["encryption"]["key_id"] == "k2"
    # a later topic of the same name (deleted and recreated) starts clean: nothing left to adopt
    again = TopicIdPartition(uuid.uuid4(), "pci-cards", 0)
    seg2 = make_segment(tmp_path / "seg2", again, batches=2)
    with pytest.raises(RemoteStorageException, match="must be encrypted"):
        rsm.copy_log_segment_data(seg2.metadata, seg2.data)


def test_a_topic_that_has_tiered_already_does_not_take_a_pending_overlay_meant_for_its_successor(
    rsm: RemoteStorageManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = TopicIdPartition(uuid.uuid4(), "orders", 0)
    rsm.copy_log_segment_data(*_segment(tmp_path / "a", old))
    assert any(REGISTRY_DIR in k for k in stored(tmp_path))  # its location is recorded
    rsm.pending_overlays.write("orders", {"unchecked.rsm.prefix": "next/"})
    with caplog.at_level(logging.WARNING):
        rsm.copy_log_segment_data(*_segment(tmp_path / "b", old, base_offset=100))
    assert "not adopted by topic orders" in caplog.text
    assert rsm.pending_overlays.read("orders") is not None
    assert not [k for k in stored(tmp_path) if k.startswith("next/")]
    new = TopicIdPartition(uuid.uuid4(), "orders", 0)
    rsm.copy_log_segment_data(*_segment(tmp_path / "c", new))
    assert [k for k in stored(tmp_path) if k.startswith("next/")]
    assert rsm.pending_overlays.read("orders") is None


def _segment(directory: Path, tip: TopicIdPartition, base_offset: int = 0) -> tuple[Any, Any]:
    seg = make_segment(directory, tip, batches=2, base_offset=base_offset)
    return seg.metadata, seg.data


def test_an_expired_pending_overlay_is_not_adopted(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    rsm.pending_overlays.write("orders", {"unchecked.rsm.prefix": "stale/"}, now_ms=0)
    rsm.copy_log_segment_data(*_segment(tmp_path / "a", TopicIdPartition(uuid.uuid4(), "orders", 0)))
    assert not [k for k in stored(tmp_path) if k.startswith("stale/")]


def test_a_broker_that_loses_the_adoption_race_still_finds_the_overlay(tmp_path: Path) -> None:
    store = ObjectStore.from_config(_file_config(tmp_path))
    overlays = TopicOverlayStore(store, "main")
    tid = uuid.uuid4()

    def another_broker_adopted_first(topic: str, topic_id: uuid.UUID) -> None:
        overlays.write(topic, topic_id, {"unchecked.rsm.prefix": "theirs/"})  # and deleted the pending one
        return None

    cache = OverlayCache(overlays, 0, adopt=another_broker_adopted_first)
    assert dict(cache.configs("orders", tid)) == {"unchecked.rsm.prefix": "theirs/"}


def _file_config(tmp_path: Path) -> Any:
    from rsm.config.settings import RsmConfig

    return RsmConfig(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    )


# ------------------------------------------------------------------------------------ the bridge ops


@pytest.fixture
def bridge(rsm: RemoteStorageManager, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeClient]:
    import tempfile

    sock_dir = Path(tempfile.mkdtemp(prefix="rsmp-", dir="/tmp"))
    sock_dir.chmod(0o700)
    server = BridgeServer(rsm, sock_dir / "b.sock", handlers=policy_handlers(rsm))
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = BridgeClient(sock_dir / "b.sock", pool_size=2)
    yield client
    client.close()
    server.stop()
    thread.join(15)
    for p in sock_dir.iterdir():
        p.unlink()
    sock_dir.rmdir()


def test_bridge_validate_create_topic(bridge: BridgeClient, rsm: RemoteStorageManager) -> None:
    assert {"validate_create_topic", "validate_alter_config"} <= set(bridge.health() and _ops(bridge))
    request = {
        "topic": "pci-cards",
        "num_partitions": 3,
        "replication_factor": 1,
        "configs": {"remote.storage.enable": "true"},
    }
    with pytest.raises(PolicyViolationException, match="pci-cards: creation refused .*must be encrypted"):
        bridge.call("validate_create_topic", request)
    # not tiered (remote.storage.enable absent: Kafka's default, false): nothing to encrypt
    bridge.call("validate_create_topic", {**request, "configs": {}})
    # the broker's defaults reach the policy
    with pytest.raises(PolicyViolationException, match="cleanup.policy=delete"):
        bridge.call(
            "validate_create_topic",
            {
                "topic": "orders",
                "configs": {"remote.storage.enable": "true"},
                "broker_configs": {"log.cleanup.policy": "compact"},
            },
        )
    # with its pending overlay the creation passes, and the answer is the effective configuration
    rsm.pending_overlays.write("pci-cards", ENCRYPTED)
    answer = bridge.call(
        "validate_create_topic", {**request, "replicas_assignments": {"0": [1], "1": [1], "2": [1]}}
    )
    effective = {e["name"]: (e["value"], e["source"]) for e in answer["configs"]}
    assert effective["encryption.key.id"] == ("k2", "TOPIC_OVERLAY")
    assert effective["storage.s3.secret.access.key"] == ("[hidden]", "BROKER")
    assert answer["pending_overlay"].endswith(f"{PENDING_DIR}pci-cards.json")
    assert SECRET not in json.dumps(answer)
    with pytest.raises(RemoteStorageException, match="INVALID_REQUEST.*topic"):
        bridge.call("validate_create_topic", {"configs": {}})


def _ops(client: BridgeClient) -> list[str]:
    conn = client._acquire()
    try:
        return list(conn.server_hello["ops"])
    finally:
        client._release(conn)


def test_bridge_validate_alter_config(bridge: BridgeClient, rsm: RemoteStorageManager) -> None:
    tid = uuid.uuid4()
    turn_on = {
        "resource_type": "TOPIC",
        "resource_name": "pci-cards",
        "configs": {"remote.storage.enable": "true"},
    }
    assert (
        bridge.call("validate_alter_config", {**turn_on, "resource_type": "BROKER", "resource_name": "1"})
        == {}
    )
    current = {"remote.storage.enable": "false", "cleanup.policy": "delete"}
    with pytest.raises(PolicyViolationException, match="change refused .*must be encrypted"):
        bridge.call(
            "validate_alter_config", {**turn_on, "topic_id": uuid_to_base64(tid), "current_configs": current}
        )
    # a pending overlay written before the topic existed is adopted by its id now, and counts
    rsm.pending_overlays.write("pci-cards", ENCRYPTED)
    bridge.call(
        "validate_alter_config", {**turn_on, "topic_id": uuid_to_base64(tid), "current_configs": current}
    )
    assert rsm.pending_overlays.read("pci-cards") is None
    assert rsm.overlays.overlays.read("pci-cards", tid) is not None
    # removing a key (null) is part of the resulting state: compaction back on a tiered topic is refused
    with pytest.raises(PolicyViolationException, match="cleanup.policy=delete"):
        bridge.call(
            "validate_alter_config",
            {
                "resource_type": "TOPIC",
                "resource_name": "orders",
                "configs": {"cleanup.policy": "compact", "retention.ms": None},
                "current_configs": {"remote.storage.enable": "true", "retention.ms": "5"},
            },
        )
    # KRaft asks the alter policy for a topic being created too: no id, no current configs -> pending by name
    rsm.pending_overlays.write("pci-new", ENCRYPTED)
    bridge.call("validate_alter_config", {**turn_on, "resource_name": "pci-new"})
    with pytest.raises(PolicyViolationException, match="pci-other: change refused .*must be encrypted"):
        bridge.call("validate_alter_config", {**turn_on, "resource_name": "pci-other"})
    # ... and when the plugin knows the topic does not exist yet, it is judged (and worded) as a creation
    with pytest.raises(PolicyViolationException, match="pci-other: creation refused .*must be encrypted"):
        bridge.call("validate_alter_config", {**turn_on, "resource_name": "pci-other", "exists": False})
    bridge.call("validate_alter_config", {**turn_on, "resource_name": "pci-new", "exists": False})
    with pytest.raises(RemoteStorageException, match="INVALID_REQUEST.*configs"):
        bridge.call("validate_alter_config", {**turn_on, "configs": {"a": 1}})


def test_policy_violations_are_their_own_error_code() -> None:
    assert protocol.error_code_for(PolicyViolationException("no")) == protocol.ErrorCode.POLICY_VIOLATION
    assert isinstance(protocol.exception_for("POLICY_VIOLATION", "no"), PolicyViolationException)
    # an RSM without a topic policy (a test double, another class) serves no policy op: the plugin refuses
    assert policy_handlers(object()) == {}


# ------------------------------------------------------------------------------------ the CLI


def cli(props: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["topic-config", "--config", str(props), *args])
    out, err = capsys.readouterr()
    assert SECRET not in out and SECRET not in err
    return rc, out, err


def test_dry_run_answers_values_sources_masked_secrets_and_the_violation(
    props: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = ["--topic", "pci-cards", f"--topic-id={uuid_to_base64(uuid.uuid4())}"]
    with caplog.at_level(logging.DEBUG):
        rc, out, err = cli(
            props, capsys, "set", *topic, "unchecked.rsm.chunk.size=64KiB", "--dry-run", "--json"
        )
        assert rc == 1
        doc = json.loads(out)
        assert doc["dry_run"] is True and doc["written"] is False
        effective = {e["name"]: (e["value"], e["source"], e["key"]) for e in doc["configs"]}
        assert effective["chunk.size"] == ("64KiB", "TOPIC_OVERLAY", "unchecked.rsm.chunk.size")
        assert effective["bucket"] == ("main", "BROKER", "bucket")
        assert effective["encryption.enabled"] == ("false", "DEFAULT", "encryption.enabled")
        assert effective["policy.encryption.required.topics"] == (
            "pci-.*",
            "BROKER",
            "policy.encryption.required.topics",
        )
        assert effective["storage.s3.secret.access.key"] == (
            "[hidden]",
            "BROKER",
            "storage.s3.secret.access.key",
        )
        assert doc["policy"]["class"] == "built-in"
        assert "must be encrypted" in doc["policy"]["violation"] and "must be encrypted" in err
        # the same change made acceptable: the dry run says so, still writing nothing
        rc, out, err = cli(
            props,
            capsys,
            "set",
            *topic,
            "unchecked.rsm.chunk.size=64KiB",
            *(f"{k}={v}" for k, v in ENCRYPTED.items()),
            "--dry-run",
            "--json",
        )
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["policy"]["violation"] is None and doc["written"] is False
        assert {e["name"]: e["source"] for e in doc["configs"]}["encryption.key.id"] == "TOPIC_OVERLAY"
        # the human form: the table, the verdict, the violation on stderr
        rc, out, err = cli(props, capsys, "set", *topic, "unchecked.rsm.chunk.size=64KiB", "--dry-run")
        assert rc == 1 and "dry run, nothing written" in out and "topic policy (built-in): violated" in out
        assert "[hidden]" in out and "must be encrypted" in err
    assert stored(tmp_path) == []
    assert SECRET not in caplog.text


def test_set_and_unset_are_refused_when_they_break_the_policy(
    props: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tid = uuid_to_base64(uuid.uuid4())
    topic = ["--topic", "pci-cards", f"--topic-id={tid}"]
    rc, out, err = cli(props, capsys, "set", *topic, "unchecked.rsm.chunk.size=64KiB")
    assert rc == 1 and "refused by the topic policy, nothing written" in out and "(nothing written)" in err
    assert stored(tmp_path) == []
    rc, _, err = cli(props, capsys, "set", *topic, *(f"{k}={v}" for k, v in ENCRYPTED.items()))
    assert rc == 0, err
    key = f"tiers/{OVERLAY_DIR}pci-cards-{tid}.json"
    assert stored(tmp_path) == [key]
    rc, _, err = cli(props, capsys, "unset", *topic, "unchecked.rsm.encryption.enabled")
    assert rc == 1 and "must be encrypted" in err
    rc, _, err = cli(props, capsys, "set", *topic, "unchecked.rsm.encryption.key.id=k9")
    assert rc == 1 and "key id 'k9' is not in the keyring" in err
    rc, _, err = cli(props, capsys, "set", *topic, "unchecked.record.validation.policy=jsno")
    assert rc == 1 and "'jsno' is not a built-in policy" in err
    rc, _, err = cli(props, capsys, "unset", *topic, "unchecked.rsm.bukket")
    assert rc == 1 and "did you mean 'unchecked.rsm.bucket'" in err
    assert json.loads((tmp_path / "store" / "main" / key).read_text())["configs"] == ENCRYPTED
    # describe reports the stored state's verdict
    rc, out, _ = cli(props, capsys, "describe", *topic, "--json")
    assert rc == 0 and json.loads(out)["policy"]["violation"] is None


def test_pending_overlays_from_the_cli(
    props: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = cli(
        props, capsys, "set", "--topic", "pci-new", "--pending", "unchecked.rsm.chunk.size=64KiB"
    )
    assert rc == 1 and "creation refused by the topic policy" in err and "must be encrypted" in err
    rc, out, err = cli(
        props, capsys, "set", "--topic", "pci-new", "--pending", *(f"{k}={v}" for k, v in ENCRYPTED.items())
    )
    assert rc == 0, err
    assert "pci-new (pending): pending overlay written" in out and "adopted by the topic created" in out
    assert stored(tmp_path) == [f"tiers/{PENDING_DIR}pci-new.json"]
    rc, out, _ = cli(props, capsys, "describe", "--topic", "pci-new", "--pending", "--json")
    doc = json.loads(out)
    assert (
        rc == 0
        and doc["pending"] is True
        and doc["topic_id"] is None
        and doc["overlay"]["configs"] == ENCRYPTED
    )
    rc, out, _ = cli(props, capsys, "list", "--json")
    (listed,) = json.loads(out)
    assert listed["pending"] is True and listed["expired"] is False and listed["configs"] == ENCRYPTED
    rc, _, err = cli(
        props, capsys, "set", "--topic", "pci-new", "--pending", "--topic-id", str(uuid.uuid4()), "a=b"
    )
    assert rc == 1 and "has no --topic-id" in err
    rc, _, err = cli(
        props, capsys, "unset", "--topic", "pci-new", "--pending", "unchecked.rsm.encryption.enabled"
    )
    assert rc == 1 and "must be encrypted" in err
    rc, out, err = cli(props, capsys, "unset", "--topic", "pci-new", "--pending", *ENCRYPTED)
    assert rc == 1  # the whole overlay removed leaves a pci- topic unencrypted: refused too
    plain = ["--topic", "orders", "--pending"]
    assert cli(props, capsys, "set", *plain, "unchecked.rsm.prefix=o/")[0] == 0
    rc, out, _ = cli(props, capsys, "unset", *plain, "unchecked.rsm.prefix")
    assert rc == 0 and "pending overlay removed" in out
    assert stored(tmp_path) == [f"tiers/{PENDING_DIR}pci-new.json"]
