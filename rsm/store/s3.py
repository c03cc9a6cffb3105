"""S3 through s3fs: the filesystem the store speaks to, its deadlines, and the multipart writer.

Credentials come from the config or, when absent, from the standard AWS chain (environment, shared files,
instance roles) through botocore; they are never logged: they are registered with `rsm.config.redact`,
whose log redaction cleans botocore's and s3fs's DEBUG records too. Every request has deadlines
(`s3_deadlines`); objects larger than one part go up as a multipart upload completed only on commit and
aborted on any failure, so S3 never shows a partial object.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from rsm.config.redact import (
    endpoint_without_credentials,
    install_log_redaction,
    redact_url,
    register_secrets,
)
from rsm.config.settings import Backend, RsmConfig
from rsm.store.objects import ObjectInfo, ObjectStore, endpoint_of, modified_time, register_store
from rsm.store.writes import TEMP_MARK, IOStats, ObjectWriter, UnfinishedWrite

log = logging.getLogger(__name__)


def s3_deadlines(config: RsmConfig) -> tuple[dict[str, Any], float]:
    """botocore's `Config` keywords (connect and read timeouts, attempts) and the deadline of one request.

    Why these defaults (5 s connect, 20 s read, 3 attempts, 60 s per request): Kafka reads remote data on
    `remote.log.reader.threads` (10) and answers a consumer after `remote.fetch.max.wait.ms` (500 ms)
    whether or not the read is done, but the reader thread stays taken until the RSM returns; through the
    bridge, a request fails after `bridge.request.timeout.ms` (300 s). A fetch makes at most two store
    requests in a row before its first bytes (the manifest, then a chunk; the `.indexes` object for an
    index), so 60 s each keeps a stalled fetch under 120 s: the reader thread comes back well before the
    bridge gives up, and the bridge's timeout stays for the bridge's own failures. Connecting to S3 takes
    milliseconds; 5 s covers two lost SYNs (TCP's initial retransmission timeout is 1 s, then 2 s). 20 s
    between bytes is far above S3's first-byte latency for a chunk (tens to hundreds of ms) yet ends a
    silent peer in time. 3 attempts is botocore's standard mode default; its backoff is bounded by the
    request deadline anyway. A part upload must fit in one request deadline: raise it with a large
    `storage.s3.multipart.part.size` on a slow link.
    """

    def seconds(name: str) -> float:
        return int(config.get(name)) / 1000  # type: ignore[arg-type]

    attempts = int(config.get("storage.s3.retry.max.attempts"))  # type: ignore[arg-type]
    botocore = {
        "connect_timeout": seconds("storage.s3.connect.timeout.ms"),
        "read_timeout": seconds("storage.s3.read.timeout.ms"),
        "retries": {"total_max_attempts": attempts, "mode": "standard"},
    }
    return botocore, seconds("storage.s3.request.timeout.ms")


def body_errors() -> tuple[type[BaseException], ...]:
    """What reading a response body raises when the connection fails after the headers (never before
    them: botocore has retried those): a body cut short or reset (aiohttp's payload error, botocore's
    streaming and incomplete-read errors) or stalled past the read timeout (aiobotocore's body timeout)."""
    from aiobotocore.response import AioReadTimeoutError
    from aiohttp import ClientPayloadError
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    return (ClientPayloadError, ResponseStreamingError, IncompleteReadError, AioReadTimeoutError)


def open_filesystem(config: RsmConfig, part_size: int) -> tuple[Any, float, int]:
    """The S3 filesystem for the configuration, the deadline of one request (seconds, retries included)
    and the attempts of a GET whose body fails after its headers."""
    import s3fs  # imported here: the file store must not pay for botocore

    install_log_redaction()  # botocore's DEBUG log shows the session token and the access key id
    client_kwargs: dict[str, Any] = {}
    endpoint = config.get("storage.s3.endpoint.url")
    region = config.get("storage.s3.region")
    if endpoint:
        # S3 requests are signed, and aiohttp refuses a URL's credentials beside the signature's
        # Authorization header (every request would fail): they are dropped, and never shown
        client_kwargs["endpoint_url"] = endpoint_without_credentials(
            str(endpoint),
            "storage.s3.endpoint.url",
            "S3 requests are signed with storage.s3.access.key.id and secret.access.key",
            log,
        )
    if region:
        client_kwargs["region_name"] = region
    kwargs: dict[str, Any] = {}
    register_secrets(
        *(
            str(config.get(name)) if config.get(name) else None
            for name in (
                "storage.s3.access.key.id",
                "storage.s3.secret.access.key",
                "storage.s3.session.token",
            )
        )
    )
    if config.get("storage.s3.access.key.id"):
        kwargs["key"] = config.get("storage.s3.access.key.id")
        kwargs["secret"] = config.get("storage.s3.secret.access.key")
        if config.get("storage.s3.session.token"):
            kwargs["token"] = config.get("storage.s3.session.token")
    botocore, request_timeout = s3_deadlines(config)
    if config.get("metrics.enabled"):
        # S3 requests, retries, throttles and failures per operation (rsm.metrics): handlers on the
        # session reach every client s3fs makes from it, a client re-made after a dropped session too
        from aiobotocore.session import AioSession

        from rsm.metrics import S3Hooks

        session = AioSession()
        S3Hooks().register(session)
        kwargs["session"] = session
    fs = s3fs.S3FileSystem(
        client_kwargs=client_kwargs,
        config_kwargs=botocore,
        skip_instance_cache=True,
        use_listings_cache=False,
        default_block_size=part_size,
        **kwargs,
    )
    # s3fs retries in loops of its own, nested (cat_file's around _call_s3's), each around botocore's
    # attempts: 5 x 5 x botocore's made a stalled read last minutes. botocore's attempts are the only ones
    # (and, for a GET whose body fails after botocore returned, `_remote`'s: the same number, one loop)
    fs.retries = 1
    attempts = int(config.get("storage.s3.retry.max.attempts"))  # type: ignore[arg-type]
    return fs, request_timeout, attempts


class S3Writer:
    """A multipart upload driven directly (through s3fs's client): parts of `part_size` go up as the
    buffer fills, the upload completes on commit and is aborted otherwise; an object smaller than one part
    is a single PUT. Each part buffer is handed to the client as is and a new one started, so an upload
    holds about one part in memory (s3fs's buffered file holds and copies several)."""

    def __init__(
        self, remote: Callable[..., Any], fs: Any, stats: IOStats, part_size: int, bucket: str, key: str
    ) -> None:
        """`remote`: `ObjectStore._remote` (each request within its deadline); `fs`: the S3 filesystem."""
        self._remote = remote
        self._fs = fs
        self._stats = stats
        self._part_size = part_size
        self._bucket = bucket
        self._key = key
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, object]] = []
        self._size = 0

    def _call(self, method: str, **kwargs: object) -> dict[str, object]:
        return self._remote(
            self._bucket, self._key, self._fs.call_s3, method, Bucket=self._bucket, Key=self._key, **kwargs
        )

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data
        self._size += len(data)
        if len(self._buf) >= self._part_size:
            self._flush()

    def _flush(self) -> None:
        if self._upload_id is None:
            self._upload_id = str(self._call("create_multipart_upload")["UploadId"])
        body = bytes(self._buf)  # botocore copies anything that is not bytes; the bytearray goes at once
        self._buf = bytearray()
        number = len(self._parts) + 1
        out = self._call("upload_part", UploadId=self._upload_id, PartNumber=number, Body=body)
        self._parts.append({"PartNumber": number, "ETag": out["ETag"]})

    def commit(self) -> None:
        try:
            if self._upload_id is None:
                self._call("put_object", Body=bytes(self._buf))
            else:
                if self._buf:
                    self._flush()
                self._call(
                    "complete_multipart_upload",
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": self._parts},
                )
        except BaseException:
            self.abort()
            raise
        self._buf = bytearray()
        self._stats.wrote(self._size, 1)
        self._fs.invalidate_cache(f"{self._bucket}/{self._key}")

    def abort(self) -> None:
        self._buf = bytearray()
        if self._upload_id is None:
            return
        try:
            self._call("abort_multipart_upload", UploadId=self._upload_id)
        except FileNotFoundError:  # NoSuchUpload: completed after all (its answer was lost) or aborted
            log.debug("the multipart upload of s3://%s/%s is gone already", self._bucket, self._key)
        except Exception:  # noqa: BLE001 - the upload already failed; S3 lifecycle rules reap leftovers
            log.warning(
                "could not abort the multipart upload of s3://%s/%s", self._bucket, self._key, exc_info=True
            )


