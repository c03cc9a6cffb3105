"""Secrets in output, one leak per test: a URL's credentials in the configured-RSM
INFO line and `describe`, a keyring with id and key swapped, a secret pasted into the wrong key (config,
overlay, `topic-config set --dry-run`), and the session token in botocore's DEBUG log.
tests/tools/test_secrets_scan.py scans everything a whole flow writes for the same bytes."""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, write_keyring

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.api.metadata import uuid_to_base64
from rsm.bridge.server import mask_configs
from rsm.cli.main import main
from rsm.config.keyring import Keyring, generate_key
from rsm.config.redact import looks_like_key_material, looks_secret, redact_url
from rsm.config.settings import RsmConfig, parse_topic_config
from rsm.store.errors import safe_message
from rsm.stored.overlay import validate_overlay_configs

USER, PASSWORD = "tenant-admin", "pw-Zq81-url-secret"
AWS_SECRET = "wJalrXUtnFI7K7MDENG+bPxRfiCY3kEY9xAmPLE2"  # the shape of an AWS secret access key (40)


def _url_with_credentials(endpoint: str) -> str:
    scheme, rest = endpoint.split("://", 1)
    return f"{scheme}://{USER}:{PASSWORD}@{rest}"


def test_redact_url_hides_user_information_and_secret_query_parameters() -> None:
    url = f"https://{USER}:{PASSWORD}@s3.example.com:9000/b/k?X-Amz-Security-Token=tok123&uploadId=7&sig=abc"
    shown = redact_url(url)
    assert (
        shown
        == "https://[redacted]@s3.example.com:9000/b/k?X-Amz-Security-Token=[redacted]&uploadId=7&sig=[redacted]"
    )
    assert redact_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"


def test_what_looks_secret() -> None:
    assert looks_like_key_material(generate_key()) and looks_secret(generate_key())
    assert looks_secret(AWS_SECRET) and looks_secret("AKIAIOSFODNN7EXAMPLE")
    assert looks_secret(base64.b64encode(os.urandom(300)).decode())  # a session token
    for ordinary in ("k1", "tiers/", "Tenant42/ProductionCluster7/TopicsArchive99/", "4MiB", "my.mod:Policy"):
        assert not looks_secret(ordinary), ordinary


def test_the_configured_info_line_and_describe_hide_url_credentials(
    tmp_path: Path, s3_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = s3_server.make_bucket()
    url = _url_with_credentials(s3_server.endpoint_url)
    configs = s3_server.rsm_configs(**{"bucket": bucket, "storage.s3.endpoint.url": url})
    caplog.set_level(logging.INFO)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        # the store works: credentials in the endpoint URL are not for S3 (requests are signed)
        tip = TopicIdPartition(uuid.uuid4(), "url", 0)
        seg = make_segment(tmp_path / "seg", tip, batches=3)
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        described = {e.name: e.value for e in rsm.config.describe()}
        shown = [repr(rsm.config), str(described), caplog.text, str(mask_configs(configs))]
    finally:
        rsm.close()
    assert "configured" in caplog.text
    assert (
        described["storage.s3.endpoint.url"] == f"http://[redacted]@{s3_server.endpoint_url.split('://')[1]}"
    )
    assert "storage.s3.endpoint.url carries credentials" in caplog.text  # said once, naming the key
    for text in shown:
        assert PASSWORD not in text and USER not in text


def test_a_keyring_with_id_and_key_swapped_names_the_entry_without_either(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "keyring.json"
    path.write_text(json.dumps({"k0": generate_key(), key: "k1"}))
    with pytest.raises(ConfigException) as info:
        Keyring(path)
    message = str(info.value)
    assert key not in message and base64.b64decode(key).hex() not in message
    assert str(path) in message and "entry 2" in message and "swapped" in message
    # a key that is no base64: the id is named, the value is not shown
    path.write_text(json.dumps({"k1": AWS_SECRET + "!"}))
    with pytest.raises(ConfigException, match="the key of id 'k1' is not base64") as info:
        Keyring(path)
    assert AWS_SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("chunk.size", AWS_SECRET),
        ("compression.enabled", AWS_SECRET),
        ("encryption.key.id", generate_key()),
        ("prefix", AWS_SECRET),
        ("bucket", generate_key()),
        ("storage.s3.region", "AKIAIOSFODNN7EXAMPLE"),
    ],
    ids=lambda v: v if "." in v or v in ("prefix", "bucket") else "secret",  # no secret in a test's name
)
def test_a_secret_pasted_into_the_wrong_broker_key_is_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigException) as info:
        RsmConfig({"storage.backend": "file", "storage.file.root": "/tmp/x", key: value})
    assert key in str(info.value) and value not in str(info.value)
    assert "looks like a secret" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("unchecked.rsm.prefix", AWS_SECRET),
        ("unchecked.rsm.encryption.key.id", generate_key()),
        ("unchecked.rsm.chunk.size", AWS_SECRET),
        ("unchecked.record.validation.policy", generate_key()),
    ],
    ids=lambda v: v if v.startswith("unchecked.") else "secret",  # no secret in a test's name
)
def test_a_secret_pasted_into_the_wrong_topic_key_is_refused_naming_the_key(key: str, value: str) -> None:
    for check in (lambda: parse_topic_config(key, value), lambda: validate_overlay_configs({key: value})):
        with pytest.raises(ConfigException) as info:
            check()
        assert key in str(info.value) and value not in str(info.value)


