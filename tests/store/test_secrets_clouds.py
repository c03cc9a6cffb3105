"""Secrets of the new stores and keys never reach output: the Azure account key (DEBUG logs of the Azure SDK
and adlfs, `describe`, the configured line, a failure's message), KMS data keys in the clear (botocore's
DEBUG log prints KMS answers and requests whole), and a pasted account key under an ordinary setting."""

from __future__ import annotations

import base64
import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.bridge.server import mask_configs
from rsm.config.kms import KmsKeys
from rsm.config.settings import RsmConfig

DEBUG_LOGGERS = ("azure", "adlfs", "fsspec", "aiohttp", "gcsfs", "google", "botocore", "urllib3")


def test_the_azure_account_key_is_never_shown(
    azurite_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = azurite_server.key
    configs = azurite_server.rsm_configs(bucket=azurite_server.make_bucket())
    caplog.set_level(logging.DEBUG)
    for name in DEBUG_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "az", 0), batches=3)
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        described = {e.name: e.value for e in rsm.config.describe()}
        shown = [repr(rsm.config), str(described), str(mask_configs(configs))]
    finally:
        rsm.close()
    # a failure against a container that is not there
    broken = RemoteStorageManager()
    broken.configure({**configs, "bucket": "no-such-container-25"})
    try:
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        with pytest.raises(RemoteStorageException) as failed:
            broken.fetch_log_segment(dataclasses.replace(md, custom_metadata=None), 0)
        shown.append(str(failed.value))
    finally:
        broken.close()
    assert described["storage.azure.account.key"] == "[hidden]"
    assert "azure" in caplog.text.lower()  # DEBUG was on
    shown.append(caplog.text)
    raw = base64.b64decode(key)
    for text in shown:
        assert key not in text and key.rstrip("=") not in text
        assert raw.hex() not in text


def test_an_account_key_pasted_under_an_ordinary_setting_is_refused(azurite_server: Any) -> None:
    with pytest.raises(ConfigException) as refused:
        RsmConfig({**azurite_server.rsm_configs(), "storage.azure.account.name": azurite_server.key})
    assert azurite_server.key not in str(refused.value) and "storage.azure.account.name" in str(refused.value)


def test_kms_data_keys_never_reach_the_debug_log(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in s3_server.env().items():
        if not name.startswith("AWS_ENDPOINT_URL"):
            monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    for name in DEBUG_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    keys = KmsKeys(s3_server.endpoint_url, s3_server.region, cache_keys=0)
    arn = keys.client().create_key()["KeyMetadata"]["Arn"]
    data_key, wrapped = keys.generate(f"kms:{arn}", b"segment")
    assert keys.unwrap(f"kms:{arn}", wrapped, b"segment") == data_key
    rewrapped = keys.wrap(f"kms:{arn}", data_key, b"segment")
    assert keys.unwrap(f"kms:{arn}", rewrapped, b"segment") == data_key
    assert "GenerateDataKey" in caplog.text or "generate_data_key" in caplog.text.lower()  # DEBUG was on
    for form in (base64.b64encode(data_key).decode(), data_key.hex(), repr(data_key)[2:-1]):
        assert form not in caplog.text
    assert base64.b64encode(data_key).decode() not in repr(keys)
