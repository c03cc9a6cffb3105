"""Writing objects: the writer protocol, temporary names and unfinished writes, I/O counters, and the
background writer that overlaps an upload with the caller's next chunk."""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


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
    multipart upload (S3), or uncommitted blocks (Azure). None is visible as the object, but both take space (S3 bills upload parts)
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
        if self.upload_id == "uncommitted-blocks":  # rsm.store.azure.UNCOMMITTED
            return f"uncommitted blocks of az://{self.bucket}/{self.key}"
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
        self.lists = 0  # listing requests (pages where the store pages itself: `ObjectStore.list_from`)

    def read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
            self.reads += 1

    def listed(self, pages: int = 1) -> None:
        with self._lock:
            self.lists += pages

    def wrote(self, n: int, objects: int = 0) -> None:
        with self._lock:
            self.bytes_written += n
            self.writes += objects

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written,
                "reads": self.reads,
                "lists": self.lists,
            }


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
        # the caller's context: its operation's budget bounds the uploads too (`rsm.store.deadlines`)
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="rsm-upload", daemon=True)
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
