"""Store failures as Kafka's exceptions, naming the partition, the segment and the object.

Kafka's RemoteLogManager tells "not found" (`RemoteResourceNotFoundException`: an optional index, a
segment deleted meanwhile) from every other failure (`RemoteStorageException`: it retries), so every
store call of the copy, fetch and delete paths runs inside `StoreErrors`, which says which it was and where.
Messages never carry anything that looks like a credential (`safe_message`).
"""

from __future__ import annotations

from types import TracebackType

from rsm.api.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.api.metadata import RemoteLogSegmentMetadata
from rsm.config.redact import redact_text
from rsm.store.objects import ObjectNotFound, ObjectStore, is_missing_bucket
from rsm.stored.manifest import ManifestError
from rsm.stored.pieces import TransformError


class StoreErrors:
    """``with``: store failures become Kafka's exceptions, naming partition, segment and object.

    A class, not a generator context manager, and the message is built only when something failed: every
    fetch enters one, and both cost more than the rest of opening a cached segment.
    """

    __slots__ = ("_store", "_what", "_metadata", "_bucket", "_key")

    def __init__(
        self, store: ObjectStore, what: str, metadata: RemoteLogSegmentMetadata, bucket: str, key: str
    ) -> None:
        self._store, self._what, self._metadata, self._bucket, self._key = store, what, metadata, bucket, key

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None or isinstance(exc, RemoteStorageException) or not isinstance(exc, Exception):
            return False
        seg = self._metadata.remote_log_segment_id
        where = (
            f"{self._what} of segment {seg.id_base64} of {seg.topic_id_partition}, "
            f"object {self._store.describe(self._bucket, self._key)}"
        )
        if is_missing_bucket(exc) or (
            isinstance(exc, (ObjectNotFound, FileNotFoundError)) and self._no_bucket()
        ):
            # not "not found": a missing bucket is the configuration's fault (a read of an object in it is
            # answered 404 like a missing object, so on S3 a not-found asks once whether the bucket is there)
            raise RemoteStorageException(f"{where}: {self._store.missing_bucket(self._bucket)}") from None
        if isinstance(exc, (ObjectNotFound, FileNotFoundError)):
            raise RemoteResourceNotFoundException(f"{where}: not found") from None
        if isinstance(exc, (TransformError, ManifestError)):
            raise RemoteStorageException(f"{where}: {exc}") from None
        # every other storage failure becomes Kafka's exception too; on a cloud, after the attempts its
        # setting allows (a timeout names its own setting already; a refusal is not tried again)
        tried = ""
        if self._store.request_timeout is not None and not isinstance(exc, (TimeoutError, PermissionError)):
            cloud = self._store.backend.value
            tried = f" (after up to {self._store.attempts} attempt(s): storage.{cloud}.retry.max.attempts)"
        raise RemoteStorageException(f"{where}: {type(exc).__name__}: {safe_message(exc)}{tried}") from exc

    def _no_bucket(self) -> bool:
        """Whether the cloud says the bucket does not exist (False when it is there, or cannot be asked)."""
        try:
            return self._store.bucket_exists(self._bucket) is False
        except Exception:  # noqa: BLE001 - the not-found stands; the question was only for a better message
            return False


def safe_message(exc: BaseException) -> str:
    """An exception's message without anything that looks like a credential (`rsm.config.redact.redact_text`:
    URLs' user information, signatures, tokens, the configured credentials), cut at anything else that
    might introduce one; on one line (an SDK's message may carry a whole XML or JSON error body)."""
    text = " ".join(redact_text(str(exc)).split())
    for marker in (
        "Signature=", "X-Amz-Credential=", "X-Amz-Security-Token=", "secret", "Authorization",
        "SharedKey", "sig=", "access_token",
    ):  # fmt: skip
        idx = text.find(marker)
        if idx >= 0:
            text = text[:idx] + "[redacted]"
    return text[:500]
