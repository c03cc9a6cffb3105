"""The settings of the GCS and Azure Blob stores and of AWS KMS keys, named alike across clouds.

Why alike: operators, the README, `rsm store` and the reader name a cloud's settings the same way whatever
the cloud (`storage.<cloud>.endpoint.url`, `storage.<cloud>.connect.timeout.ms`, ...), and each cloud's
deadlines mean what S3's do (`rsm.store.s3.s3_deadlines` says why those defaults): a connect and a read
timeout per attempt, a number of attempts, and a bound on one whole request, retries included. Kept apart
from `rsm.config.settings` so that module stays one concept (the core settings and their resolution).
"""

from __future__ import annotations

from rsm.api.errors import ConfigException
from rsm.config.gcs_token import _gcs_token
from rsm.config.setting_types import Setting, _int, _size, _str, _url

# each cloud's deadlines, with S3's defaults (rsm.store.s3.s3_deadlines says why)
_DEADLINES = (
    ("connect.timeout.ms", "5000", 300_000, "wait for a connection at most this long (per attempt)"),
    (
        "read.timeout.ms",
        "20000",
        300_000,
        "wait for the next bytes of an answer at most this long (per attempt)",
    ),
    ("retry.max.attempts", "3", 20, "attempts per request, the first included"),
    (
        "request.timeout.ms",
        "60000",
        3_600_000,
        "the whole of one store request, attempts and backoff included; keep it below "
        "bridge.request.timeout.ms / 2",
    ),
)


def _deadline_settings(prefix: str, label: str) -> tuple[Setting, ...]:
    def bounded(hi: int, lo: int = 1):  # noqa: ANN202 - a parser
        return lambda k, v: _int(k, v, lo, hi)

    return tuple(
        Setting(f"{prefix}.{name}", default, bounded(hi), f"{label}: {doc}")
        for name, default, hi, doc in _DEADLINES
    )


def _gcs_chunk(key: str, value: str) -> int:
    """GCS takes a resumable upload's chunks in multiples of 256 KiB (the last one excepted)."""
    n = _size(key, value, 256 << 10, 5 << 30)
    if n % (256 << 10):
        raise ConfigException(f"config {key} must be a multiple of 262144 bytes (256 KiB), got {n}")
    return n


CLOUD_SETTINGS: tuple[Setting, ...] = (
    Setting("storage.gcs.endpoint.url", None, _url, "GCS endpoint (fake-gcs-server...); Google's when unset"),
    Setting("storage.gcs.project", None, _str, "GCS project (else the credentials' own)"),
    Setting(
        "storage.gcs.token",
        None,
        _gcs_token,
        "GCS credentials: a path to a service account or authorized user JSON file, or anon (an emulator); "
        "unset: Google's default chain (GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server)",
    ),
    Setting(
        "storage.gcs.upload.chunk.size",
        str(32 << 20),
        _gcs_chunk,
        "chunk size of resumable uploads (a multiple of 256 KiB); smaller objects are one request",
    ),
    *_deadline_settings("storage.gcs", "GCS"),
    Setting(
        "storage.azure.endpoint.url",
        None,
        _url,
        "Azure Blob endpoint, e.g. Azurite's http://127.0.0.1:10000/devstoreaccount1; unset: "
        "https://<account>.blob.core.windows.net",
    ),
    Setting("storage.azure.account.name", None, _str, "Azure storage account"),
    Setting(
        "storage.azure.account.key",
        None,
        _str,
        "Azure storage account key (else the SDK's DefaultAzureCredential chain)",
        sensitive=True,
    ),
    Setting(
        "storage.azure.block.size",
        str(8 << 20),
        lambda k, v: _size(k, v, 64 << 10, 4000 << 20),
        "block size of block blob uploads; smaller objects are one request",
    ),
    *_deadline_settings("storage.azure", "Azure"),
)

KMS_SETTINGS: tuple[Setting, ...] = (
    Setting("encryption.kms.endpoint.url", None, _url, "AWS KMS endpoint for kms: key ids; AWS's when unset"),
    Setting("encryption.kms.region", None, _str, "AWS KMS region (else the SDK's chain)"),
    *_deadline_settings("encryption.kms", "AWS KMS"),
    Setting(
        "encryption.kms.cache.keys",
        "1000",
        lambda k, v: _int(k, v, 0, 1_000_000),
        "decrypted data keys of kms: key ids kept in memory, at most",
    ),
    Setting(
        "encryption.kms.cache.ttl.ms",
        "3600000",
        lambda k, v: _int(k, v, 0, 86_400_000),
        "how long a decrypted data key stays in memory",
    ),
)
