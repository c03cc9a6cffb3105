"""How a split's Arrow batches cross from a Python worker to the JVM: two shared-memory slots, or the pipe.

Why: a batch is mostly its values (~100 MB per million rows of 100-byte values). Through the worker's
stdout pipe every byte was copied into the kernel by the worker and out of it again by the JVM, into a
buffer Arrow allocated for it, a few hundred KiB per wake-up. With shared memory the worker writes the
batch's IPC message once, into a slot of a `/dev/shm` file both processes map, and the JVM's
`ColumnVector`s point into the slot (`wrapForeignAllocation`): no copy on the JVM side, no kernel copy,
no pipe traffic but a few bytes of notice per batch.

The JVM owns the file: it creates it (two slots of `slot_bytes`), asks the worker to map it
(`shm.map`), then unlinks it, so nothing is left in /dev/shm whatever happens to either process. The
worker reserves the whole file first (`posix_fallocate`): a full tmpfs then refuses the mapping (and the
JVM keeps the pipe) instead of killing the worker with SIGBUS on a write. Only the pages written count
in the worker's resident set: about the two batches in flight.

Flow control: batch `i` goes to slot `i % 2`, which still holds batch `i - 2`; the JVM sends one byte
on the worker's stdin for every batch it is done with (Spark asked for the next one), and the worker
waits for batch `i - 2`'s byte before overwriting its slot. So the worker decodes one batch ahead of
Spark, as with the pipe's backpressure. A batch bigger than a slot is sent as slices of its rows (halves,
halved again until each fits: a slice is a view, its IPC message carries only its rows): a Fetch
response of 8 MiB of zstd decodes to ~17 MiB of rows, which would otherwise all have crossed the pipe.
Only a row bigger than a slot (a huge key or value) goes inline through the pipe, copied as before; it
is acknowledged the same way.

Notices on the pipe (after the read reply's status byte), big-endian: `S u32 len <schema message>`
first, then per batch `B u32 slot u32 len` (the slot holds an IPC stream: schema, the batch, end) or
`I u32 len <batch message>`, and `E` at the end, before the trailer.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import BinaryIO

import pyarrow as pa

SCHEMA, SLOT, INLINE, END = b"S", b"B", b"I", b"E"
_U32 = struct.Struct(">I")
_SLOT = struct.Struct(">II")
_SLOTS = 2


class SharedSlots:
    """The two slots of a mapped `/dev/shm` file (mapped once per worker, reused by every task)."""

    def __init__(self, path: str, slot_bytes: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, _SLOTS * slot_bytes)
            self.map = mmap.mmap(fd, _SLOTS * slot_bytes)
        finally:
            os.close(fd)
        self.slot_bytes = slot_bytes
        self.buffers = [
            pa.py_buffer(memoryview(self.map)[i * slot_bytes : (i + 1) * slot_bytes]) for i in range(_SLOTS)
        ]


class SlotSender:
    """One split's batches through the slots (module docstring); `drain`, called after the trailer, takes
    every acknowledgement still owed, so the worker's stdin holds only the next request afterwards."""

    def __init__(self, slots: SharedSlots, out: BinaryIO, acks: BinaryIO, schema: pa.Schema) -> None:
        self.slots, self.out, self.acks, self.schema = slots, out, acks, schema
        self.sent = self.acked = self.inline = 0
        message = schema.serialize()
        out.write(SCHEMA + _U32.pack(message.size))
        out.write(message)
        out.flush()

    def _wait_acks(self, upto: int) -> None:
        while self.acked < upto:
            if not self.acks.read(1):
                raise EOFError("the JVM closed the pipe before acknowledging a batch")
            self.acked += 1

    def send(self, batch: pa.RecordBatch) -> None:
        # an IPC stream (schema, batch, end) is ~1 KiB more than the batch's own message
        room, size = self.slots.slot_bytes - (64 << 10), pa.ipc.get_record_batch_size(batch)
        fits = size <= room
        if not fits and batch.num_rows > 1 and size // batch.num_rows < room:  # its rows fit, some at least
            half = batch.num_rows // 2
            self.send(batch.slice(0, half))
            self.send(batch.slice(half))
            return
        slot = self.sent % _SLOTS
        self._wait_acks(self.sent - _SLOTS + 1)  # batch sent - 2 left this slot
        if fits:
            sink = pa.FixedSizeBufferWriter(self.slots.buffers[slot])
            with pa.ipc.new_stream(sink, self.schema) as writer:
                writer.write_batch(batch)
            self.out.write(SLOT + _SLOT.pack(slot, sink.tell()))
        else:
            message = batch.serialize()
            self.out.write(INLINE + _U32.pack(message.size))
            self.out.write(message)
            self.inline += 1
        self.out.flush()
        self.sent += 1

    def counts(self) -> dict[str, int]:
        """Batches sent each way (the worker's stats: tests and the benchmark check which way went)."""
        return {"slots": self.sent - self.inline, "inline": self.inline}

    def close(self) -> None:
        self.out.write(END)
        self.out.flush()

    def drain(self) -> None:
        """After the trailer: take the acknowledgements of the batches the JVM has not yet let go."""
        self._wait_acks(self.sent)


class PipeSender:
    """One split's batches as an Arrow IPC stream on the pipe: where the JVM has no slots mapped (no
    /dev/shm, or the mapping was refused)."""

    def __init__(self, out: BinaryIO, schema: pa.Schema) -> None:
        self.out = out
        self.writer = pa.ipc.new_stream(out, schema)
        self.sent = 0

    def send(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.out.flush()
        self.sent += 1

    def counts(self) -> dict[str, int]:
        return {"pipe": self.sent}

    def close(self) -> None:
        self.writer.close()

    def drain(self) -> None:
        pass
