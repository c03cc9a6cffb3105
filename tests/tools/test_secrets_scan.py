"""A secrets scan of everything a representative run writes.

The run: an RSM configured for S3 (moto) with an access key id, a secret key, a session token and an
endpoint URL carrying `user:password@`, encrypting with a keyring; a copy (multipart), fetches, an index
fetch, a describe, failures (a missing segment, a missing bucket, a secret pasted into the wrong broker
key and topic key, a keyring whose id and key are swapped), `rsm topic-config` (set --dry-run with a
secret pasted into a wrong key, set, describe, list), and a delete; DEBUG logging on for every logger,
botocore's and s3fs's included.

Captured: every log record (formatted, exceptions included), stdout and stderr, every exception's message
and traceback, the custom metadata, and every object in the bucket. None may hold any secret's bytes, nor
their base64 (standard or URL-safe, padded or not) or hex forms.

Records of moto's own server (loggers `moto`, `werkzeug`) are left out: it runs in this process only because
it is the test's S3; a real S3 logs on its own machines.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, read_all

from rsm import IndexType, LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.cli.main import main
from rsm.config.keyring import Keyring, generate_key
from rsm.config.settings import RsmConfig, parse_topic_config

THIRD_PARTY = ("botocore", "aiobotocore", "boto3", "s3fs", "fsspec", "urllib3", "aiohttp", "asyncio")
TEST_SERVER_LOGGERS = ("moto", "werkzeug")


def _random_token(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()[:n]


def _forms(secret: str | bytes) -> set[bytes]:
    """A secret's bytes as text and raw, base64 (standard, URL-safe, padded or not) and hex."""
    raw = secret.encode() if isinstance(secret, str) else secret
    out = {raw, raw.hex().encode()}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        out |= {encode(raw), encode(raw).rstrip(b"=")}
    if isinstance(secret, str):  # a base64 key: its bytes, as a keyring holds it
        try:
            decoded = base64.b64decode(secret, validate=True)
        except ValueError:
            decoded = b""
        if len(decoded) == 32:
            out |= {decoded, decoded.hex().encode(), base64.urlsafe_b64encode(decoded).rstrip(b"=")}
    return {f for f in out if len(f) >= 8}


