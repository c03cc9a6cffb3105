"""The Python side of the columnar scan: a worker process the jar's JVM code talks to over its stdin/stdout.

`format("kafka-tiered")` with the jar on the class path is a Spark DataSource V2 written in Java
(`spark_reader/jvm`) that is only a shell: every decision (options, planning, pushed filters, offsets,
reading, errors) is made here, by calling the same entry points the Python Data Source calls
(`spark_reader.source.FilteringBatchReader`, `spark_reader.stream.TieredStreamReader`,
`spark_reader.partition_reader.read_partition`). What crosses to the JVM is data: the schema as Spark's
JSON, input partitions as opaque pickled bytes, offsets as the Kafka source's JSON, and the rows as an
Arrow IPC stream that the JVM maps into `ColumnarBatch`es of column vectors over the Arrow buffers
(`DirectArrowColumnVector`) without a row in between.

Why a worker process per task slot over a pipe, not the broker bridge (`rsm.bridge`): the bridge is the
RSM's server for one broker (its admission, permits and shared-memory rings are sized for fetches, and
`spark_reader` may not import it: see tests/tools/test_layout.py). A Spark executor needs something simpler:
one decoder per running task, all decoding at once. One process per slot gets that without touching the
GIL (each process has its own) and isolates a task's failure. The pipe carries requests and replies; the
batches cross in two shared-memory slots (`spark_reader.handoff`: the JVM's vectors are the slot's bytes,
and the worker overwrites a slot only once the JVM acknowledged the batch in it), or as an Arrow IPC stream
on the pipe where the JVM has no slots. Either way the worker runs at most one batch ahead of Spark, so a
task holds about two chunks (the one being decoded, the next in flight: `partition_reader._chunks`) plus
two batches, whatever the segment size. Arrow IPC needs no parsing on the JVM side: Arrow's Java library
(shipped with Spark) loads it into vectors that Spark wraps as they are. The JVM keeps idle workers for
the next task (as PySpark reuses its workers) and kills one whose stream it abandoned (a `limit` stopping
early).

Framing (big-endian): a request is `u32 len, JSON, u32 len, blob`; a reply is `u8 status (0 ok, 1 error),
u32 len, JSON, u32 count, count x (u32 len, blob)`. The `read` reply is `u8 0`, then the batches: an Arrow
IPC stream (its schema first, its end-of-stream marker last), or with `slots` in the request the notices
of `spark_reader.handoff` (batches in shared memory, acknowledged on stdin); then a trailer `u8 status,
u32 len, JSON` with the rows sent or the one-line error: an error in the middle of a split ends the stream
cleanly, then is reported.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import struct
import sys
from typing import BinaryIO

# Before the columnar kernel loads (it reads this once): keep at most 16 MiB of released column mappings
# for reuse instead of 128 MiB. A worker runs per task slot and must stay small (under 200 MiB
# reading 256 MiB segments); measured here, 128 MiB of pool took a worker from ~170 to ~285 MiB of peak
# RSS on big segments for no gain in rows/s.
os.environ.setdefault("SEGMENT_FORMAT_POOL_MIB", "16")

from spark_reader import jvm_ops  # noqa: E402

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
OK, ERROR = 0, 1


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    if not data and n:
        return None  # the JVM closed the pipe: exit
    if len(data) != n:
        raise EOFError(f"short read: {len(data)} of {n} bytes")
    return data


def read_request(stream: BinaryIO) -> tuple[dict, bytes] | None:
    """The next request (header, blob), or None at end of input."""
    head = _read_exact(stream, 4)
    if head is None:
        return None
    header = json.loads(_read_exact(stream, _U32.unpack(head)[0]) or b"{}")
    blob = _read_exact(stream, _U32.unpack(_read_exact(stream, 4) or b"")[0]) or b""
    return header, blob


def write_reply(out: BinaryIO, status: int, body: dict, blobs: list[bytes] = ()) -> None:  # type: ignore[assignment]
    payload = json.dumps(body).encode()
    parts = [bytes([status]), _U32.pack(len(payload)), payload, _U32.pack(len(blobs))]
    for blob in blobs:
        parts += [_U32.pack(len(blob)), blob]
    out.write(b"".join(parts))
    out.flush()


def write_trailer(out: BinaryIO, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    out.write(bytes([status]) + _U32.pack(len(payload)) + payload)
    out.flush()


def serve(stdin: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until the JVM closes stdin."""
    while (request := read_request(stdin)) is not None:
        header, blob = request
        op = header.get("op")
        if op == "read":
            out.write(bytes([OK]))
            status, trailer, drain = jvm_ops.read(header, blob, out, stdin)
            write_trailer(out, status, trailer)
            drain()
            continue
        try:
            body, blobs = jvm_ops.call(op, header, blob)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the JVM as one line
            write_reply(out, ERROR, {"error": jvm_ops.one_line(exc), "type": type(exc).__name__})
            continue
        write_reply(out, OK, body, blobs)


PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe to the JVM instead of Linux's 64 KiB: a batch crosses in a few writes, not hundreds of
    writer/reader switches (F_SETPIPE_SZ; left as it is where the system refuses)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", 1031)
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, set_size, PIPE_BYTES)


# glibc's malloc: the heap is not trimmed and no block is mmapped below this size. A worker decrypts and
# decompresses chunk after chunk (4 MiB buffers, several per chunk); with glibc's defaults each of them is
# a fresh mapping or heap growth returned to the kernel on free, so every chunk paid ~1000 page faults
# per buffer again (measured: 1.1 M faults and 0.2 CPU s per 3 M rows, a quarter of the worker's time).
# The C decoder's own column buffers are pooled apart (SEGMENT_FORMAT_POOL_MIB, above).
# Freed memory stays in the heap for the next chunk instead: what the worker holds at once is still about
# two chunks, the heap keeps some freed ones on top (peak RSS measured below). One arena: the chunk
# prefetch thread (`partition_reader._chunks`) would otherwise get an arena of its own that keeps its own
# freed chunks (measured: peak RSS 214 MiB with two arenas, 181 MiB with one, 161 MiB with glibc's
# defaults, at no measurable cost in rows/s: the two threads rarely allocate at the same moment).
MALLOC_KEEP_BYTES = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _keep_freed_memory() -> None:
    """mallopt(3) on glibc (a no-op elsewhere, or where the C library has no mallopt)."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_ARENA_MAX, 1)
        libc.mallopt(_M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES)
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)


def main() -> None:
    """Entry point (`python -m spark_reader.jvm_worker`): the protocol owns the original stdout; anything
    else printing (a library, C code) goes to stderr, which the JVM passes through to its own log."""
    _keep_freed_memory()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    _widen_pipe(protocol_fd)
    sys.stdout = sys.stderr
    logging.basicConfig(level=os.environ.get("KAFKA_TIERED_WORKER_LOG", "WARNING"), stream=sys.stderr)
    # a BrokenPipeError: the JVM gave up on this worker (a query stopped reading), nothing to report
    with (
        os.fdopen(protocol_fd, "wb", buffering=1 << 20) as out,
        os.fdopen(0, "rb", buffering=1 << 16) as stdin,
        contextlib.suppress(BrokenPipeError),
    ):
        serve(stdin, out)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
