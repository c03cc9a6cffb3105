"""Copying decoded bytes into a caller's buffer without holding the GIL.

Why: a fetch hands Kafka about 1 MiB at a time, and a memcpy of that size takes ~100 us. Done with a
memoryview slice assignment it holds the GIL, so every other thread of a busy bridge (or of an in-process
reader) waits; the native copy releases it. ``copy_into_reference`` is the pure-Python reference, kept to
test the native one against.
"""

from __future__ import annotations

from collections.abc import Sequence

from segment_format import _native

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
