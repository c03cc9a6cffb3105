"""Object storage through fsspec: the local file store (a bucket is a directory) and S3 (s3fs).

The manager speaks in (bucket, key) pairs and needs five things from a store: stream an object in (with
nothing visible until it is complete), put a small object, read a byte range, delete, and tell "missing"
from "broken". This module gives exactly that over any fsspec filesystem, so tests can wrap the
filesystem to inject failures.

Writes are atomic per object:
- file store: bytes go to a temporary name in the destination directory and are renamed over the final
  name (a rename within one directory is atomic on POSIX);
- S3: objects larger than the part size go up as a multipart upload (driven through s3fs's client, one
  part buffered at a time), completed only on commit and aborted on any failure; smaller ones are one
  PUT. S3 never shows a partial object.

Credentials for S3 come from the config or, when absent, from the standard AWS chain (environment,
shared files, instance roles) through botocore; they are never logged: the S3 store registers them with
`rsm.config.redact` and installs its log redaction, which cleans botocore's and s3fs's DEBUG records too.

Every S3 request has deadlines (`s3_deadlines`): connect and read timeouts and a number of attempts for
botocore, and a wall-clock bound on the whole request, retries included, so an endpoint that stops answering
fails the operation in time instead of holding one of Kafka's remote reader threads.

Names are checked on every call, whoever the caller: a bucket must be a valid bucket name and a key
relative, without "." / ".." or empty segments, backslashes or control characters (`rsm.config.names`), and on the
file store the path must resolve, symlinks followed, inside `<root>/<bucket>/`. A refused name raises
`InvalidArgumentException` naming the object. Why here as well as where names enter: a name that slipped
past one entry point (issue 15: custom metadata, manifests, topic names) once made the file store unlink and
read files outside its root; this is the one place every path goes through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import fsspec
from fsspec.exceptions import FSTimeoutError

from rsm.api.errors import ConfigException, InvalidArgumentException
from rsm.config.names import bucket_problem, key_problem
from rsm.config.redact import install_log_redaction, redact_text, register_secrets, split_userinfo
from rsm.config.settings import Backend, RsmConfig
from segment_format.buffers import copy_into, pread_into
from segment_format.crc import crc32c

log = logging.getLogger(__name__)
T = TypeVar("T")


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


def _s3_body_errors() -> tuple[type[BaseException], ...]:
    """What reading a response body raises when the connection fails after the headers (never before
    them: botocore has retried those): a body cut short or reset (aiohttp's payload error, botocore's
    streaming and incomplete-read errors) or stalled past the read timeout (aiobotocore's body timeout)."""
    from aiobotocore.response import AioReadTimeoutError
    from aiohttp import ClientPayloadError
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    return (ClientPayloadError, ResponseStreamingError, IncompleteReadError, AioReadTimeoutError)


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size in bytes and last modification (seconds since the epoch)."""

    key: str
    size: int
    modified: float


def _modified(info: dict[str, Any]) -> float:
    """The modification time in a listing entry: `mtime` (file store) or `LastModified` (S3)."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if value is None:
        return 0.0
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value)


class ObjectNotFound(Exception):
    """The object does not exist (the manager turns it into RemoteResourceNotFoundException)."""


TEMP_MARK = ".tmp-"
# `.<name>.tmp-<12 hex>`: the only names the file store's writer gives its temporary files, so a file is
# taken for an unfinished write only when it has exactly this shape (nothing else is ever removed as one)
_TEMP_NAME = re.compile(r"\.(.+)" + re.escape(TEMP_MARK) + r"[0-9a-f]{12}")


def temp_name(name: str) -> str:
    """The hidden name a file-store write of `name` goes to before its rename: `.<name>.tmp-<12 hex>`."""
    return f".{name}{TEMP_MARK}{uuid.uuid4().hex[:12]}"


def temp_target(filename: str) -> str | None:
    """The name whose unfinished write `filename` is the temporary file of, or None (see `temp_name`)."""
    found = _TEMP_NAME.fullmatch(filename)
    return found.group(1) if found else None


