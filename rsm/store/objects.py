"""Object storage through fsspec: the local file store (a bucket is a directory), S3 (s3fs), GCS (gcsfs) and
Azure Blob (adlfs; a bucket is a container).

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
- GCS: a resumable upload finished by its last chunk; Azure: staged blocks committed by one Put Block List
  (`rsm.store.gcs`, `rsm.store.azure`). Neither shows a partial object either.

The backends are classes of their own, one per store: `LocalStore` (`rsm.store.local`: a directory per
bucket), `S3Store`, `GcsStore` and `AzureStore` (`rsm.store.s3`, `gcs`, `azure`: credentials, deadlines,
the writer of each). `ObjectStore` is what every caller sees: the names, the deadlines, the reads and
listings fsspec gives alike; what differs (a bucket's existence, writes, listing pages, unfinished writes,
reads into a caller's buffer) is a method each backend overrides. The backend is chosen once, by
`ObjectStore.from_config` (or `ObjectStore(fs, backend, ...)`), from the classes the backend modules
register (`rsm.store` imports them); no caller asks which backend it has. Writers and unfinished writes
are in `rsm.store.writes`.

Every cloud request has deadlines (`s3_deadlines`, `rsm.store.deadlines`): connect and read timeouts and a
number of attempts for the SDK, and a wall-clock bound on the whole request, retries included, so an
endpoint that stops answering fails the operation in time instead of holding one of Kafka's remote reader
threads. Within an operation's `Budget` (a copy's `copy.timeout.ms`) a request also gets no more than
what is left of it.

Names are checked on every call, whoever the caller: a bucket must be a valid bucket name and a key
relative, without "." / ".." or empty segments, backslashes or control characters (`rsm.api.names`), and on the
file store the path must resolve, symlinks followed, inside `<root>/<bucket>/`. A refused name raises
`InvalidArgumentException` naming the object. Why here as well as where names enter: a name that slipped
past one entry point (custom metadata, manifests, topic names) once made the file store unlink and
read files outside its root; this is the one place every path goes through.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from fsspec.exceptions import FSTimeoutError

from rsm.api.errors import ConfigException, InvalidArgumentException
from rsm.api.names import bucket_problem, key_problem
from rsm.config.redact import redact_text, split_userinfo
from rsm.config.settings import Backend, RsmConfig
from rsm.store.deadlines import current_budget
from rsm.store.listings import ObjectInfo, ObjectListings, modified_time
from rsm.store.writes import (
    BackgroundWriter,
    IOStats,
    ObjectWriter,
    UnfinishedWrite,
    temp_name,
)
from segment_format.buffers import copy_into
from segment_format.crc import crc32c

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = [
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "UnfinishedWrite",
    "is_missing_bucket",
    "modified_time",
    "temp_name",
]


def is_missing_bucket(exc: BaseException) -> bool:
    """Whether a store failure is S3's NoSuchBucket (s3fs raises it as a FileNotFoundError) or Azure's
    ContainerNotFound (which `ObjectStore` raises as one too, `azure.not_found_errors`)."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    code = code or getattr(cause, "error_code", None)
    return isinstance(exc, FileNotFoundError) and code in ("NoSuchBucket", "ContainerNotFound")


SCHEMES = {Backend.FILE: "file:", Backend.S3: "s3://", Backend.GCS: "gs://", Backend.AZURE: "az://"}
_STORES: dict[Backend, type[ObjectStore]] = {}


def endpoint_of(config: RsmConfig, key: str) -> str:
    """An endpoint setting without user information (the stores never use it: `redact`), "None" unset."""
    url = config.get(key)
    return "None" if url is None else split_userinfo(str(url))[0]


def register_store(cls: type[ObjectStore]) -> type[ObjectStore]:
    """Class decorator of a backend's store: `ObjectStore` builds it for its `backend`."""
    _STORES[cls.backend] = cls
    return cls


def store_class(backend: Backend) -> type[ObjectStore]:
    """The store class of a backend (the backend modules register theirs when `rsm.store` is imported)."""
    try:
        return _STORES[backend]
    except KeyError:
        raise ConfigException(f"no store is registered for storage.backend={backend.value}") from None


class ObjectNotFound(Exception):
    """The object does not exist (the manager turns it into RemoteResourceNotFoundException)."""


