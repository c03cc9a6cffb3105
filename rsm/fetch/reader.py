"""Lazy, chunk-by-chunk reading of a stored segment.

Kafka's broker calls `fetchLogSegment(metadata, startPosition)` with no end, reads up to its fetch size and
closes the stream; a consumer catching up reads a segment sequentially. So a fetch stream:

- downloads nothing until read, then exactly the chunks covering the requested range (one ranged GET per
  chunk of the `.log` object);
- decodes each chunk (decrypt, decompress, check) and serves it from a byte-bounded cache shared by all
  streams, keyed by the manifest's copy id so a re-copied segment never serves stale bytes;
- reads the next `prefetch` chunks ahead in background threads while the caller consumes the current one,
  never past the requested end;
- stops downloading when closed.

`SegmentReader` is the same machinery without the broker's metadata: give it a store and a manifest (the
Spark reader and the migration tool use it).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING

from rsm.api.metadata import IndexType
from rsm.config.keyring import Keyring
from rsm.fetch.cache import ByteLRU
from rsm.metrics import FOLD_AFTER
from rsm.store.layout import MANIFEST_SUFFIX
from rsm.store.objects import ObjectStore
from rsm.stored.cipher import SegmentCipher
from rsm.stored.data_keys import cipher_for
from rsm.stored.manifest import INDEX_NUMBERS, Manifest
from rsm.stored.manifest import require_authenticated as require_authenticated_manifest
from rsm.stored.pieces import Codec, PieceKind, check_piece
from rsm.stored.stages import decode_piece, decode_piece_into
from segment_format.buffers import Buffer, copy_into

if TYPE_CHECKING:
    from rsm.metrics import RsmMetrics

log = logging.getLogger(__name__)

# where a reader decodes a chunk: a buffer of exactly the asked size (the bridge's shared arena), or None
ChunkAllocator = Callable[[int], "Buffer | None"]

# a stream starts decoding chunks ahead of its reader only after this many bytes (and half a chunk):
# more than Kafka's default fetch size (1 MiB) plus the bridge's read-ahead
PREFETCH_AFTER_BYTES = 2 * 1024 * 1024


def list_manifests(store: ObjectStore, bucket: str, prefix: str = "") -> list[str]:
    """Keys of every committed segment (its manifest) under a key prefix, sorted (= by partition, offset)."""
    return [k for k in store.list(bucket, prefix) if k.endswith(MANIFEST_SUFFIX)]


class SegmentReader:
    """Decoded chunks and indexes of one stored segment copy."""

    @classmethod
    def open(
        cls,
        store: ObjectStore,
        bucket: str,
        manifest_key: str,
        keyring: Keyring | None = None,
        chunk_cache: ByteLRU[bytes] | None = None,
        require_authenticated: bool = False,
    ) -> SegmentReader:
        """A reader from a manifest alone: no broker, no metadata topic (Spark reader, migration).

        ``require_authenticated``: refuse manifests no key authenticates (`manifest.require.authenticated`).
        """
        manifest = Manifest.from_bytes(store.get(bucket, manifest_key), store.describe(bucket, manifest_key))
        if require_authenticated:
            require_authenticated_manifest(manifest)
        return cls(store, bucket, manifest, cipher_for(manifest, keyring), chunk_cache)

    def __init__(
        self,
        store: ObjectStore,
        bucket: str,
        manifest: Manifest,
        cipher: SegmentCipher | None,
        chunk_cache: ByteLRU[bytes] | None = None,
        allocate: ChunkAllocator | None = None,
        metrics: RsmMetrics | None = None,
    ) -> None:
        """``metrics``: where the fetches of this segment are counted, with the chunks they downloaded (the
        RSM's readers; None for readers without a broker)."""
        self.store = store
        self.bucket = bucket
        self.manifest = manifest
        self.cipher = cipher
        self.cache = chunk_cache
        self.allocate = allocate
        # where this segment's fetches are counted (rsm.metrics), once per reader
        seg = manifest.segment
        self.stats = None if metrics is None else metrics.partition(seg.topic, seg.partition)

    @property
    def size(self) -> int:
        return self.manifest.log.size

    def chunk(self, i: int) -> bytes:
        key = (self.manifest.cache_id, i)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        index = self.manifest.log
        lo, hi = index.stored_span(i)
        start, end = index.original_span(i)
        crc = None if index.crc32c is None else index.crc32c[i]
        tag = None if crc is None else self.manifest.piece_tag(PieceKind.LOG, i)
        block = self.allocate(end - start) if self.allocate is not None else None
        if block is not None:
            self._decode_into(i, lo, hi, block, crc, tag)
            data = block
        else:
            stored = self.store.get_range(self.bucket, self.manifest.location["log"], lo, hi)
            data = decode_piece(
                stored, kind=PieceKind.LOG, number=i, codec=index.codecs[i], size=end - start,
                cipher=self.cipher, crc=crc, tag=tag,
            )  # fmt: skip
        if self.stats is not None:
            self.stats.downloaded(hi - lo)
        if self.cache is not None:
            self.cache.put(key, data)
        return data

    def _decode_into(
        self, i: int, lo: int, hi: int, block: Buffer, crc: int | None, tag: bytes | None
    ) -> None:
        """Decode chunk ``i`` (stored bytes [lo, hi)) into ``block``; a plain chunk is read straight in."""
        out = memoryview(block)
        key = self.manifest.location["log"]
        codec = self.manifest.log.codecs[i]
        if codec is Codec.NONE and self.cipher is None:
            got = self.store.get_range_into(self.bucket, key, lo, out, checksum=crc is not None)
            check_piece(out, kind=PieceKind.LOG, number=i, size=len(out), crc=crc, computed_crc=got, tag=tag)
        else:
            stored = self.store.get_range(self.bucket, key, lo, hi)
            decode_piece_into(
                stored, out, kind=PieceKind.LOG, number=i, codec=codec, cipher=self.cipher, crc=crc, tag=tag
            )

    def index(self, index_type: IndexType) -> bytes:
        entry = self.manifest.indexes[index_type]
        stored = self.store.get_range(
            self.bucket, self.manifest.location["indexes"], entry.offset, entry.offset + entry.stored_size
        )
        number = INDEX_NUMBERS[index_type]
        return bytes(
            decode_piece(
                stored,
                kind=PieceKind.INDEX,
                number=number,
                codec=entry.codec,
                size=entry.size,
                cipher=self.cipher,
                crc=entry.crc32c,
                tag=self.manifest.piece_tag(PieceKind.INDEX, number) if entry.crc32c is not None else None,
            )
        )

    def read_range(self, start: int, stop: int) -> bytes:
        """Original bytes [start, stop) of the segment, decoding only the chunks covering them."""
        stop = min(stop, self.size)
        if start >= stop:
            return b""
        cs = self.manifest.log.chunk_size
        out = bytearray()
        for i in range(start // cs, (stop - 1) // cs + 1):
            data = self.chunk(i)
            lo = max(start - i * cs, 0)
            hi = min(stop - i * cs, len(data))
            out += memoryview(data)[lo:hi]
        return bytes(out)

    def stream(
        self,
        start: int,
        end: int | None,
        executor: Executor | None,
        prefetch: int,
        on_error: Callable[[BaseException], BaseException] | None = None,
    ) -> SegmentStream:
        return SegmentStream(self, start, end, executor, prefetch, on_error)


class SegmentStream(io.RawIOBase):
    """Bytes [start, end] (end inclusive, as in Kafka) of a segment, fetched lazily chunk by chunk.

    Read-ahead (``prefetch`` chunks in background threads) starts only once this stream has consumed
    `PREFETCH_AFTER_BYTES` (at least half a chunk): Kafka reads its fetch size (1 MiB by default) from a
    random position and closes, so prefetching at the first read would decode a whole chunk for nothing;
    a reader that goes on is sequential, and from then on the next chunks are decoded ahead of it.
    """

    def __init__(
        self,
        reader: SegmentReader,
        start: int,
        end: int | None,
        executor: Executor | None,
        prefetch: int,
        on_error: Callable[[BaseException], BaseException] | None = None,
    ) -> None:
        super().__init__()
        size = reader.size
        last = size - 1 if end is None else min(end, size - 1)
        self._reader = reader
        self._start = start
        self._pos = start
        self._stop = last + 1  # exclusive
        self._executor = executor
        self._prefetch = prefetch if executor is not None else 0
        self._on_error = on_error
        # counted at close: bytes read and time open, queued on the partition's fetch series
        # (rsm.metrics.Series.queue inlined: the objects a close touches after a 1 MiB copy are out of the
        # CPU's caches, and this is the hottest recording there is; through the method call the metrics
        # cost 1.6-2.2% of a cached 1 MiB fetch, inlined 1.1-1.4%, benchmarks/metrics_overhead.py)
        self._fetches = None if reader.stats is None else reader.stats.fetches
        self._opened = time.monotonic() if self._fetches is not None else 0.0
        self._futures: dict[int, Future[bytes]] = {}
        self._current: tuple[int, bytes] | None = None
        self._lock = threading.Lock()
        cs = reader.manifest.log.chunk_size
        self._chunk_size = cs
        self._last_chunk = (self._stop - 1) // cs if self._stop > start else -1
        self._prefetch_after = max(PREFETCH_AFTER_BYTES, cs // 2)
        self._prefetched_to = -1  # highest chunk number asked for in the background

    def readable(self) -> bool:
        return True

    @property
    def remaining(self) -> int:
        """Bytes of the requested range not read yet (the bridge tells a client that stopped early)."""
        return max(0, self._stop - self._pos)

    def _maybe_prefetch(self, i: int) -> None:
        """Ask for chunks after ``i`` in the background, once this stream has proved to be sequential."""
        if not self._prefetch or self._pos - self._start < self._prefetch_after:
            return
        last = min(i + self._prefetch, self._last_chunk)
        for j in range(max(i + 1, self._prefetched_to + 1), last + 1):
            if j not in self._futures:
                self._futures[j] = self._executor.submit(self._reader.chunk, j)  # type: ignore[union-attr]
        self._prefetched_to = max(self._prefetched_to, last)

    def _chunk(self, i: int) -> bytes:
        fut = self._futures.pop(i, None)
        try:
            if fut is None:
                return self._reader.chunk(i)
            if not fut.done():  # its download is still under way in the background: a network wait too
                with self._reader.store.network_wait():
                    return fut.result()
            return fut.result()
        except BaseException as exc:
            if self._on_error is not None:
                raise self._on_error(exc) from None
            raise

    def _take(self, limit: int) -> memoryview:
        """Up to `limit` bytes from the current position, within one chunk (a view, not a copy)."""
        cs = self._chunk_size
        i = self._pos // cs
        if self._current is None or self._current[0] != i:
            self._current = (i, self._chunk(i))
        data = self._current[1]
        lo = self._pos - i * cs
        hi = min(len(data), lo + limit, self._stop - i * cs)
        self._pos += hi - lo
        self._maybe_prefetch(i)
        return memoryview(data)[lo:hi]

    def _want(self, size: int | None) -> int:
        if self.closed:
            raise ValueError("read from a closed segment stream")
        remaining = self._stop - self._pos
        if remaining <= 0:
            return 0
        return remaining if size is None or size < 0 else min(size, remaining)

    def read(self, size: int | None = -1) -> bytes:
        with self._lock:
            want = self._want(size)
            if want == 0:
                return b""
            first = self._take(want)
            if len(first) == want:
                return bytes(first)
            out = bytearray(first)
            while len(out) < want:
                out += self._take(want - len(out))
            return bytes(out)

    def read_view(self, size: int = -1) -> memoryview:
        """Up to ``size`` bytes (fewer at a chunk boundary; empty only at the end) without copying.

        The view points into an immutable decoded chunk, so it stays valid after further reads; the
        bridge sends it to its socket as it is (no copy in Python at all).
        """
        with self._lock:
            want = self._want(size)
            return self._take(want) if want else memoryview(b"")

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` straight from the decoded chunks: one copy, no intermediate bytes object."""
        out = memoryview(buffer).cast("B")
        with self._lock:
            want = self._want(len(out))
            pieces = []
            n = 0
            while n < want:
                pieces.append(self._take(want - n))
                n += len(pieces[-1])
            return copy_into(out, pieces)  # GIL released for the copy

    def close(self) -> None:
        with self._lock:
            for fut in self._futures.values():
                fut.cancel()
            self._futures.clear()
            self._current = None
            series, self._fetches = self._fetches, None
        if series is not None:
            pending = series.pending
            pending.append((1, self._pos - self._start, (time.monotonic() - self._opened) * 1000.0))
            if len(pending) >= FOLD_AFTER:
                series.fold()
        super().close()
