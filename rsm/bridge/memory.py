"""The bridge process's memory: glibc's allocator settings and the size of the shared chunk arena.

Why a module of its own: both are sized from measurements of the fetch path (see each docstring), and
both are what an operator tunes when the bridge's memory matters.
"""

from __future__ import annotations

import sys

# glibc mmap threshold for the bridge process (see tune_allocator); glibc caps it at 32 MiB on 64-bit
DEFAULT_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
DEFAULT_ARENA_BLOCK_BYTES = 4 * 1024 * 1024
KAFKA_READER_THREADS = 10  # remote.log.reader.threads' default: remote fetches open at once
# the default arena's cap (its pages are reserved up front); a bigger chunk cache keeps the rest on the heap
ARENA_MAX_BYTES = 256 * 1024 * 1024


def default_arena_blocks(cache_bytes: int, block_bytes: int, prefetch: int, read_ahead_bytes: int) -> int:
    """How many chunk blocks the default arena has: the chunk cache's, plus what Kafka's remote readers
    may hold at once - each its stream's current chunk, its prefetches, and the chunks its read-ahead
    (a ring's worth of announced, unreleased pieces) spans - at most ``ARENA_MAX_BYTES``.

    Why that many: when every block is taken a chunk is decoded on the heap and copied into a ring slot
    instead (measured: with 16 spare blocks, ten streaming readers sent 41% of their bytes that way).
    """
    per_reader = 1 + prefetch + -(-read_ahead_bytes // block_bytes) + 1  # + 1: read-ahead straddling two
    wanted = cache_bytes // block_bytes + KAFKA_READER_THREADS * per_reader
    return max(1, min(wanted, ARENA_MAX_BYTES // block_bytes))


def tune_allocator(mmap_threshold: int = DEFAULT_MMAP_THRESHOLD_BYTES) -> bool:
    """Keep large buffers (decoded chunks, several MiB each) in glibc's heap instead of fresh mmaps.

    Why: every chunk a fetch decodes allocates a few buffers of the chunk size; above glibc's mmap
    threshold each is a new mapping, page-faulted in and unmapped again, and those faults cost more CPU
    than the decryption and decompression themselves (measured: a cold compressed+encrypted 1 MiB
    fetch took about 4x the CPU). With a higher threshold (and trim threshold) freed chunks are reused.
    Returns False where it does not apply (not glibc, or ``mmap_threshold`` <= 0).
    """
    if mmap_threshold <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's mallopt parameter numbers
        return bool(libc.mallopt(m_mmap_threshold, mmap_threshold)) and bool(
            libc.mallopt(m_trim_threshold, 4 * mmap_threshold)
        )
    except (OSError, AttributeError):
        return False
