"""Google Cloud Storage through gcsfs: the filesystem the store speaks to, its deadlines, and the writer.

Credentials: `storage.gcs.token` names a service account or authorized user JSON file, or `anon` (an
emulator such as fake-gcs-server); unset, gcsfs follows Google's default chain (GOOGLE_APPLICATION_CREDENTIALS,
gcloud's, the metadata server). `storage.gcs.endpoint.url` points at an emulator.

Deadlines mean what S3's do (`rsm.store.deadlines`): aiohttp's connect and read timeouts per attempt,
`storage.gcs.retry.max.attempts` attempts of a retriable failure (gcsfs's own loop makes 6 with backoff up
to 32 s, whatever the setting: `_RsmGCSFileSystem` replaces it), and the store's bound on one request.
gcsfs reads a response's body inside its request, so a body cut short or stalled is retried there.

Writes: an object smaller than one chunk is a single upload; a larger one is a resumable upload whose
chunks (multiples of 256 KiB) go up as the buffer fills, the last one naming the size: GCS shows nothing
until that last chunk, so a reader never sees a partial object. An aborted write cancels its session. A
write killed with `kill -9` leaves a session that GCS cannot list and expires by itself (after a week), and
no object: there is no debris for `rsm.store.debris` to find on GCS.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from rsm.config.redact import endpoint_without_credentials, install_log_redaction, redact_url
from rsm.config.settings import Backend, RsmConfig
from rsm.store.deadlines import Deadlines
from rsm.store.objects import ObjectStore, endpoint_of, register_store
from rsm.store.writes import IOStats, ObjectWriter

log = logging.getLogger(__name__)

_GRANULE = 256 << 10  # GCS takes a resumable upload's chunks in multiples of this


def _filesystem_class() -> type:
    """gcsfs.core's filesystem with the store's attempts (imported here: other backends must not pay)."""
    from gcsfs.core import GCSFileSystem

    once = GCSFileSystem._request.__wrapped__  # one attempt: gcsfs's own retry decorator unwrapped

    class _RsmGCSFileSystem(GCSFileSystem):  # type: ignore[misc]
        """gcsfs making `rsm_attempts` attempts of a retriable failure, with a short backoff."""

        rsm_attempts = 3

        async def _request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            attempt = 1
            while True:
                try:
                    return await once(self, method, path, *args, **kwargs)
                except (FileNotFoundError, FileExistsError, ValueError):
                    raise
                except Exception as exc:
                    if attempt >= self.rsm_attempts or not _retriable(exc):
                        raise
                    log.debug("GCS %s %s failed (%s); attempt %d", method, path, exc, attempt + 1)
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0) * (0.5 + random.random() / 2))
                attempt += 1

    return _RsmGCSFileSystem


def _retriable(exc: BaseException) -> bool:
    from gcsfs.retry import is_retriable

    return bool(is_retriable(exc)) or isinstance(exc, asyncio.TimeoutError)


def open_filesystem(config: RsmConfig) -> tuple[Any, float, int]:
    """The GCS filesystem for the configuration, the deadline of one request (seconds, retries included)
    and the attempts of a request."""
    import aiohttp

    install_log_redaction()  # gcsfs's and google-auth's DEBUG logs show request headers (a bearer token)
    deadlines = Deadlines.of(config, "gcs")
    kwargs: dict[str, Any] = {}
    endpoint = config.get("storage.gcs.endpoint.url")
    if endpoint:
        kwargs["endpoint_url"] = endpoint_without_credentials(
            str(endpoint),
            "storage.gcs.endpoint.url",
            "GCS credentials come from storage.gcs.token or Google's default chain",
            log,
        )
    if config.get("storage.gcs.project"):
        kwargs["project"] = str(config.get("storage.gcs.project"))
    token = config.get("storage.gcs.token")
    if token:
        kwargs["token"] = str(token)
    fs = _filesystem_class()(
        requests_timeout=aiohttp.ClientTimeout(sock_connect=deadlines.connect, sock_read=deadlines.read),
        skip_instance_cache=True,
        use_listings_cache=False,
        **kwargs,
    )
    fs.rsm_attempts = deadlines.attempts
    return fs, deadlines.request, deadlines.attempts


def where(config: RsmConfig) -> str:
    """The endpoint as messages name it."""
    endpoint = config.get("storage.gcs.endpoint.url")
    return redact_url(str(endpoint)) if endpoint else "Google Cloud Storage"


def bucket_exists(remote: Callable[..., Any], fs: Any, bucket: str) -> bool | None:
    """Whether a bucket exists (one GET of its metadata); None when GCS would not say (no permission)."""
    try:
        remote(bucket, "", fs.call, "GET", "b/{}", bucket)
    except FileNotFoundError:
        return False
    except PermissionError:
        return None
    except OSError as exc:
        if "Forbidden" in str(exc):
            return None
        raise
    return True


async def _upload_request(fs: Any, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
    """One request of a resumable upload through gcsfs's client, answering (headers, body).

    Private API: gcsfs's `GCSFileSystem._call` (the only way to drive a resumable upload chunk by chunk
    through its session, auth and retries; docs/INTERNALS.md). Every use goes through here, so a change of
    its shape is fixed in one place.
    """
    return await fs._call(method, path, *args, **kwargs)


async def _put_chunk(fs: Any, location: str, data: bytes | memoryview, offset: int, total: int | None) -> Any:
    """One chunk of a resumable upload at `offset`; `total` (the object's size) on the last one only.
    GCS may keep fewer bytes than sent (it answers the range it has): the rest is sent again.

    A failed request is tried again by gcsfs's loop (`_RsmGCSFileSystem`) with the same bytes at the same
    offset. Where the server had kept the bytes of an attempt whose answer was lost, a server that appends
    what is re-sent (fake-gcs-server does) would make the object longer than what was sent: the writer
    checks the finished object's size (`GcsWriter._check_size`), so that ends in a failed write, never in an
    object that reads back wrong. (Asking the upload's status first, as GCS documents, cannot be checked
    against the emulator, which answers the status off by one.)
    """
    size = "*" if total is None else str(total)
    span = f"bytes {offset}-{offset + len(data) - 1}/{size}" if data else f"bytes */{size}"
    headers = {"Content-Range": span, "Content-Length": str(len(data))}
    answer, body = await _upload_request(fs, "PUT", location, headers=headers, data=data)
    kept = answer.get("Range")
    if kept and data:
        end = int(kept.split("-")[1])
        if end < offset + len(data) - 1:
            return await _put_chunk(fs, location, data[end + 1 - offset :], end + 1, total)
    return body


class GcsWriter:
    """A resumable upload driven directly (through gcsfs's client): chunks of `chunk_size` go up as the
    buffer fills, the last one (naming the size) on commit; an object smaller than one chunk is a single
    upload. The session is cancelled on abort."""

    def __init__(
        self, remote: Callable[..., Any], fs: Any, stats: IOStats, chunk_size: int, bucket: str, key: str
    ) -> None:
        """`remote`: `ObjectStore._remote` (each request within its deadline); `fs`: the GCS filesystem."""
        from fsspec.asyn import sync

        self._remote = remote
        self._fs = fs
        self._run = functools.partial(sync, fs.loop)
        self._stats = stats
        self._chunk = max(_GRANULE, chunk_size - chunk_size % _GRANULE)
        self._bucket = bucket
        self._key = key
        self._buf = bytearray()
        self._location: str | None = None
        self._sent = 0

    def _call(self, coro: Callable[..., Any], *args: Any) -> Any:
        return self._remote(self._bucket, self._key, self._run, coro, *args)

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data
        if len(self._buf) <= self._chunk:  # "<=": the last chunk, sent on commit, is never empty
            return
        if self._location is None:
            self._location = str(self._call(self._initiate))
        n = len(self._buf) - len(self._buf) % self._chunk
        if n == len(self._buf):
            n -= self._chunk
        for start in range(0, n, self._chunk):
            # a copy of its own, not a view of the buffer: a request that failed (a reset, a truncated answer)
            # may still hold what it was sending when gcsfs retries it, and a view would pin the buffer so
            # that it could not be resized afterwards (BufferError). One chunk more in memory, for a while.
            chunk = bytes(self._buf[start : start + self._chunk])
            self._call(_put_chunk, self._fs, self._location, chunk, self._sent, None)
            self._sent += self._chunk
        del self._buf[:n]

    async def _initiate(self) -> str:
        headers, _ = await _upload_request(
            self._fs,
            "POST",
            f"{self._fs._location}/upload/storage/v1/b/{quote(self._bucket)}/o?name={quote(self._key)}",
            uploadType="resumable",
            json={"name": self._key},
            headers={"X-Upload-Content-Type": "application/octet-stream"},
        )
        location = headers["Location"]
        return str(location[0] if isinstance(location, list) else location)

    def commit(self) -> None:
        from gcsfs.core import simple_upload

        try:
            data = bytes(self._buf)
            if self._location is None:
                self._call(simple_upload, self._fs, self._bucket, self._key, data)
            else:
                total = self._sent + len(data)
                body = self._call(_put_chunk, self._fs, self._location, data, self._sent, total)
                self._location = None
                self._check_size(body, total)
        except BaseException:
            self.abort()
            raise
        self._buf = bytearray()
        size = self._sent + len(data)
        self._stats.wrote(size, 1)
        self._fs.invalidate_cache(f"{self._bucket}/{self._key}")

    def _check_size(self, body: Any, total: int) -> None:
        """The finished object holds exactly the bytes sent, or it is removed and the write fails: a server
        that appended a re-sent chunk, or lost one, must never leave an object that looks whole."""
        try:
            size = int(json.loads(body)["size"]) if body else None
        except (ValueError, KeyError, TypeError):
            size = None
        if size is None or size == total:
            return
        with contextlib.suppress(Exception):
            self._remote(self._bucket, self._key, self._fs.rm_file, f"{self._bucket}/{self._key}")
        raise OSError(f"gs://{self._bucket}/{self._key}: the resumable upload ended with {size} bytes, "
                      f"{total} were sent: removed")  # fmt: skip

    def abort(self) -> None:
        self._buf = bytearray()
        location, self._location = self._location, None
        if location is None:
            return
        try:
            self._remote(self._bucket, self._key, self._fs.call, "DELETE", location)
        except Exception:  # noqa: BLE001 - the upload already failed; GCS expires abandoned sessions
            log.warning(
                "could not cancel the resumable upload of gs://%s/%s", self._bucket, self._key, exc_info=True
            )


@register_store
class GcsStore(ObjectStore):
    """Google Cloud Storage (gcsfs): resumable uploads in chunks of `storage.gcs.upload.chunk.size`; no
    unfinished write to list (GCS cannot list resumable sessions: they expire by themselves)."""

    backend = Backend.GCS

    @classmethod
    def identity(cls, config: RsmConfig) -> str:
        return f"{endpoint_of(config, 'storage.gcs.endpoint.url')}|{config.get('storage.gcs.project')}"

    @classmethod
    def open(cls, config: RsmConfig, *, create: bool = True) -> ObjectStore:
        fs, request_timeout, attempts = open_filesystem(config)
        chunk = int(config.get("storage.gcs.upload.chunk.size"))  # type: ignore[arg-type]
        store = cls(fs, Backend.GCS, None, chunk, request_timeout, attempts)
        store.where = where(config)
        return store

    def bucket_exists(self, bucket: str) -> bool | None:
        return bucket_exists(self._remote, self.fs, bucket)

    def _writer(self, bucket: str, key: str) -> ObjectWriter:
        return GcsWriter(self._remote, self.fs, self.stats, self.part_size, bucket, key)