def test_no_secret_in_anything_a_run_writes(
    tmp_path: Path,
    s3_server: Any,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    access_key_id = "ASIA" + uuid.uuid4().hex[:16].upper()
    secret_key = _random_token(40)
    session_token = _random_token(360)
    url_user, url_password = "scan-user", "pw-" + uuid.uuid4().hex
    keys = {"k1": generate_key(), "k2": generate_key()}
    secrets: dict[str, str] = {
        "access key id": access_key_id,
        "secret key": secret_key,
        "session token": session_token,
        "URL user information": f"{url_user}:{url_password}",
        "URL password": url_password,
        "keyring key k1": keys["k1"],
        "keyring key k2": keys["k2"],
    }
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps(keys))
    bucket = s3_server.make_bucket()
    scheme, host = s3_server.endpoint_url.split("://", 1)
    configs = {
        "storage.backend": "s3",
        "storage.s3.endpoint.url": f"{scheme}://{url_user}:{url_password}@{host}",
        "storage.s3.region": s3_server.region,
        "storage.s3.access.key.id": access_key_id,
        "storage.s3.secret.access.key": secret_key,
        "storage.s3.session.token": session_token,
        "storage.s3.multipart.part.size": str(5 << 20),
        "bucket": bucket,
        "encryption.enabled": "true",
        "encryption.keyring.path": str(keyring),
        "encryption.key.id": "k1",
        "chunk.size": str(1 << 20),
    }
    props = tmp_path / "server.properties"
    props.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))

    caplog.set_level(logging.DEBUG)
    for name in THIRD_PARTY:
        caplog.set_level(logging.DEBUG, logger=name)
    written: list[str] = []  # exceptions, return values, stdout and stderr

    def failing(call: Callable[[], object]) -> None:
        """Run a call that must fail; keep its message and its whole traceback."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - every failure's text is scanned
            written.append(str(exc))
            written.append("".join(traceback.format_exception(exc)))
        else:
            pytest.fail(f"{call} did not fail")

    def cli(*args: str) -> int:
        capsys.readouterr()
        rc = main(["-vv", "topic-config", "--config", str(props), *args])
        out, err = capsys.readouterr()
        written.extend([out, err])
        return rc

    tip = TopicIdPartition(uuid.uuid4(), "scan", 0)
    seg = make_segment(
        tmp_path / "seg", tip, batches=300, records_per_batch=20, value_size=1000, compressible=False
    )
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert custom is not None
        written.append(repr(custom))
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.data.log_segment.read_bytes()
        assert read_all(rsm.fetch_log_segment(md, 1000, 5000)) == seg.data.log_segment.read_bytes()[1000:5001]
        assert read_all(rsm.fetch_index(md, IndexType.OFFSET)) == seg.data.offset_index.read_bytes()
        written += [repr(rsm.config), repr(rsm.describe_topic_config(tip))]
        other = make_segment(tmp_path / "other", tip, base_offset=10_000, batches=3)
        failing(lambda: rsm.fetch_log_segment(other.metadata, 0))
        missing = LogConfig({"unchecked.rsm.bucket": "no-such-bucket-" + uuid.uuid4().hex[:8]})
        failing(lambda: rsm.copy_log_segment_data(other.metadata, other.data, missing))
        failing(lambda: RsmConfig({**configs, "chunk.size": secret_key}))
        failing(lambda: RsmConfig({**configs, "encryption.key.id": keys["k2"]}))
        failing(lambda: parse_topic_config("unchecked.rsm.prefix", session_token[:48]))

        swapped = tmp_path / "swapped.json"
        swapped.write_text(json.dumps({"k1": keys["k1"], keys["k2"]: "k2"}))
        failing(lambda: Keyring(swapped))
        failing(
            lambda: RemoteStorageManager().configure({**configs, "encryption.keyring.path": str(swapped)})
        )

        topic = ["--topic", tip.topic, f"--topic-id={uuid_to_base64(tip.topic_id)}"]
        assert cli("set", *topic, f"unchecked.rsm.prefix={secret_key}", "--dry-run") == 1
        assert cli("set", *topic, f"unchecked.rsm.encryption.key.id={keys['k2']}", "--dry-run") == 1
        assert cli("set", *topic, keys["k2"], "--dry-run") == 1
        assert cli("set", *topic, "unchecked.rsm.encryption.key.id=k2", "--dry-run") == 0
        assert cli("set", *topic, "unchecked.rsm.encryption.key.id=k2", "--json") == 0
        assert cli("describe", *topic) == 0
        assert cli("describe", *topic, "--json") == 0
        assert cli("list") == 0

        rsm.delete_log_segment_data(md)
    finally:
        rsm.close()

    client = s3_server.boto3_client()
    stored = {
        o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    }
    assert any("topic-configs" in k for k in stored), sorted(stored)  # the overlay was written
    records = [r for r in caplog.records if not r.name.startswith(TEST_SERVER_LOGGERS)]
    assert any(r.name.startswith("botocore") and r.levelno == logging.DEBUG for r in records)
    handler = caplog.handler
    logs = [handler.format(r) for r in records]
    sources: dict[str, bytes] = {
        "logs": "\n".join(logs).encode(),
        "stdout, stderr, exceptions and return values": "\n".join(written).encode(),
        **{f"object {k}": v for k, v in stored.items()},
    }
    found = [
        f"{what} in {where}"
        for what, secret in secrets.items()
        for where, blob in sources.items()
        if any(form in blob for form in _forms(secret))
    ]
    assert not found, found
