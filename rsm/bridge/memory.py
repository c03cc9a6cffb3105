"""The bridge process's memory: glibc's allocator settings and the size of the shared chunk arena.

Why a module of its own: both are sized from measurements of the fetch path (see each docstring), and
both are what an operator tunes when the bridge's memory matters.
"""

from __future__ import annotations

import sys

# glibc mmap threshold for the bridge process (see tune_allocator); glibc caps it at 32 MiB on 64-bit
DEFAULT_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# glibc malloc arenas of the bridge process (see tune_allocator): one, so that trim_heap reaches all of it
DEFAULT_MALLOC_ARENAS = 1
DEFAULT_ARENA_BLOCK_BYTES = 4 * 1024 * 1024
KAFKA_READER_THREADS = 10  # remote.log.reader.threads' default: remote fetches open at once
# the default arena's cap (its pages are reserved up front); a bigger chunk cache keeps the rest on the heap
ARENA_MAX_BYTES = 256 * 1024 * 1024


def default_arena_blocks(
    cache_bytes: int, block_bytes: int, prefetch: int, read_ahead_bytes: int, slots: int = 8
) -> int:
    """How many chunk blocks the default arena has: the chunk cache's, plus what Kafka's remote readers
    may hold at once - each its stream's current chunk, its prefetches, and the chunks its read-ahead
    (a ring's worth of announced, unreleased pieces: ``read_ahead_bytes`` in ``slots`` slots) spans - at
    most ``ARENA_MAX_BYTES`` (and at least one block).

    Why that many: when every block is taken a chunk is decoded on the heap and copied into a ring slot
    instead (measured: with 16 spare blocks, ten streaming readers sent 41% of their bytes that way).
    Read-ahead spans at most one block per announced piece (each counts for a slot at least, and lies in
    one block), plus one it straddles into: with small chunks that is the ring's slot count, not its bytes
    over the chunk size (with 32 KiB chunks and 8 slots of 1 MiB: 8 blocks per reader, not 257).
    """
    spanned = min(slots, -(-read_ahead_bytes // block_bytes) + 1)  # + 1: read-ahead straddling two
    per_reader = 1 + prefetch + spanned
    wanted = cache_bytes // block_bytes + KAFKA_READER_THREADS * per_reader
    return max(1, min(wanted, ARENA_MAX_BYTES // block_bytes))


def tune_allocator(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD_BYTES, arenas: int = DEFAULT_MALLOC_ARENAS
) -> bool:
    """Keep large buffers (decoded chunks, several MiB each) in glibc's heap instead of fresh mmaps, in as
    many malloc arenas as ``arenas``.

    Why the threshold: every chunk a fetch decodes allocates a few buffers of the chunk size; above glibc's
    mmap threshold each is a new mapping, page-faulted in and unmapped again, and those faults cost more
    CPU than the decryption and decompression themselves (measured: a cold compressed+encrypted 1 MiB
    fetch took about 4x the CPU). With a higher threshold (and trim threshold) freed chunks are reused.

    Why the arenas: by default each thread that allocates while another holds an arena gets one of its
    own (up to 8 per core), and glibc never gives back the free top of those (``malloc_trim`` trims the
    main arena only): after ten readers had streamed a segment the bridge stayed at its peak (50 -> 210
    MiB, for good). With one arena ``trim_heap`` returns it after the load (measured: back to 42 MiB), the
    peak is lower (one heap reused instead of several), and fetches were no slower: the bridge's threads
    allocate under the GIL almost always, so they hardly contend for the arena. ``arenas`` <= 0 leaves
    glibc's default. Must run before the process starts threads. Returns False where it does not apply
    (not glibc, or both settings <= 0).
    """
    if (mmap_threshold <= 0 and arenas <= 0) or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # glibc's mallopt parameter numbers
        ok = True
        if mmap_threshold > 0:
            ok = bool(libc.mallopt(m_mmap_threshold, mmap_threshold)) and bool(
                libc.mallopt(m_trim_threshold, 4 * mmap_threshold)
            )
        if arenas > 0:
            ok = bool(libc.mallopt(m_arena_max, arenas)) and ok
        return ok
    except (OSError, AttributeError):
        return False


def trim_heap() -> bool:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``); False where it does not apply.

    Why: ``tune_allocator`` keeps freed chunk-sized buffers in the heap so the next fetch reuses them, and
    glibc then keeps them for good (the trim threshold is raised with it): after ten readers had streamed
    a segment the bridge stayed at its peak. The server calls this once the load has stopped for a moment,
    so memory returns after load and the hot path keeps its reuse (with one malloc arena, see
    ``tune_allocator``, this reaches all of the heap).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False
