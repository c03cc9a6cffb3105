"""`rsm topic-config`: describe, set (with --dry-run), unset and list a topic's overlay from a broker's
server.properties, on the file store and on moto S3; the RSM configured from the same file follows it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, write_keyring

from rsm import LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.bridge.server import load_properties, split_rsm_configs
from rsm.cli.main import main
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.overlay import OVERLAY_DIR
from rsm.stored.topic_encryption import MEMORY_DIR

SECRET = "not-a-real-secret-0123"


@dataclasses.dataclass
class Broker:
    """A broker's server.properties pointing at a store, and a way to list that store."""

    properties: Path
    root: Path | None
    s3: object | None
    bucket: str

    def objects(self) -> list[str]:
        if self.root is not None:
            base = self.root / self.bucket
            return (
                sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
                if base.exists()
                else []
            )
        client = self.s3.boto3_client()  # type: ignore[union-attr]
        return sorted(o["Key"] for o in client.list_objects_v2(Bucket=self.bucket).get("Contents", []))

    def rsm_configs(self) -> dict[str, str]:
        return split_rsm_configs(load_properties(self.properties))[0]


@pytest.fixture(params=["file", "s3"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    keyring = write_keyring(tmp_path / "keyring.json", ("k1", "k2"))
    lines = [
        "# a broker's server.properties (only rsm.config.* matters here)",
        "broker.id=1",
        "rsm.config.prefix=tiers/",
        f"rsm.config.encryption.keyring.path={keyring}",
        "rsm.config.bridge.socket.path=/tmp/never-used.sock",
    ]
    if request.param == "file":
        root, s3, bucket = tmp_path / "store", None, "main"
        lines += ["rsm.config.storage.backend=file", f"rsm.config.storage.file.root={root}"]
    else:
        s3 = request.getfixturevalue("s3_server")
        root, bucket = None, s3.make_bucket()
        lines += [
            "rsm.config.storage.backend=s3",
            f"rsm.config.storage.s3.endpoint.url={s3.endpoint_url}",
            f"rsm.config.storage.s3.region={s3.region}",
            "rsm.config.storage.s3.access.key.id=testing",
        ]
    lines += [f"rsm.config.bucket={bucket}", f"rsm.config.storage.s3.secret.access.key={SECRET}"]
    props = tmp_path / "server.properties"
    props.write_text("\n".join(lines) + "\n")
    return Broker(props, root, s3, bucket)


def run(broker: Broker, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["topic-config", "--config", str(broker.properties), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def sources(doc: dict) -> dict[str, tuple[str | None, str]]:
    return {e["name"]: (e["value"], e["source"]) for e in doc["configs"]}


def test_set_dry_run_describe_unset_and_the_rsm_follows(
    broker: Broker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    # the "=" form: a random id's base64 may begin with "-", which argparse would take for an option (Kafka's
    # own Uuid.randomUuid never hands out such an id for that reason; uuid4 here can, 1 time in 64)
    topic = ["--topic", tip.topic, f"--topic-id={uuid_to_base64(tip.topic_id)}"]
    sets = [
        "unchecked.rsm.prefix=orders-tier/",
        "unchecked.rsm.encryption.enabled=true",
        "unchecked.rsm.encryption.key.id=k2",
        "unchecked.rsm.chunk.size=64KiB",
    ]
    # dry run: validated, the effective result printed, nothing written
    rc, out, err = run(broker, capsys, "set", *topic, *sets, "--dry-run", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["written"] is False
    effective = sources(doc)
    assert effective["prefix"] == ("orders-tier/", "TOPIC_OVERLAY")
    assert effective["encryption.key.id"] == ("k2", "TOPIC_OVERLAY")
    assert effective["bucket"] == (broker.bucket, "BROKER")
    assert effective["compression.enabled"] == ("true", "DEFAULT")
    assert effective["storage.s3.secret.access.key"] == ("[hidden]", "BROKER")
    assert SECRET not in out
    assert broker.objects() == []

    # human dry run output says so, and masks the secret too
    rc, out, _ = run(broker, capsys, "set", *topic, *sets, "--dry-run")
    assert rc == 0 and "dry run, nothing written" in out and "TOPIC_OVERLAY" in out and SECRET not in out
    assert broker.objects() == []

    # the real set writes one overlay object under the broker prefix
    rc, out, err = run(broker, capsys, "set", *topic, *sets)
    assert rc == 0, err
    assert "overlay written" in out
    key = f"tiers/{OVERLAY_DIR}orders-{uuid_to_base64(tip.topic_id)}.json"
    assert broker.objects() == [key]

    rc, out, _ = run(broker, capsys, "describe", *topic, "--json")
    assert rc == 0
    described = json.loads(out)
    assert described["overlay"]["configs"]["unchecked.rsm.chunk.size"] == "64KiB"
    assert sources(described)["chunk.size"] == ("64KiB", "TOPIC_OVERLAY")

    # an RSM configured from the same server.properties copies where the overlay says
    rsm = RemoteStorageManager()
    rsm.configure(broker.rsm_configs())
    try:
        seg = make_segment(tmp_path / "seg", tip, batches=30, value_size=400)
        rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig({"retention.ms": "-1"}))
        data_keys = [
            k for k in broker.objects() if k != key and REGISTRY_DIR not in k and MEMORY_DIR not in k
        ]
        assert len(data_keys) == 3
        # the topic's encryption (its overlay's key k2) is remembered beside the overlay (rsm.copy.downgrade)
        assert [k for k in broker.objects() if MEMORY_DIR in k] == [
            f"tiers/{MEMORY_DIR}orders-{uuid_to_base64(tip.topic_id)}.json"
        ]
        assert all(k.startswith(f"orders-tier/orders-{uuid_to_base64(tip.topic_id)}/0/") for k in data_keys)
    finally:
        rsm.close()

    # list shows it
    rc, out, _ = run(broker, capsys, "list", "--json")
    assert rc == 0
    (listed,) = json.loads(out)
    assert listed["topic"] == "orders" and listed["topic_id"] == uuid_to_base64(tip.topic_id)
    assert listed["configs"]["unchecked.rsm.encryption.key.id"] == "k2"

    # unset some keys (dry run first: nothing changes), then all: the overlay object goes away
    rc, out, _ = run(broker, capsys, "unset", *topic, "unchecked.rsm.chunk.size", "--dry-run", "--json")
    assert rc == 0 and "unchecked.rsm.chunk.size" not in json.loads(out)["overlay"]["configs"]
    rc, out, _ = run(broker, capsys, "describe", *topic, "--json")
    assert "unchecked.rsm.chunk.size" in json.loads(out)["overlay"]["configs"]
    rc, out, _ = run(broker, capsys, "unset", *topic, "unchecked.rsm.chunk.size", "--json")
    assert rc == 0 and sources(json.loads(out))["chunk.size"][1] == "DEFAULT"
    rc, out, _ = run(
        broker,
        capsys,
        "unset",
        *topic,
        "unchecked.rsm.prefix",
        "unchecked.rsm.encryption.enabled",
        "unchecked.rsm.encryption.key.id",
    )
    assert rc == 0 and "overlay removed" in out
    assert key not in broker.objects()


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("unchecked.rsm.chunk.size=12", "config unchecked.rsm.chunk.size must be between"),
        ("unchecked.rsm.bucket=a/b", "config unchecked.rsm.bucket must be a bucket name"),
        ("unchecked.rsm.encryption.enabled=maybe", "unchecked.rsm.encryption.enabled must be true or false"),
        ("unchecked.rsm.bukket=x", "unknown topic config 'unchecked.rsm.bukket'"),
        ("segment.bytes=1000", "'segment.bytes' is not an unchecked"),
        ("unchecked.rsm.token=abc", "looks sensitive"),
        ("no-equals-sign", "expected KEY=VALUE"),
        # encryption with a key id the broker's keyring does not hold: copies would fail, so refused now
        ("unchecked.rsm.encryption.key.id=k9", "key id 'k9' is not in the keyring"),
    ],
)
def test_invalid_settings_exit_non_zero_and_write_nothing(
    broker: Broker, capsys: pytest.CaptureFixture[str], pair: str, message: str
) -> None:
    topic = ["--topic", "t", "--topic-id", str(uuid.uuid4())]
    extra = ["unchecked.rsm.encryption.enabled=true"] if "key.id" in pair else []
    for dry in ([], ["--dry-run"]):
        rc, out, err = run(broker, capsys, "set", *topic, *extra, pair, *dry)
        assert rc == 1, out
        assert message in err.replace("\n", " ")
        assert "abc" not in err or "token" not in pair
    assert broker.objects() == []


def test_encryption_without_a_key_id_is_refused(broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(
        broker,
        capsys,
        "set",
        "--topic",
        "t",
        "--topic-id",
        str(uuid.uuid4()),
        "unchecked.rsm.encryption.enabled=on",
    )
    assert rc == 1 and "no key id is set" in err
    assert broker.objects() == []


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"rsm.config.storage.backend=file\nrsm.config.storage.file.root={tmp_path / 's'}\n")
    # describe and list only read: a store root that does not exist is named, and not made
    for action in (["list"], ["describe", "--topic", "t", "--topic-id", str(uuid.uuid4())]):
        assert main(["topic-config", "--config", str(props), *action]) == 1
        assert f"storage.file.root {tmp_path / 's'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    (tmp_path / "s").mkdir()
    # a bucket (a directory here) that is not there is named, as on a cloud: not read as an empty store
    assert main(["topic-config", "--config", str(props), "list"]) == 1
    assert (
        "bucket 'kafka-tiered-storage' (config bucket) does not exist in file at" in capsys.readouterr().err
    )
    (tmp_path / "s" / "kafka-tiered-storage").mkdir()
    assert main(["topic-config", "--config", str(props), "describe", "--topic", "t"]) == 1
    assert "give --topic-id" in capsys.readouterr().err
    assert (
        main(["topic-config", "--config", str(props), "describe", "--topic", "t", "--topic-id", "nope"]) == 1
    )
    assert "--topic-id" in capsys.readouterr().err
    assert main(["topic-config", "--config", str(tmp_path / "missing.properties"), "list"]) == 1
    assert "missing.properties" in capsys.readouterr().err
    bad = tmp_path / "bad.properties"
    bad.write_text("rsm.config.storage.backend=file\n")
    assert main(["topic-config", "--config", str(bad), "list"]) == 1
    assert "storage.file.root is required" in capsys.readouterr().err
    assert main(["topic-config", "list"]) == 2
    # --config and --json after the action work too
    assert main(["topic-config", "list", "--config", str(props), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
