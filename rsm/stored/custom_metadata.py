"""The custom metadata a copy returns: where the segment went, in at most 128 bytes.

Why in the stored format: the copy writes these bytes, Kafka keeps them, and fetch, delete and the tools
read them back to find the segment's objects, so their encoding belongs to none of those paths.

Kafka stores these bytes with the segment's metadata and passes them back to fetch and delete. They record
the location (bucket and prefix) the segment was written to, so a segment stays reachable after the
topic's `unchecked.rsm.bucket` or `unchecked.rsm.prefix` changes. Everything else (chunking, key id,
compression) lives in the manifest at that location.

Encoding (version 1)::

    0x01 | u8 bucket length | bucket (UTF-8) | u8 prefix length | prefix (UTF-8)

`decode` checks the bucket and prefix with the same rules as the config (`rsm.api.names`): these bytes come back
from Kafka's metadata topic, and a crafted location must not make a delete or fetch leave the store.

Kafka's `remote.log.metadata.custom.metadata.max.bytes` defaults to 128 and a larger value makes the broker
delete the upload and stop tiering the partition, so the size is bounded by construction: the config layer
limits buckets to 63 bytes (S3's limit) and prefixes to 60, and `encode` refuses anything larger, before
anything is uploaded.
"""

from __future__ import annotations

from rsm.api.errors import RemoteStorageException
from rsm.api.metadata import CustomMetadata
from rsm.api.names import bucket_problem, prefix_problem
from rsm.stored.layout import Location

VERSION = 1
MAX_BYTES = 128


def encode(location: Location, max_bytes: int = MAX_BYTES) -> CustomMetadata:
    bucket, prefix = location.bucket.encode(), location.prefix.encode()
    if len(bucket) > 255 or len(prefix) > 255:
        raise RemoteStorageException(f"location {location} too long for custom metadata")
    value = bytes([VERSION, len(bucket)]) + bucket + bytes([len(prefix)]) + prefix
    if len(value) > max_bytes:
        raise RemoteStorageException(
            f"custom metadata for location {location} would take {len(value)} bytes, over the broker's "
            f"limit of {max_bytes}: shorten unchecked.rsm.bucket / unchecked.rsm.prefix"
        )
    return CustomMetadata(value)


def decode(custom: CustomMetadata | bytes) -> Location:
    value = custom.value if isinstance(custom, CustomMetadata) else bytes(custom)
    try:
        if value[0] != VERSION:
            raise ValueError(f"unknown version {value[0]}")
        blen = value[1]
        bucket = value[2 : 2 + blen].decode()
        plen = value[2 + blen]
        prefix = value[3 + blen : 3 + blen + plen].decode()
        if len(value) != 3 + blen + plen or len(bucket.encode()) != blen:
            raise ValueError("length mismatch")
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise RemoteStorageException(f"custom metadata {value.hex()} is not this RSM's: {exc}") from None
    # whoever can write Kafka's metadata topic writes these bytes: the location must not lead out of the store
    for what, name, problem in (
        ("bucket", bucket, bucket_problem(bucket)),
        ("prefix", prefix, prefix_problem(prefix)),
    ):
        if problem:
            raise RemoteStorageException(
                f"custom metadata {value.hex()} names an unusable {what} {name!r}: it {problem}"
            )
    return Location(bucket, prefix)