class ObjectStore(ObjectListings):
    """Buckets and keys over an fsspec filesystem (see the module docstring); `ObjectStore(fs, backend,
    ...)` builds the backend's own class. Its listings are `rsm.store.listings.ObjectListings`'."""

    backend: ClassVar[Backend]
    # `list_from` asks the store for the keys from a start key on, a page at a time (S3's ListObjectsV2):
    # planners then probe where a range lies instead of listing a partition whole
    ranged_listing: ClassVar[bool] = False
    creates = True  # the store is written to: a file store's bucket is made by its first write

    def __new__(
        cls, fs: Any = None, backend: Backend | None = None, *args: Any, **kwargs: Any
    ) -> ObjectStore:
        if cls is ObjectStore:
            if backend is None:
                raise TypeError("ObjectStore(fs, backend, ...): a backend is needed")
            cls = store_class(backend)
        return super().__new__(cls)

    def __init__(
        self,
        fs: Any,
        backend: Backend | None = None,
        root: Path | None = None,
        part_size: int = 8 << 20,
        request_timeout: float | None = None,
        attempts: int = 1,
    ) -> None:
        """`request_timeout`: seconds one cloud request may take, retries included (None: no bound);
        `attempts`: how often a GET whose body failed after its headers is tried in all (see `_remote`)."""
        if backend is not None and backend is not self.backend:
            raise TypeError(f"{type(self).__name__} is the {self.backend.value} store, not {backend.value}")
        self.fs = fs
        self.request_timeout = request_timeout
        self.attempts = attempts
        # what a GET's body raises when the connection fails after the headers (retried by `_remote`)
        self._body_errors = self.body_errors()
        # what the backend's SDK raises for a missing object or container instead of FileNotFoundError
        self._not_found = self.not_found_errors()
        # resolved once: symlinks in the root's own path are the operator's; any below it are refused
        self.root = root.expanduser().resolve() if root is not None else None
        self.part_size = part_size
        self.stats = IOStats()
        # entered around each read that waits on the network (not local files): the bridge lends a fetch's
        # work permit meanwhile, so ten readers waiting on S3 do not hold back the streams ready to work
        self.remote_wait: Callable[[], AbstractContextManager[object]] | None = None
        self.where = ""  # the cloud's endpoint, as messages name it (from_config)
        self.default_bucket = ""  # the configured `bucket` (from_config), so messages name its setting

    # -- what each backend says about itself ------------------------------------------------------------
    def body_errors(self) -> tuple[type[BaseException], ...]:
        """Errors of a response body failing after its headers, which the SDK does not retry (none here)."""
        return ()

    def not_found_errors(self) -> tuple[type[BaseException], ...]:
        """The SDK's errors meaning "no such object or container" that are not FileNotFoundError."""
        return ()

    def network_wait(self) -> AbstractContextManager[object]:
        """``with``: a wait on this store's network; the bridge lends permits there (`LocalStore`: none)."""
        hook = self.remote_wait
        return hook() if hook is not None else contextlib.nullcontext()

    @classmethod
    def from_config(
        cls, config: RsmConfig, *, create: bool = True, writes: bool | None = None
    ) -> ObjectStore:
        """The store the configuration names: a local directory (`rsm.store.local`), S3 (`rsm.store.s3`),
        GCS (`rsm.store.gcs`) or Azure Blob (`rsm.store.azure`), each opened by its own class.

        ``create=False`` (the read-only tools): a file store's root that does not exist is refused, not made.
        ``writes`` (default: ``create``): the store will be written to, so a file store's bucket directory
        that is not there yet counts as there (its first write makes it): a dry run of a writing command
        opens the store with ``create=False, writes=True``.
        """
        store = store_class(config.backend).open(config, create=create)
        store.creates = create if writes is None else writes
        store.default_bucket = str(config.get("bucket"))
        return store

    @classmethod
    def open(cls, config: RsmConfig, *, create: bool = True) -> ObjectStore:
        """The backend's filesystem and store for the configuration (each backend's own)."""
        raise NotImplementedError(f"{cls.__name__} cannot open a configuration")

    @classmethod
    def identity(cls, config: RsmConfig) -> str:
        """Where the configuration's store is (a root, an endpoint and account), telling two stores apart;
        never credentials written into an endpoint URL."""
        raise NotImplementedError

    # -- buckets -----------------------------------------------------------------------------------------
    def bucket_exists(self, bucket: str) -> bool | None:
        """Whether a bucket (Azure: a container) exists (one request); None when the store would not say
        (no permission). Each backend answers in its own way."""
        raise NotImplementedError

    def access_problem(self, bucket: str, directory: str) -> str | None:
        """Why a location cannot be read (its bucket is missing, access is denied), or None when it can
        (`rsm.catalog.unreadable`); `directory` is a key prefix there (`LocalStore` checks it too)."""
        try:
            exists = self.bucket_exists(bucket)
        except PermissionError as exc:
            return f"access denied to bucket {bucket!r}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the reason is the message
            return f"bucket {bucket!r} cannot be reached: {type(exc).__name__}: {exc}"
        if exists is False:
            return f"bucket {bucket!r} does not exist in {self.backend.value} at {self.where}"
        if exists is None:
            return f"access denied: the store would not say whether bucket {bucket!r} exists"
        return None

    def missing_bucket(self, bucket: str, setting: str | None = None) -> str:
        """The one line saying a bucket does not exist: the bucket, the setting that named it, where."""
        if setting is None:
            setting = "config bucket" if bucket == self.default_bucket else "the topic's unchecked.rsm.bucket"
        return (
            f"bucket {bucket!r} ({setting}) does not exist in {self.backend.value} at {self.where}; "
            "buckets are never created"
        )

    def require_bucket(self, bucket: str, setting: str | None = None) -> None:
        """ConfigException naming the bucket and its setting when the store says it does not exist."""
        if self.bucket_exists(bucket) is False:
            raise ConfigException(self.missing_bucket(bucket, setting))

    def _remote(
        self, bucket: str, key: str, call: Callable[..., T], *args: Any, read: bool = False, **kwargs: Any
    ) -> T:
        """Run one blocking fsspec call; on a cloud bounded by `request_timeout`, retries included.

        fsspec runs the call's coroutine on its event loop and, given `timeout`, cancels it when the time is
        up (the connection is dropped); that is reported as a TimeoutError naming the object and the setting.

        ``read``: the call is a GET, whose body is read after botocore has returned the response. botocore
        retries until the headers have arrived, not after; so a body cut short, reset or stalled past the
        read timeout is tried again here (a GET is idempotent), `attempts` times in all, within the same
        deadline. Without it one such fault failed the fetch while botocore still had attempts left.
        """
        try:
            return self._bounded(bucket, key, call, *args, read=read, **kwargs)
        except self._not_found as exc:
            raise FileNotFoundError(f"{self.describe(bucket, key)}: {exc.__class__.__name__}") from exc

    def _bounded(
        self, bucket: str, key: str, call: Callable[..., T], *args: Any, read: bool = False, **kwargs: Any
    ) -> T:
        """`_remote` without the translation of not-found errors; within an operation's `Budget`
        (`rsm.store.deadlines`), the request gets no more than what is left of it."""
        if self.request_timeout is None:
            return call(*args, **kwargs)
        started = time.monotonic()
        budget = current_budget()
        limit, by_budget = self.request_timeout, False
        if budget is not None and budget.remaining() < limit:
            limit, by_budget = budget.remaining(), True
            if limit <= 0:
                raise TimeoutError(f"{self.describe(bucket, key)}: not sent: {budget.spent()}")
        attempt = 1
        while True:
            try:
                remaining = limit - (time.monotonic() - started)
                return call(*args, timeout=max(remaining, 0.001), **kwargs)
            except FSTimeoutError as exc:
                waited = time.monotonic() - started
                if waited >= limit and by_budget:
                    assert budget is not None
                    raise TimeoutError(
                        f"{self.describe(bucket, key)}: no answer within {waited:.1f} s: {budget.spent()}"
                    ) from None
                if waited >= limit:
                    raise TimeoutError(
                        f"{self.describe(bucket, key)}: no answer within {self.request_timeout:g} s "
                        f"(storage.{self.backend.value}.request.timeout.ms, retries included)"
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
        return self._located(bucket, key)

    def _located(self, bucket: str, key: str) -> str:
        """The filesystem path of a checked name: `<bucket>/<key>` on a cloud (`LocalStore`: under its root)."""
        return f"{bucket}/{key}"

    def describe(self, bucket: str, key: str) -> str:
        """How an object is named in messages: `file:`, `s3://`, `gs://` or `az://` then `<bucket>/<key>`."""
        return f"{SCHEMES[self.backend]}{bucket}/{key}"

    # -- writes ------------------------------------------------------------------------------------------
    def open_writer(self, bucket: str, key: str, background: bool = False) -> ObjectWriter:
        """A streaming writer: nothing is visible under `key` until `commit()`; `abort()` leaves nothing.

        `background=True` uploads from a thread (clouds only: there a part upload is a network round trip the
        caller can overlap with transforming the next chunk; a local write is a memory copy).
        """
        self.path(bucket, key)  # checks the names
        writer = self._writer(bucket, key)
        return BackgroundWriter(writer) if background else writer

    def _writer(self, bucket: str, key: str) -> ObjectWriter:
        """The backend's streaming writer of one object (names already checked)."""
        raise NotImplementedError

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
        ``checksum`` (else None). A remote object is fetched, then copied (`LocalStore` reads a file straight
        into ``out``)."""
        copy_into(out, [self.get_range(bucket, key, start, start + len(out))])
        return crc32c(out) if checksum else None

    def exists(self, bucket: str, key: str) -> bool:
        return bool(self._remote(bucket, key, self.fs.exists, self.path(bucket, key)))

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
        """Copy one object to another key of this store; returns its size; the destination shows nothing
        or the whole object (`rsm.migrate.transfer`). Here: streamed through this process, a part of the
        store's upload size at a time, into the store's own writer (`LocalStore` links or copies the file,
        `S3Store` copies server-side). ``size``: the source's size when known (spares a request)."""
        size = self.size(src_bucket, src_key) if size is None else size
        writer = self.open_writer(dst_bucket, dst_key)
        try:
            for start in range(0, size, self.part_size):
                end = min(start + self.part_size, size)
                writer.write(self.get_range(src_bucket, src_key, start, end))
                if on_bytes is not None:
                    on_bytes(end - start)
        except BaseException:
            writer.abort()
            raise
        writer.commit()
        return size

    def stem_sizes(self, bucket: str, keys: Iterable[str]) -> dict[str, int]:
        """The sizes of those of `keys` that exist (a request each; `S3Store`: one listing of their common
        prefix, however many objects lie beside them)."""
        out = {}
        for key in keys:
            try:
                out[key] = self.size(bucket, key)
            except ObjectNotFound:
                continue
        return out

    def delete_many(self, bucket: str, keys: list[str]) -> None:
        """Delete objects that may go in any order; missing ones are fine (`S3Store`: one request)."""
        for key in keys:
            self.delete(bucket, key)

    # -- unfinished writes -------------------------------------------------------------------------------
    def unfinished_writes(self, bucket: str, keys: Iterable[str]) -> list[UnfinishedWrite]:
        """What interrupted writes of exactly these keys left behind: temporary files beside them (file
        store), incomplete multipart uploads of them (S3) or their staged blocks (Azure), whoever wrote them
        (a process killed with `kill -9` runs no cleanup).

        Only leftovers of the given keys are answered, never another object's: a file counts only when its
        name is `temp_name()`'s shape for one of the keys, an upload only when its key is one of them. A
        write in progress is answered too: callers run this when no write of these keys can be under way.
        Costs one listing per directory of keys (file store) or one ListMultipartUploads per page (S3).
        """
        wanted = sorted(set(keys))
        if not wanted:
            return []
        for key in wanted:
            self.path(bucket, key)  # checks the names
        return self._leftovers(bucket, wanted)

    def _leftovers(self, bucket: str, keys: list[str]) -> list[UnfinishedWrite]:
        """`unfinished_writes` of checked keys: the uploads under their common prefix, of these keys
        (`LocalStore`: its temporary files)."""
        wanted = set(keys)
        found = [w for w in self.uploads_under(bucket, os.path.commonprefix(keys)) if w.key in wanted]
        return sorted(found, key=lambda w: (w.key, str(w.upload_id)))

    def uploads_under(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[UnfinishedWrite]:
        """Every unfinished upload whose key starts with `prefix`, at most `limit` of them: S3's incomplete
        multipart uploads, Azure's blobs of uncommitted blocks alone; none on the file store, nor on GCS,
        which cannot list unfinished resumable uploads. The one place the store's users list uploads: gc,
        the location records' gc and resumed jobs."""
        return []

    def discard(self, write: UnfinishedWrite) -> bool:
        """Remove what an unfinished write left; False when it was already gone."""
        raise InvalidArgumentException(
            f"{type(self).__name__} has no unfinished write like {self.describe(write.bucket, write.key)}'s"
        )
