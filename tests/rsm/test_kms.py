"""AWS KMS keys (`encryption.key.id=kms:...`) against moto's KMS and STS in server mode, over HTTP.

No keyring file anywhere: the RSM copies and fetches with data keys made by KMS; re-keying moves segments
between keyring keys and KMS keys both ways (the RSM's re-key and `rsm migrate rekey`); KMS unreachable
fails a copy retriably with one line while fetches of cached keys go on; the cache is bounded and expires;
credentials come from boto3's chain, web identity included (moto's STS).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.s3 import S3Server
from kafka_segments import make_segment, read_all
from migrate_helpers import tier_topic

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import RemoteStorageException
from rsm.cli.main import main
from rsm.config.kms import KmsKeys
from rsm.stored.manifest import Manifest


@pytest.fixture
def kms(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[S3Server, str, str]]:
    """moto's KMS (the suite's moto server) with a fresh key and an alias of it, and moto's dummy
    credentials in the environment (boto3's default chain); yields (server, key ARN, alias name)."""
    for name, value in s3_server.env().items():
        if not name.startswith("AWS_ENDPOINT_URL"):
            monkeypatch.setenv(name, value)
    client = _client(s3_server)
    arn = client.create_key(Description="rsm test key")["KeyMetadata"]["Arn"]
    alias = f"alias/rsm-{uuid.uuid4().hex[:12]}"
    client.create_alias(AliasName=alias, TargetKeyId=arn)
    yield s3_server, arn, alias


def _client(server: S3Server):  # noqa: ANN202
    import boto3

    return boto3.client(
        "kms",
        endpoint_url=server.endpoint_url,
        region_name=server.region,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
    )


def _configs(server: S3Server, root: Path, key_id: str, **extra: str) -> dict[str, str]:
    return {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": "main",
        "encryption.enabled": "true",
        "encryption.key.id": key_id,
        "encryption.kms.endpoint.url": server.endpoint_url,
        "encryption.kms.region": server.region,
        "chunk.size": "8192",
        **extra,
    }


def _segment(tmp_path: Path, name: str = "orders"):  # noqa: ANN202
    tip = TopicIdPartition(uuid.uuid4(), name, 0)
    return make_segment(tmp_path / uuid.uuid4().hex, tip, batches=20, records_per_batch=10, value_size=200)


@pytest.mark.parametrize("which", ["arn", "alias"])
def test_copy_and_fetch_with_a_kms_key_and_no_keyring_file(
    kms: tuple[S3Server, str, str], tmp_path: Path, which: str
) -> None:
    server, arn, alias = kms
    key_id = f"kms:{arn if which == 'arn' else alias}"
    rsm = RemoteStorageManager()
    rsm.configure(_configs(server, tmp_path / "store", key_id))
    seg = _segment(tmp_path)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        original = seg.data.log_segment.read_bytes()
        assert read_all(rsm.fetch_log_segment(md, 0)) == original
        assert read_all(rsm.fetch_log_segment(md, 100, 5000)) == original[100:5001]
    finally:
        rsm.close()
    # the manifest names the KMS key; nothing under the store holds key material in the clear
    assert list((tmp_path / "store").rglob("*.manifest"))
    assert not list(tmp_path.rglob("*keyring*"))
    # a fresh RSM (no cache) unwraps through KMS again
    again = RemoteStorageManager()
    again.configure(_configs(server, tmp_path / "store", key_id))
    try:
        assert read_all(again.fetch_log_segment(md, 0)) == original
    finally:
        again.close()


def test_kms_unreachable_fails_copies_retriably_and_cached_fetches_go_on(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = S3Server().start()  # a KMS of this test's own, to stop
    for name, value in own.env().items():
        if not name.startswith("AWS_ENDPOINT_URL"):
            monkeypatch.setenv(name, value)
    try:
        arn = _client(own).create_key()["KeyMetadata"]["Arn"]
        rsm = RemoteStorageManager()
        rsm.configure(_configs(own, tmp_path / "store", f"kms:{arn}"))
        seg = _segment(tmp_path)
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        original = seg.data.log_segment.read_bytes()
        own.stop()
        # the data key is cached: fetches go on
        assert read_all(rsm.fetch_log_segment(md, 0)) == original
        # a new segment needs KMS: RemoteStorageException (Kafka retries), one line naming the key
        second = _segment(tmp_path)
        with pytest.raises(RemoteStorageException) as failed:
            rsm.copy_log_segment_data(second.metadata, second.data)
        message = str(failed.value)
        assert (
            "\n" not in message
            and f"KMS key kms:{arn}" in message
            and "cannot generate a data key" in message
        )
        assert "testing" not in message  # no credential
        rsm.close()
    finally:
        own.stop()


def test_rekey_between_keyring_and_kms_both_ways(
    kms: tuple[S3Server, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rsm migrate rekey` re-wraps every data key: keyring k1 -> KMS -> keyring k2; fetches hold."""
    server, arn, alias = kms
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "bucket": "main",
        "encryption.kms.endpoint.url": server.endpoint_url,
        "encryption.kms.region": server.region,
    }
    tiered = tier_topic(tmp_path / "t", configs, partitions=1, segments=2, records=100)
    catalog = tiered.catalog

    def key_ids() -> set[str]:
        return {s.manifest.encryption.key_id for s in catalog().segments(tiered.topic, tiered.topic_id)}

    assert key_ids() == {"k1"}
    for target in (f"kms:{alias}", "k2"):
        code = main(["migrate", "--config", str(tiered.props), "rekey", "--topic", "orders", "--key-id", target,
                     "--json"])  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        assert code == 0 and report["summary"]["done"] == 2, report
        assert key_ids() == {target}
        tiered.check_fetch()


def test_a_wrapped_key_is_bound_to_its_segment(kms: tuple[S3Server, str, str]) -> None:
    server, arn, _ = kms
    keys = KmsKeys(server.endpoint_url, server.region, cache_keys=0)
    data_key, wrapped = keys.generate(f"kms:{arn}", b"segment-1")
    assert len(data_key) == 32 and data_key not in wrapped
    assert keys.unwrap(f"kms:{arn}", wrapped, b"segment-1") == data_key
    with pytest.raises(RemoteStorageException) as failed:
        keys.unwrap(f"kms:{arn}", wrapped, b"segment-2")
    assert "\n" not in str(failed.value) and "cannot unwrap a data key" in str(failed.value)
    assert data_key.hex() not in str(failed.value) and repr(keys).count("cached=0")


def test_the_cache_is_bounded_and_expires(
    kms: tuple[S3Server, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, arn, _ = kms
    keys = KmsKeys(server.endpoint_url, server.region, cache_keys=2, cache_ttl_s=60)
    made = [keys.generate(f"kms:{arn}", bytes([i])) for i in range(3)]
    assert keys.cached_keys() == 2
    calls: list[str] = []
    client = keys.client()
    original = client.decrypt
    monkeypatch.setattr(client, "decrypt", lambda **kw: calls.append("decrypt") or original(**kw))
    assert keys.unwrap(f"kms:{arn}", made[2][1], bytes([2])) == made[2][0] and calls == []  # cached
    assert keys.unwrap(f"kms:{arn}", made[0][1], bytes([0])) == made[0][0] and calls == ["decrypt"]  # evicted
    expiring = KmsKeys(server.endpoint_url, server.region, cache_keys=10, cache_ttl_s=0)
    expiring.generate(f"kms:{arn}", b"x")
    assert expiring.cached_keys() == 0


def test_credentials_from_web_identity(
    kms: tuple[S3Server, str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No static credentials: boto3's chain assumes a role with a web identity token through STS (moto's),
    as on EKS (IRSA) or any OIDC-federated workload."""
    server, arn, _ = kms
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/rsm-brokers")
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "rsm-test")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.endpoint_url)
    keys = KmsKeys(server.endpoint_url, server.region)
    data_key, wrapped = keys.generate(f"kms:{arn}", b"seg")
    credentials = keys.client()._request_signer._credentials  # noqa: SLF001 - which provider answered
    assert getattr(credentials, "method", "") == "assume-role-with-web-identity"
    assert KmsKeys(server.endpoint_url, server.region).unwrap(f"kms:{arn}", wrapped, b"seg") == data_key


def test_the_manifest_records_the_kms_key(kms: tuple[S3Server, str, str], tmp_path: Path) -> None:
    server, _, alias = kms
    rsm = RemoteStorageManager()
    rsm.configure(_configs(server, tmp_path / "store", f"kms:{alias}"))
    seg = _segment(tmp_path)
    try:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()
    [path] = [p for p in (tmp_path / "store").rglob("*.manifest") if "_rsm" not in str(p)]
    manifest = Manifest.from_bytes(path.read_bytes())
    assert manifest.encryption is not None and manifest.encryption.key_id == f"kms:{alias}"


def test_the_spark_reader_decrypts_through_kms(kms: tuple[S3Server, str, str], tmp_path: Path) -> None:
    """The reader's own functions (what Spark runs on its workers), in process: an executor with KMS access
    and no keyring file reads a topic encrypted under a KMS key."""
    import pyarrow as pa
    from tiering import PartitionLog

    from spark_reader import partition_reader
    from spark_reader.options import parse_options
    from spark_reader.source import FilteringBatchReader

    server, _, alias = kms
    configs = _configs(server, tmp_path / "store", f"kms:{alias}")
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "secret", 0), tmp_path / "w")
    log.append(50)
    log.roll()
    log.append(30)
    log.roll()
    rsm.close()
    read = {k: v for k, v in configs.items() if not k.startswith("encryption.") or ".kms." in k}
    reader = FilteringBatchReader(parse_options({**read, "subscribe": "secret"}))
    partition_reader._clients.clear()
    table = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])
    assert table.column("value").to_pylist() == [r.value for r in log.records]
