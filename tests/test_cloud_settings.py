"""The GCS, Azure and KMS settings: named alike across clouds, defaults and bounds as S3's, and every
mistake refused in one line naming the setting (no traceback, no secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsm.api.errors import ConfigException
from rsm.cli.main import main
from rsm.config.keyring import Keyring, keyring_for
from rsm.config.kms import KmsKeys, is_kms_key, kms_key
from rsm.config.settings import SETTINGS_BY_NAME, Backend, RsmConfig
from rsm.store.deadlines import Deadlines
from rsm.store.objects import ObjectStore


@pytest.mark.parametrize("cloud", ["s3", "gcs", "azure"])
def test_every_cloud_has_the_same_deadline_settings_and_defaults(cloud: str) -> None:
    config = RsmConfig({"storage.backend": cloud, "storage.azure.account.name": "acct"})
    assert config.backend is Backend(cloud)
    assert Deadlines.of(config, cloud) == Deadlines(connect=5.0, read=20.0, attempts=3, request=60.0)
    for name in ("connect.timeout.ms", "read.timeout.ms", "retry.max.attempts", "request.timeout.ms"):
        assert f"storage.{cloud}.{name}" in SETTINGS_BY_NAME
    for name in ("endpoint.url",):
        assert f"storage.{cloud}.{name}" in SETTINGS_BY_NAME


@pytest.mark.parametrize(
    ("configs", "match"),
    [
        ({"storage.backend": "gcp"}, "storage.backend must be one of file, s3, gcs, azure"),
        ({"storage.backend": "gcs", "storage.gcs.upload.chunk.size": "1000000"}, "multiple of 262144"),
        (
            {"storage.backend": "gcs", "storage.gcs.retry.max.attempts": "0"},
            "storage.gcs.retry.max.attempts must be",
        ),
        (
            {"storage.backend": "azure", "storage.azure.read.timeout.ms": "x"},
            "storage.azure.read.timeout.ms must be an",
        ),
        ({"storage.backend": "azure", "bucket": "ab"}, "3 to 63 characters on Azure"),
        ({"storage.backend": "gcs", "bucket": "ab"}, "3 to 63 characters on GCS"),
        ({"encryption.kms.cache.ttl.ms": "-1"}, "encryption.kms.cache.ttl.ms must be between"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(configs: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigException, match=match) as refused:
        RsmConfig(configs)
    assert "\n" not in str(refused.value)


def test_an_azure_store_without_an_account_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigException, match="storage.azure.account.name"):
        ObjectStore.from_config(RsmConfig({"storage.backend": "azure"}))
    props = tmp_path / "server.properties"
    props.write_text(
        "rsm.config.storage.backend=azure\nrsm.config.storage.azure.account.key=c2VjcmV0LWtleS0xMjM0NTY3OA==\n"
    )
    assert main(["store", "--config", str(props), "du"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "storage.azure.account" in err, err
    assert "c2VjcmV0LWtleS0xMjM0NTY3OA" not in err


def test_describe_masks_the_azure_key_and_shows_the_rest() -> None:
    config = RsmConfig(
        {
            "storage.backend": "azure",
            "storage.azure.account.name": "acct",
            "storage.azure.account.key": "c2VjcmV0LWtleS0xMjM0NTY3OA==",
            "storage.gcs.token": "anon",
        }
    )
    shown = {e.name: e.value for e in config.describe()}
    assert shown["storage.azure.account.key"] == "[hidden]" and shown["storage.azure.account.name"] == "acct"
    assert "c2VjcmV0" not in repr(config)


def test_kms_key_ids() -> None:
    assert is_kms_key("kms:alias/rsm") and not is_kms_key("k1") and not is_kms_key(None)
    assert (
        kms_key("kms:arn:aws:kms:eu-west-1:111122223333:key/abc")
        == "arn:aws:kms:eu-west-1:111122223333:key/abc"
    )
    with pytest.raises(ConfigException, match="names no KMS key"):
        kms_key("kms:")
    # a keyring without a file still takes kms: ids; a keyring id is refused, naming the setting
    keyring = keyring_for(RsmConfig({"storage.backend": "s3"}))
    assert isinstance(keyring, Keyring) and isinstance(keyring.kms, KmsKeys)
    assert "kms:alias/x" in keyring and "k1" not in keyring
    from rsm.api.errors import RemoteStorageException

    with pytest.raises(RemoteStorageException, match=r"no keyring is configured \(encryption.keyring.path\)"):
        keyring.wrap("k1", b"\0" * 32, b"ctx")


def test_encryption_with_a_kms_key_needs_no_keyring_file() -> None:
    from rsm import RemoteStorageManager

    rsm = RemoteStorageManager()
    with pytest.raises(ConfigException, match="needs encryption.keyring.path or a KMS key"):
        rsm.configure(
            {"storage.backend": "file", "storage.file.root": "/tmp/x", "encryption.enabled": "true"}
        )
    rsm.close()