@dataclass(frozen=True)
class UnfinishedWrite:
    """What an interrupted write of one object left: a temporary file (file store) or an incomplete
    multipart upload (S3). Neither is visible as the object, but both take space (S3 bills upload parts)
    until removed (`ObjectStore.discard`).

    `started` (epoch seconds: the file's mtime, the upload's initiation) is for a grace period: a tool that
    sweeps a whole store must not take a write still under way for a leftover.
    """

    bucket: str
    key: str  # the object the write was for
    temp_path: str | None = None  # file store: the temporary file
    upload_id: str | None = None  # S3: the multipart upload
    started: float | None = None

    def __str__(self) -> str:
        if self.upload_id is not None:
            return f"incomplete multipart upload {self.upload_id[:16]} of s3://{self.bucket}/{self.key}"
        return f"temporary file {self.temp_path} of file:{self.bucket}/{self.key}"


class ObjectWriter(Protocol):
    def write(self, data: bytes | memoryview) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...


class IOStats:
    """Bytes and requests through the store, for benchmarks and for tests of ranged fetches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.bytes_written = 0
        self.reads = 0
        self.writes = 0

    def read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
            self.reads += 1

    def wrote(self, n: int, objects: int = 0) -> None:
        with self._lock:
            self.bytes_written += n
            self.writes += objects

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"bytes_read": self.bytes_read, "bytes_written": self.bytes_written, "reads": self.reads}


class ObjectStore:
    """Buckets and keys over an fsspec filesystem."""

    def __init__(
        self,
        fs: Any,
        backend: Backend,
        root: Path | None = None,
        part_size: int = 8 << 20,
        request_timeout: float | None = None,
        attempts: int = 1,
    ) -> None:
        """`request_timeout`: seconds one S3 request may take, retries included (None: no bound);
        `attempts`: how often a GET whose body failed after its headers is tried in all (see `_remote`)."""
        self.fs = fs
        self.backend = backend
        self.request_timeout = request_timeout if backend is Backend.S3 else None
        self.attempts = attempts
        self._body_errors: tuple[type[BaseException], ...] = (
            _s3_body_errors() if backend is Backend.S3 else ()
        )
        # resolved once: symlinks in the root's own path are the operator's; any below it are refused
        self.root = root.expanduser().resolve() if root is not None else None
        self.part_size = part_size
        self.stats = IOStats()
        # entered around each read that waits on the network (not local files): the bridge lends a fetch's
        # work permit meanwhile, so ten readers waiting on S3 do not hold back the streams ready to work
        self.remote_wait: Callable[[], AbstractContextManager[object]] | None = None

    def network_wait(self) -> AbstractContextManager[object]:
        """``with``: a wait on this store's network (none for local files); the bridge lends permits there."""
        hook = self.remote_wait
        return hook() if hook is not None and self.backend is not Backend.FILE else contextlib.nullcontext()

    @classmethod
    def from_config(cls, config: RsmConfig) -> ObjectStore:
        part_size = int(config.get("storage.s3.multipart.part.size"))  # type: ignore[arg-type]
        if config.backend is Backend.FILE:
            root = config.file_root
            assert root is not None  # checked by RsmConfig
            root = root.expanduser().resolve()
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file where the store should be, a read-only parent...
                what = (
                    "is a file, not a directory" if root.is_file() else f"cannot be created ({exc.strerror})"
                )
                raise ConfigException(f"config storage.file.root {root} {what}") from None
            fs = fsspec.filesystem("file", auto_mkdir=True, skip_instance_cache=True)
            return cls(fs, Backend.FILE, root, part_size)
        import s3fs  # imported here: the file store must not pay for botocore

        install_log_redaction()  # botocore's DEBUG log shows the session token and the access key id
        client_kwargs: dict[str, Any] = {}
        endpoint = config.get("storage.s3.endpoint.url")
        region = config.get("storage.s3.region")
        if endpoint:
            endpoint, userinfo = split_userinfo(str(endpoint))
            if userinfo is not None:
                # S3 requests are signed, and aiohttp refuses a URL's credentials beside the signature's
                # Authorization header (every request would fail): they are dropped, and never shown
                register_secrets(userinfo, *userinfo.split(":", 1))
                log.warning(
                    "config storage.s3.endpoint.url carries credentials (user information, not shown): they are "
                    "not used; S3 requests are signed with storage.s3.access.key.id and secret.access.key"
                )
            client_kwargs["endpoint_url"] = endpoint
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
        return cls(fs, Backend.S3, None, part_size, request_timeout, attempts)

    def _remote(
        self, bucket: str, key: str, call: Callable[..., T], *args: Any, read: bool = False, **kwargs: Any
    ) -> T:
        """Run one blocking fsspec call; on S3 bounded by `request_timeout`, retries included.

        fsspec runs the call's coroutine on its event loop and, given `timeout`, cancels it when the time is
        up (the connection is dropped); that is reported as a TimeoutError naming the object and the setting.

        ``read``: the call is a GET, whose body is read after botocore has returned the response. botocore
        retries until the headers have arrived, not after; so a body cut short, reset or stalled past the
        read timeout is tried again here (a GET is idempotent), `attempts` times in all, within the same
        deadline. Without it one such fault failed the fetch while botocore still had attempts left.
        """
        if self.request_timeout is None:
            return call(*args, **kwargs)
        started = time.monotonic()
        attempt = 1
        while True:
            try:
                remaining = self.request_timeout - (time.monotonic() - started)
                return call(*args, timeout=max(remaining, 0.001), **kwargs)
            except FSTimeoutError as exc:
                waited = time.monotonic() - started
                if waited >= self.request_timeout:
                    raise TimeoutError(
                        f"{self.describe(bucket, key)}: no answer within {self.request_timeout:g} s "
                        "(storage.s3.request.timeout.ms, retries included)"
                    ) from None
                # a timeout inside the request, reported by fsspec as its own (a body read timeout too)
                if not (read and attempt < self.attempts and isinstance(exc.__cause__, self._body_errors)):
                    raise TimeoutError(
                        f"{self.describe(bucket, key)}: timed out after {waited:.1f} s: "
                        f"{redact_text(str(exc.__cause__ or exc))}"
                    ) from None
                failure: BaseException = exc.__cause__ or exc
            except self._body_errors as exc:
                if not (read and attempt < self.attempts):
                    raise
                failure = exc
            attempt += 1
            log.debug(
                "%s: the body of a GET failed (%s); attempt %d", self.describe(bucket, key), failure, attempt
            )

    # -- naming ------------------------------------------------------------------------------------------
    def path(self, bucket: str, key: str) -> str:
        """The filesystem path of an object; InvalidArgumentException for a name that could address
        anything else (see the module docstring)."""
        return self._checked(bucket, key, key_problem(key))

    def _directory(self, bucket: str, directory: str) -> str:
        """`path()` of a directory of keys (`""`: the whole bucket), for listings."""
        return self._checked(bucket, directory, key_problem(directory) if directory else None)

    def _checked(self, bucket: str, key: str, key_fault: str | None) -> str:
        problem = bucket_problem(bucket)
        if problem:
            raise InvalidArgumentException(f"refusing bucket {bucket!r} of object key {key!r}: it {problem}")
        if key_fault:
            raise InvalidArgumentException(f"refusing object key {key!r} in bucket {bucket}: it {key_fault}")
        if self.backend is not Backend.FILE:
            return f"{bucket}/{key}"
        base = f"{self.root}/{bucket}"
        path = f"{base}/{key}" if key else base
        real = os.path.realpath(path)
        if real != base and not real.startswith(base + "/"):
            raise InvalidArgumentException(
                f"refusing object {self.describe(bucket, key)}: its path resolves outside the store's "
                f"directory of bucket {bucket} (through a symlink)"
            )
        return path

    def describe(self, bucket: str, key: str) -> str:
        """How an object is named in messages: `file:<bucket>/<key>` or `s3://<bucket>/<key>`."""
        return f"{'s3://' if self.backend is Backend.S3 else 'file:'}{bucket}/{key}"

    # -- writes ------------------------------------------------------------------------------------------
    def open_writer(self, bucket: str, key: str, background: bool = False) -> ObjectWriter:
        """A streaming writer: nothing is visible under `key` until `commit()`; `abort()` leaves nothing.

        `background=True` uploads from a thread (S3 only: there a part upload is a network round trip the
        caller can overlap with transforming the next chunk; a local write is a memory copy).
        """
        if self.backend is Backend.FILE:
            return _FileWriter(self, self.path(bucket, key))
        writer = _S3Writer(self, bucket, key)
        return BackgroundWriter(writer) if background else writer

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Write a small object in one request (atomically)."""
        writer = self.open_writer(bucket, key)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        writer.commit()

    # -- reads -------------------------------------------------------------------------------------------
    def get(self, bucket: str, key: str) -> bytes:
        try:
            with self.network_wait():
                data = self._remote(bucket, key, self.fs.cat_file, self.path(bucket, key), read=True)
        except FileNotFoundError:
            raise ObjectNotFound(self.describe(bucket, key)) from None
        self.stats.read(len(data))
        return bytes(data)

    def get_range(self, bucket: str, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object, in one ranged request."""
        if end <= start:
            return b""
        try:
            with self.network_wait():
                data = self._remote(
                    bucket, key, self.fs.cat_file, self.path(bucket, key), start=start, end=end, read=True
                )
        except FileNotFoundError:
            raise ObjectNotFound(self.describe(bucket, key)) from None
        self.stats.read(len(data))
        if len(data) != end - start:
            raise OSError(f"short read of {self.describe(bucket, key)}: {len(data)} of {end - start} bytes")
        return bytes(data)

    def get_range_into(
        self, bucket: str, key: str, start: int, out: memoryview, *, checksum: bool = False
    ) -> int | None:
        """Bytes [start, start + len(out)) of an object into ``out``; returns their CRC-32C when
        ``checksum`` (else None). A local file is read straight into ``out`` and checksummed as it is read,
        in one call that releases the GIL once (``pread_into``); a remote object is fetched, then copied."""
        if self.backend is not Backend.FILE:
            copy_into(out, [self.get_range(bucket, key, start, start + len(out))])
            return crc32c(out) if checksum else None
        try:
            got, crc = pread_into(self.path(bucket, key), start, out, checksum=checksum)
        except FileNotFoundError:
            raise ObjectNotFound(self.describe(bucket, key)) from None
        self.stats.read(got)
        if got != len(out):
            raise OSError(f"short read of {self.describe(bucket, key)}: {got} of {len(out)} bytes")
        return crc

    def exists(self, bucket: str, key: str) -> bool:
        return bool(self._remote(bucket, key, self.fs.exists, self.path(bucket, key)))

    def list(self, bucket: str, prefix: str = "", *, include_temporary: bool = False) -> list[str]:
        """Keys under a prefix in a bucket, sorted; temporary files of unfinished writes are left out
        unless ``include_temporary`` (`rsm migrate gc` looks for the ones a killed process left)."""
        base = self._directory(bucket, "").rstrip("/") + "/"
        directory = prefix.rpartition("/")[0]
        try:
            found = self._remote(bucket, prefix, self.fs.find, self._directory(bucket, directory))
        except FileNotFoundError:
            return []
        keys = []
        for path in found:
            path = str(path)
            key = path[len(base) :] if path.startswith(base) else path.split("/", 1)[1]
            if key.startswith(prefix) and (include_temporary or TEMP_MARK not in key.rsplit("/", 1)[-1]):
                keys.append(key)
        return sorted(keys)

    def list_objects(
        self, bucket: str, prefix: str = "", *, include_temporary: bool = False
    ) -> list[ObjectInfo]:
        """`list` with each object's size and modification time (one listing, no request per object)."""
        base = self._directory(bucket, "").rstrip("/") + "/"
        directory = prefix.rpartition("/")[0]
        try:
            found = self._remote(
                bucket, prefix, self.fs.find, self._directory(bucket, directory), detail=True
            )
        except FileNotFoundError:
            return []
        out = []
        for path, info in dict(found).items():
            path = str(path)
            key = path[len(base) :] if path.startswith(base) else path.split("/", 1)[1]
            if not key.startswith(prefix) or info.get("type") == "directory":
                continue
            if include_temporary or ".tmp-" not in key.rsplit("/", 1)[-1]:
                out.append(ObjectInfo(key, int(info.get("size") or 0), _modified(info)))
        return sorted(out, key=lambda o: o.key)

    def size(self, bucket: str, key: str) -> int:
        """An object's size in bytes (ObjectNotFound when it is missing)."""
        try:
            info = self._remote(bucket, key, self.fs.info, self.path(bucket, key))
        except FileNotFoundError:
            raise ObjectNotFound(self.describe(bucket, key)) from None
        if info.get("type") == "directory":
            raise ObjectNotFound(self.describe(bucket, key))
        return int(info["size"])

    # -- deletes -----------------------------------------------------------------------------------------
    def delete(self, bucket: str, key: str) -> bool:
        """Delete an object; a missing one is fine. Returns whether something was there (file store)."""
        try:
            self._remote(bucket, key, self.fs.rm_file, self.path(bucket, key))
            return True
        except FileNotFoundError:
            return False

    # -- unfinished writes -------------------------------------------------------------------------------
    def unfinished_writes(self, bucket: str, keys: Iterable[str]) -> list[UnfinishedWrite]:
        """What interrupted writes of exactly these keys left behind: temporary files beside them (file
        store) or incomplete multipart uploads of them (S3), whoever wrote them (a process killed with
        `kill -9` runs no cleanup).

        Only leftovers of the given keys are answered, never another object's: a file counts only when its
        name is `temp_name()`'s shape for one of the keys, an upload only when its key is one of them. A
        write in progress is answered too: callers run this when no write of these keys can be under way.
        Costs one listing per directory of keys (file store) or one ListMultipartUploads per page (S3).
        """
        wanted = sorted(set(keys))
        if not wanted:
            return []
        if self.backend is Backend.FILE:
            return self._temp_files(bucket, wanted)
        return self._uploads(bucket, wanted)

    def _temp_files(self, bucket: str, keys: list[str]) -> list[UnfinishedWrite]:
        by_dir: dict[str, set[str]] = {}
        for key in keys:
            self.path(bucket, key)  # checks the name
            directory, _, name = key.rpartition("/")
            by_dir.setdefault(directory, set()).add(name)
        found: list[UnfinishedWrite] = []
        for directory, names in sorted(by_dir.items()):
            try:  # names only: a partition's directory may hold thousands of objects, not worth a stat each
                entries = self.fs.ls(self._directory(bucket, directory), detail=False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                path = str(entry)
                target = temp_target(path.rpartition("/")[2])
                if target not in names:
                    continue
                try:
                    info = self.fs.info(path)
                except FileNotFoundError:
                    continue  # removed meanwhile
                if info.get("type") == "file":
                    key = f"{directory}/{target}" if directory else str(target)
                    found.append(UnfinishedWrite(bucket, key, temp_path=path, started=info.get("mtime")))
        return sorted(found, key=lambda w: (w.key, str(w.temp_path)))

    def _uploads(self, bucket: str, keys: list[str]) -> list[UnfinishedWrite]:
        for key in keys:
            self.path(bucket, key)  # checks the names
        wanted = set(keys)
        prefix = os.path.commonprefix(keys)
        found: list[UnfinishedWrite] = []
        markers: dict[str, str] = {}
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
                if upload["Key"] in wanted:
                    initiated = upload.get("Initiated")
                    found.append(
                        UnfinishedWrite(
                            bucket,
                            upload["Key"],
                            upload_id=str(upload["UploadId"]),
                            started=initiated.timestamp() if initiated is not None else None,
                        )
                    )
            if not page.get("IsTruncated"):
                break
            markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
        return sorted(found, key=lambda w: (w.key, str(w.upload_id)))

    def discard(self, write: UnfinishedWrite) -> bool:
        """Remove what an unfinished write left; False when it was already gone."""
        if write.upload_id is not None:
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
        assert write.temp_path is not None
        directory, _, filename = write.temp_path.rpartition("/")
        key_dir = write.key.rpartition("/")[0]
        if directory != self._directory(write.bucket, key_dir) or temp_target(filename) is None:
            raise InvalidArgumentException(
                f"refusing to remove {write.temp_path}: not a temporary file of {self.describe(write.bucket, write.key)}"
            )
        try:
            self.fs.rm_file(write.temp_path)
        except FileNotFoundError:
            return False
        return True


class BackgroundWriter:
    """Hands writes to a thread so the caller transforms the next chunk while a part uploads.

    At most `depth` pieces wait in the queue, so memory stays bounded. A failure in the thread surfaces
    at the next `write()` or at `commit()`; `abort()` stops the thread and aborts the object.
    """

    _DONE = object()

    def __init__(self, inner: ObjectWriter, depth: int = 2) -> None:
        import queue

        self._inner = inner
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rsm-upload", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if self._error is not None or self._stop.is_set():
                continue  # drain without writing after a failure or an abort
            try:
                self._inner.write(item)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc

    def _raise_pending(self) -> None:
        if self._error is not None:
            raise self._error

    def write(self, data: bytes | memoryview) -> None:
        self._raise_pending()
        self._queue.put(bytes(data) if isinstance(data, memoryview) else data)

    def _finish_thread(self) -> None:
        self._queue.put(self._DONE)
        self._thread.join()

    def commit(self) -> None:
        self._finish_thread()
        if self._error is not None:
            self._inner.abort()
            raise self._error
        self._inner.commit()

    def abort(self) -> None:
        self._stop.set()
        self._finish_thread()
        self._inner.abort()


class _FileWriter:
    """Write to a temporary name next to the destination, rename on commit."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        self._store = store
        self._path = path
        directory, _, name = path.rpartition("/")
        self._tmp = f"{directory}/{temp_name(name)}"
        self._file = store.fs.open(self._tmp, "wb")
        self._size = 0

    def write(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self._size += len(data)

    def commit(self) -> None:
        try:
            self._file.close()
            self._store.fs.mv(self._tmp, self._path)
        except BaseException:
            self.abort()
            raise
        self._store.stats.wrote(self._size, 1)

    def abort(self) -> None:
        try:
            self._file.close()
        except Exception:  # noqa: BLE001 - the write already failed; the cleanup below matters more
            log.debug("closing %s after a failed write", self._tmp, exc_info=True)
        try:
            self._store.fs.rm_file(self._tmp)
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001
            log.warning("could not remove temporary file %s", self._tmp, exc_info=True)


class _S3Writer:
    """A multipart upload driven directly (through s3fs's client): parts of `part_size` go up as the
    buffer fills, the upload completes on commit and is aborted otherwise; an object smaller than one part
    is a single PUT. Each part buffer is handed to the client as is and a new one started, so an upload
    holds about one part in memory (s3fs's buffered file holds and copies several)."""

    def __init__(self, store: ObjectStore, bucket: str, key: str) -> None:
        self._store = store
        self._bucket = bucket
        self._key = key
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, object]] = []
        self._size = 0

    def _call(self, method: str, **kwargs: object) -> dict[str, object]:
        store = self._store
        return store._remote(
            self._bucket, self._key, store.fs.call_s3, method, Bucket=self._bucket, Key=self._key, **kwargs
        )

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data
        self._size += len(data)
        if len(self._buf) >= self._store.part_size:
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
        self._store.stats.wrote(self._size, 1)
        self._store.fs.invalidate_cache(f"{self._bucket}/{self._key}")

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
