"""GCS and Azure rows of benchmarks/rsm_copy_fetch.py: the RSM's copy and fetch against each emulator's own
plain upload and download of the same bytes, in the same run (target: at least 0.6x, as S3).

The emulators are the suite's (fake-gcs-server and Azurite, installed into `.cache/` by tests/harness),
on loopback. Each contender runs `repeat` times, alternating with the other, and the best of each is kept,
so a ratio compares runs made under the same load (the machine is shared):

- copy: `copy_log_segment_data` of the segment, compression and encryption off (the bytes the plain upload
  sends), against the SDK uploading the segment file (gcsfs's `put_file`, the Azure SDK's `upload_blob`);
- fetch: a cold RSM fetching the whole segment (`fetch_log_segment` from 0, read to the end) against the
  SDK downloading the stored object (gcsfs's `cat_file`, the Azure SDK's `download_blob().readall()`).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import metadata_for

from rsm import LogConfig, RemoteStorageManager

MiB = 1 << 20
TESTS = Path(__file__).resolve().parents[1] / "tests"
PLAIN = {"unchecked.rsm.compression.enabled": "false"}


def start_emulators() -> dict[str, Any]:
    """fake-gcs-server and Azurite started (installed first when missing): name -> server."""
    sys.path.insert(0, str(TESTS))
    from harness.clouds import AzuriteServer, FakeGcsServer
    from harness.emulators import azurite_blob_command, fake_gcs_command

    return {
        "gcs": FakeGcsServer(binary=fake_gcs_command()).start(),
        "azure": AzuriteServer(script=azurite_blob_command()).start(),
    }


def _plain(name: str, server: Any, bucket: str) -> tuple[Callable[[Path, str], None], Callable[[str], bytes]]:
    """The SDK's own upload of a file and download of an object."""
    if name == "gcs":
        fs = server.filesystem()
        return (lambda path, key: fs.put_file(str(path), f"{bucket}/{key}")), (
            lambda key: bytes(fs.cat_file(f"{bucket}/{key}"))
        )
    container = server.blob_service().get_container_client(bucket)

    def upload(path: Path, key: str) -> None:
        with path.open("rb") as f:
            container.get_blob_client(key).upload_blob(f, overwrite=True, max_concurrency=1)

    return upload, lambda key: container.get_blob_client(key).download_blob(max_concurrency=1).readall()


def measure(name: str, server: Any, seg: tuple[str, int, int], chunk: int, repeat: int) -> dict[str, float]:
    path, last, size = Path(seg[0]), seg[1], seg[2]
    bucket = server.make_bucket()
    configs = server.rsm_configs(bucket=bucket, **{"chunk.size": str(chunk)})
    upload, download = _plain(name, server, bucket)
    md, data = metadata_for(path, last, size)
    original = path.read_bytes()
    best = {"copy": 0.0, "plain_upload": 0.0, "fetch": 0.0, "plain_download": 0.0}

    def speed(seconds: float) -> float:
        return size / MiB / seconds

    custom = None
    for _ in range(repeat):
        key = f"plain/{uuid.uuid4().hex}.log"
        start = time.perf_counter()
        upload(path, key)
        best["plain_upload"] = max(best["plain_upload"], speed(time.perf_counter() - start))
        rsm = RemoteStorageManager()
        rsm.configure(configs)
        rsm.store.bucket_exists(bucket)  # an open connection, as a running broker has
        start = time.perf_counter()
        custom = rsm.copy_log_segment_data(md, data, LogConfig(PLAIN))
        best["copy"] = max(best["copy"], speed(time.perf_counter() - start))
        rsm.close()

        start = time.perf_counter()
        got = download(key)
        best["plain_download"] = max(best["plain_download"], speed(time.perf_counter() - start))
        assert got == original
        reader = RemoteStorageManager()  # cold caches
        reader.configure(configs)
        reader.store.bucket_exists(bucket)
        start = time.perf_counter()
        with reader.fetch_log_segment(dataclasses.replace(md, custom_metadata=custom), 0) as stream:
            fetched = stream.read()
        best["fetch"] = max(best["fetch"], speed(time.perf_counter() - start))
        reader.close()
        assert fetched == original, "fetched bytes differ from the segment"
    return {
        **{f"{k}_mb_s": v for k, v in best.items()},
        "copy_ratio": best["copy"] / best["plain_upload"],
        "fetch_ratio": best["fetch"] / best["plain_download"],
    }