@register_store
class S3Store(ObjectStore):
    """S3 (s3fs over aiobotocore): multipart uploads, ListObjectsV2 pages of 1,000 keys from a start key,
    delimited listings, incomplete multipart uploads as unfinished writes."""

    backend = Backend.S3
    ranged_listing = True

    @classmethod
    def identity(cls, config: RsmConfig) -> str:
        return endpoint_of(config, "storage.s3.endpoint.url")

    @classmethod
    def open(cls, config: RsmConfig, *, create: bool = True) -> ObjectStore:
        part_size = int(config.get("storage.s3.multipart.part.size"))  # type: ignore[arg-type]
        fs, request_timeout, attempts = open_filesystem(config, part_size)
        store = cls(fs, Backend.S3, None, part_size, request_timeout, attempts)
        endpoint = config.get("storage.s3.endpoint.url")
        region = config.get("storage.s3.region")
        store.where = redact_url(str(endpoint)) if endpoint else f"AWS ({region or 'default region'})"
        return store

    def body_errors(self) -> tuple[type[BaseException], ...]:
        return body_errors()

    def bucket_exists(self, bucket: str) -> bool | None:
        try:
            self._remote(bucket, "", self.fs.call_s3, "head_bucket", Bucket=bucket)
        except FileNotFoundError:
            return False
        except PermissionError:
            return None
        return True

    def _writer(self, bucket: str, key: str) -> ObjectWriter:
        return S3Writer(self._remote, self.fs, self.stats, self.part_size, bucket, key)

    def _pages(self, listed: int) -> int:
        return max(1, -(-listed // 1000))  # s3fs's `find` pages 1,000 keys a request, unseen

    def list_from(
        self,
        bucket: str,
        prefix: str,
        *,
        start_after: str = "",
        limit: int | None = None,
        include_temporary: bool = False,
    ) -> list[ObjectInfo]:
        """ListObjectsV2 from `start_after` on, a page (one request within the deadline) at a time, up to
        `limit`: a planner's requests grow with its range, not with the history before it."""
        self._directory(bucket, prefix.rpartition("/")[0])  # checks the names
        out: list[ObjectInfo] = []
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if start_after:
            args["StartAfter"] = start_after
        while True:
            if limit is not None:
                args["MaxKeys"] = max(1, min(1000, limit - len(out)))
            self.stats.listed()
            try:
                page = self._remote(bucket, prefix, self.fs.call_s3, "list_objects_v2", **args)
            except FileNotFoundError:
                return out
            for item in page.get("Contents", []):
                key = str(item["Key"])
                if include_temporary or TEMP_MARK not in key.rsplit("/", 1)[-1]:
                    out.append(ObjectInfo(key, int(item.get("Size") or 0), modified_time(item)))
            if not page.get("IsTruncated") or (limit is not None and len(out) >= limit):
                return out if limit is None else out[:limit]
            args.pop("StartAfter", None)
            args["ContinuationToken"] = page["NextContinuationToken"]

    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        """One delimited listing (a page per 1,000 names), however many objects lie below the names."""
        self._directory(bucket, prefix.rstrip("/"))  # checks the names
        names: list[str] = []
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        while True:
            self.stats.listed()
            try:
                page = self._remote(bucket, prefix, self.fs.call_s3, "list_objects_v2", **args)
            except FileNotFoundError:
                return names
            names += [str(p["Prefix"])[len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return sorted(names)
            args["ContinuationToken"] = page["NextContinuationToken"]

    def copy_object(
        self,
        src_bucket: str,
        src_key: str,
        dst_bucket: str,
        dst_key: str,
        *,
        part_size: int,
        on_bytes: Callable[[int], None] | None = None,
        size: int | None = None,
        link: bool = True,
    ) -> int:
        """Server-side: CopyObject up to `part_size`, else a multipart upload of UploadPartCopy ranges of
        `part_size` (each request within the deadline, no byte through this process), aborted on failure."""
        size = self.size(src_bucket, src_key) if size is None else size
        source = {"Bucket": src_bucket, "Key": src_key}

        def call(method: str, **kwargs: object) -> dict[str, object]:
            return self._remote(
                dst_bucket, dst_key, self.fs.call_s3, method, Bucket=dst_bucket, Key=dst_key, **kwargs
            )

        if size <= part_size:
            call("copy_object", CopySource=source)
            if on_bytes is not None:
                on_bytes(size)
        else:
            upload_id = str(call("create_multipart_upload")["UploadId"])
            parts = []
            try:
                for number, start in enumerate(range(0, size, part_size), 1):
                    end = min(start + part_size, size) - 1
                    out = call(
                        "upload_part_copy", UploadId=upload_id, PartNumber=number, CopySource=source,
                        CopySourceRange=f"bytes={start}-{end}",
                    )  # fmt: skip
                    etag = out["CopyPartResult"]["ETag"]  # type: ignore[index]
                    parts.append({"PartNumber": number, "ETag": etag})
                    if on_bytes is not None:
                        on_bytes(end + 1 - start)
                call("complete_multipart_upload", UploadId=upload_id, MultipartUpload={"Parts": parts})
            except BaseException:
                with contextlib.suppress(Exception):
                    call("abort_multipart_upload", UploadId=upload_id)
                raise
        self.fs.invalidate_cache(f"{dst_bucket}/{dst_key}")
        self.stats.wrote(size, 1)
        return size

    def stem_sizes(self, bucket: str, keys: Iterable[str]) -> dict[str, int]:
        wanted = set(keys)
        if not wanted:
            return {}
        prefix = os.path.commonprefix(sorted(wanted))
        return {o.key: o.size for o in self.list_from(bucket, prefix) if o.key in wanted}

    def delete_many(self, bucket: str, keys: list[str]) -> None:
        if len(keys) < 2:
            super().delete_many(bucket, keys)
            return
        for key in keys:
            self.path(bucket, key)  # checks the names
        self._remote(
            bucket, keys[0], self.fs.call_s3, "delete_objects", Bucket=bucket,
            Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
        )  # fmt: skip
        for key in keys:
            self.fs.invalidate_cache(f"{bucket}/{key}")

    def uploads_under(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[UnfinishedWrite]:
        """Incomplete multipart uploads, page by page (one ListMultipartUploads of `limit` when it fits)."""
        found: list[UnfinishedWrite] = []
        markers: dict[str, Any] = {} if limit is None else {"MaxUploads": min(limit, 1000)}
        while True:
            page = self._remote(
                bucket,
                prefix,
                self.fs.call_s3,
                "list_multipart_uploads",
                Bucket=bucket,
                Prefix=prefix,
                **markers,
            )
            for upload in page.get("Uploads", []):
                initiated = upload.get("Initiated")
                found.append(
                    UnfinishedWrite(
                        bucket,
                        str(upload["Key"]),
                        upload_id=str(upload["UploadId"]),
                        started=initiated.timestamp() if initiated is not None else None,
                    )
                )
            if not page.get("IsTruncated") or (limit is not None and len(found) >= limit):
                return found if limit is None else found[:limit]
            markers.update(KeyMarker=page["NextKeyMarker"], UploadIdMarker=page["NextUploadIdMarker"])

    def discard(self, write: UnfinishedWrite) -> bool:
        if write.upload_id is None:
            return super().discard(write)
        try:
            self._remote(
                write.bucket,
                write.key,
                self.fs.call_s3,
                "abort_multipart_upload",
                Bucket=write.bucket,
                Key=write.key,
                UploadId=write.upload_id,
            )
        except FileNotFoundError:  # s3fs's translation of NoSuchUpload
            return False
        return True
