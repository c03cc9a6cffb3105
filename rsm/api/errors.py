"""Exceptions of the RemoteStorageManager, mirroring Kafka's `org.apache.kafka.server.log.remote.storage`.

Kafka's RemoteLogManager treats `RemoteResourceNotFoundException` specially (a missing segment or a missing
optional index such as the transaction index is not a storage fault), so the two are kept distinct; every
other failure is a plain `RemoteStorageException` whose message names the topic-partition, the segment and
the object involved, and never a secret.
"""

from __future__ import annotations


class RemoteStorageException(Exception):
    """Any failure of a remote storage operation (Kafka's `RemoteStorageException`)."""


class InvalidArgumentException(RemoteStorageException, ValueError):
    """A value handed to the RSM is refused: a wrong type, an offset or position out of range, or a name
    (topic, bucket, prefix, object key) that could address storage outside where it belongs.

    A RemoteStorageException, so every refusal of the public API is one of Kafka's exceptions (the bridge
    answers it as such), and a ValueError, so callers that checked values with ``except ValueError`` before
    these became RSM exceptions keep working.
    """


class RemoteResourceNotFoundException(RemoteStorageException):
    """The segment or one of its indexes does not exist in the store (Kafka's exception of that name)."""


class SegmentIntegrityError(RemoteStorageException):
    """A segment refused before upload: a batch CRC, an offset or a size does not hold.

    Carries the file, the byte position of the faulty batch and the fault, so an operator can inspect it
    with `rsm dump-log`.
    """

    def __init__(self, file: str, position: int, reason: str) -> None:
        super().__init__(f"corrupt segment {file} at byte position {position}: {reason}")
        self.file = file
        self.position = position
        self.reason = reason


class RecordValidationError(RemoteStorageException):
    """A record validation policy rejected records of a segment whose topic says to fail the copy."""


class InvalidRecordException(Exception):
    """Raised by a `RecordValidationPolicy` to reject one record (Kafka's `InvalidRecordException`)."""


class ConfigException(RemoteStorageException):
    """A configuration value is missing or invalid; the message names the key, never a secret value."""
