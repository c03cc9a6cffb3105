"""Moving bytes into a caller's buffer without holding the GIL.

Why: a fetch hands Kafka about 1 MiB at a time, and a memcpy of that size takes ~100 us. Done with a
memoryview slice assignment it holds the GIL, so every other thread of a busy bridge (or of an in-process
reader) waits; the native copy releases it. Reading a stored chunk from a file is the same story four times
over (open, read, close, checksum): ``pread_into`` does all of it in one GIL-free call. The ``*_reference``
functions are the pure-Python references, kept to test the native ones against.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from segment_format import _native
from segment_format.crc import crc32c

Buffer = bytes | bytearray | memoryview


def copy_into(target: bytearray | memoryview, sources: Sequence[Buffer]) -> int:
    """Write ``sources`` back to back at the start of ``target``; returns the bytes written.

    Raises ValueError (nothing written) when they do not fit.
    """
    return _native.copy_into(target, sources)


def copy_into_reference(target: bytearray | memoryview, sources: Sequence[Buffer]) -> int:
    """Pure-Python ``copy_into`` (holds the GIL)."""
    out = memoryview(target).cast("B")
    views = [memoryview(s).cast("B") for s in sources]
    total = sum(len(v) for v in views)
    if total > len(out):
        raise ValueError(f"copy_into: {total} bytes of sources do not fit in a target of {len(out)} bytes")
    n = 0
    for v in views:
        out[n : n + len(v)] = v
        n += len(v)
    return n


def pread_into(
    path: str | os.PathLike[str], offset: int, target: bytearray | memoryview, *, checksum: bool = False
) -> tuple[int, int | None]:
    """Read the file's bytes [offset, offset + len(target)) into ``target``.

    Returns (bytes read, their CRC-32C or None without ``checksum``); fewer bytes than ``len(target)``
    means the file ended first. A missing file raises FileNotFoundError naming it.
    """
    native = getattr(_native, "pread_into", None)
    if native is None:  # a platform without pread: the reference does the same
        return pread_into_reference(path, offset, target, checksum=checksum)
    return native(path, offset, target, checksum)


def pread_into_reference(
    path: str | os.PathLike[str], offset: int, target: bytearray | memoryview, *, checksum: bool = False
) -> tuple[int, int | None]:
    """Pure-Python ``pread_into`` (releases the GIL for each system call)."""
    if offset < 0:
        raise ValueError(f"pread_into: negative offset {offset}")
    out = memoryview(target).cast("B")
    if out.readonly:
        raise BufferError("Object is not writable.")  # as the native one (buffer protocol) says it
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        got = 0
        while got < len(out):
            n = os.preadv(fd, [out[got:]], offset + got)
            if n == 0:
                break
            got += n
    finally:
        os.close(fd)
    return got, (crc32c(out[:got]) if checksum else None)