def test_topic_config_dry_run_never_echoes_a_pasted_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    keyring = write_keyring(tmp_path / "keyring.json")
    props = tmp_path / "server.properties"
    props.write_text(
        "\n".join(
            [
                "rsm.config.storage.backend=file",
                f"rsm.config.storage.file.root={tmp_path / 'store'}",
                f"rsm.config.encryption.keyring.path={keyring}",
                f"rsm.config.storage.s3.endpoint.url=https://{USER}:{PASSWORD}@s3.example.com",
                "",
            ]
        )
    )
    base = [
        "topic-config",
        "--config",
        str(props),
        "set",
        "--topic",
        "t",
        f"--topic-id={uuid_to_base64(uuid.uuid4())}",
    ]
    for pasted in (f"unchecked.rsm.encryption.key.id={key}", f"unchecked.rsm.prefix={AWS_SECRET}", key):
        capsys.readouterr()
        rc = main([*base, pasted, "--dry-run"])
        out, err = capsys.readouterr()
        assert rc == 1, out
        assert key not in out + err and AWS_SECRET not in out + err
        assert "looks like a secret" in err
    # a good dry run shows the endpoint without its credentials
    rc = main([*base, "unchecked.rsm.prefix=t/", "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert PASSWORD not in out and USER not in out and "[redacted]@s3.example.com" in out


def test_third_party_debug_logs_never_show_credentials(
    tmp_path: Path, s3_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    token = base64.b64encode(os.urandom(200)).decode()
    key_id = "ASIA" + uuid.uuid4().hex[:16].upper()
    bucket = s3_server.make_bucket()
    configs = s3_server.rsm_configs(
        **{"bucket": bucket, "storage.s3.session.token": token, "storage.s3.access.key.id": key_id}
    )
    caplog.set_level(logging.DEBUG)
    for name in ("botocore", "aiobotocore", "s3fs", "urllib3", "fsspec", "aiohttp"):
        caplog.set_level(logging.DEBUG, logger=name)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "dbg", 0), batches=3)
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()
    assert "botocore" in caplog.text  # DEBUG was on
    assert "X-Amz-Security-Token" in caplog.text or "x-amz-security-token" in caplog.text
    assert token not in caplog.text and key_id not in caplog.text


def test_a_store_failure_message_is_one_line_without_what_an_sdk_put_in_it() -> None:
    """An SDK's error may carry a whole XML body with a presigned URL: the message the RSM raises keeps its
    first words, on one line, and cuts from the first credential-looking marker on."""
    body = (
        "An error occurred (AccessDenied)\n<Error><Code>AccessDenied</Code>\n<Url>https://b.s3/k?"
        "X-Amz-Credential=AKIAEXAMPLE%2F20260101&Signature=0123abcd</Url></Error>"
    )
    message = safe_message(RuntimeError(body))
    assert message.startswith("An error occurred (AccessDenied) <Error>") and message.endswith("[redacted]")
    assert "\n" not in message and "AKIAEXAMPLE" not in message and "0123abcd" not in message
    assert len(safe_message(RuntimeError("x" * 5000))) == 500
