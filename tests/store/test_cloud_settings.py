"""The GCS, Azure and KMS settings: named alike across clouds, defaults and bounds as S3's, and every
mistake refused in one line naming the setting (no traceback, no secret)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from rsm.api.errors import ConfigException
from rsm.cli.main import main
from rsm.config.cloud_settings import CLOUD_SETTINGS
from rsm.config.gcs_token import KEYWORDS, REQUIRED
from rsm.config.keyring import Keyring, keyring_for
from rsm.config.kms import KmsKeys, is_kms_key, kms_key
from rsm.config.setting_types import Setting
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
        # names each cloud refuses, at configure rather than at the first copy
        (
            {"storage.backend": "azure", "bucket": "my.bucket"},
            "bucket .*'my.bucket' must not hold '.' on Azure",
        ),
        ({"storage.backend": "azure", "bucket": "a--b"}, "'a--b' must not hold '--' on Azure"),
        ({"storage.backend": "azure", "catalog.bucket": "x.y"}, "config catalog.bucket .*Azure"),
        ({"storage.backend": "gcs", "bucket": "google-logs"}, "'google-logs' must not begin with 'goog'"),
        ({"storage.backend": "s3", "bucket": "xn--abc"}, "must not begin with 'xn--'"),
        # malformed endpoints: the key named, not a ValueError from the SDK
        (
            {"storage.backend": "gcs", "storage.gcs.endpoint.url": "http://[::1"},
            "storage.gcs.endpoint.url is not a URL",
        ),
        (
            {"storage.backend": "azure", "storage.azure.endpoint.url": "http://[::1"},
            "storage.azure.endpoint.url is not",
        ),
        ({"storage.s3.endpoint.url": "localhost:9000"}, "storage.s3.endpoint.url must be an http"),
        ({"encryption.kms.endpoint.url": "http://host:99999"}, "encryption.kms.endpoint.url is not a URL"),
        # KMS's deadlines are settings like the stores'
        ({"encryption.kms.request.timeout.ms": "0"}, "encryption.kms.request.timeout.ms must be between"),
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


def test_a_gcs_token_is_a_keyword_or_a_credentials_file_and_never_echoed(tmp_path: Path) -> None:
    token = "ya29.a0AfB_byC-secret-looking-bearer-token-0123456789"
    with pytest.raises(ConfigException) as refused:
        RsmConfig({"storage.backend": "gcs", "storage.gcs.token": token})
    assert token not in str(refused.value) and "storage.gcs.token" in str(refused.value)
    bad = tmp_path / "sa.json"
    bad.write_text('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE')
    with pytest.raises(ConfigException, match=r"sa\.json is not JSON \(line 1\)") as refused:
        RsmConfig({"storage.backend": "gcs", "storage.gcs.token": str(bad)})
    assert "PRIVATE KEY" not in str(refused.value)
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"type": "authorized_user", "client_id": "i", "client_secret": "s"}))
    with pytest.raises(ConfigException, match="authorized_user.*lacks refresh_token"):
        RsmConfig({"storage.backend": "gcs", "storage.gcs.token": str(user)})
    with pytest.raises(ConfigException, match="is not a file"):
        RsmConfig({"storage.backend": "gcs", "storage.gcs.token": str(tmp_path / "missing.json")})
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"type": "authorized_user", "client_id": "i", "client_secret": "s",
                                "refresh_token": "r"}))  # fmt: skip
    assert RsmConfig({"storage.backend": "gcs", "storage.gcs.token": str(good)}).get(
        "storage.gcs.token"
    ) == str(good)
    assert (
        RsmConfig({"storage.backend": "gcs", "storage.gcs.token": "anon"}).get("storage.gcs.token") == "anon"
    )


def test_a_black_holed_kms_fails_within_its_deadline_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KMS endpoint that accepts connections and never answers: the request ends within
    encryption.kms.request.timeout.ms (not botocore's attempts x read timeout), and the line names it."""
    from rsm.api.errors import RemoteStorageException
    from rsm.config.kms import KmsKeys

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        config = RsmConfig({
            "storage.backend": "s3",
            "encryption.kms.endpoint.url": f"http://127.0.0.1:{hole.getsockname()[1]}",
            "encryption.kms.region": "us-east-1",
            "encryption.kms.read.timeout.ms": "60000",
            "encryption.kms.request.timeout.ms": "1500",
        })  # fmt: skip
        keys = KmsKeys.from_config(config)
        started = time.monotonic()
        with pytest.raises(RemoteStorageException, match=r"encryption\.kms\.request\.timeout\.ms") as failed:
            keys.generate("kms:alias/k", b"segment")
        assert time.monotonic() - started < 30  # bounded by the 1.5 s setting, not by 3 x 60 s of attempts
        assert "\n" not in str(failed.value) and "kms:alias/k" in str(failed.value)
    finally:
        hole.close()


def test_a_gcs_token_keyword_or_a_complete_credentials_file_is_taken(tmp_path: Path) -> None:
    """gcsfs's own keywords are taken as they are; a credentials file of each kind Google's libraries read,
    holding the fields they need, is taken as its path."""
    for keyword in KEYWORDS:
        config = RsmConfig({"storage.backend": "gcs", "storage.gcs.token": f" {keyword} "})
        assert config.get("storage.gcs.token") == keyword
    for kind, fields in REQUIRED.items():
        credentials = tmp_path / f"{kind}.json"
        credentials.write_text(json.dumps({"type": kind, **dict.fromkeys(fields, "x")}))
        config = RsmConfig({"storage.backend": "gcs", "storage.gcs.token": str(credentials)})
        assert config.get("storage.gcs.token") == str(credentials)


def test_every_default_parses_and_the_clouds_name_their_settings_alike() -> None:
    """A setting's default passes its own parser (a broken default would only show when a user leaves the
    key unset), and each cloud's store takes its endpoint and deadlines under the same names."""
    for setting in SETTINGS_BY_NAME.values():
        assert isinstance(setting, Setting)
        if setting.default is not None:
            setting.parse(setting.name, setting.default)
    assert {s.name for s in CLOUD_SETTINGS} <= set(SETTINGS_BY_NAME)
    shared = (
        "endpoint.url",
        "connect.timeout.ms",
        "read.timeout.ms",
        "request.timeout.ms",
        "retry.max.attempts",
    )
    missing = [f"storage.{c}.{s}" for c in ("s3", "gcs", "azure") for s in shared]
    assert [name for name in missing if name not in SETTINGS_BY_NAME] == []
