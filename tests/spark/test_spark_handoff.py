"""How a worker hands batches to the JVM (`spark_reader.handoff`), seen from the JVM's side of the protocol
(the notices on the pipe, the slots' bytes, the acknowledgements): a batch in a slot is an Arrow stream
that reads back as the batch; the worker never overwrites a slot before the batch in it was acknowledged;
a batch bigger than a slot crosses in slices of its rows that fit, and only a row bigger than a slot goes
inline; `drain` takes the acknowledgements still owed. (The JVM's own
reader runs in every columnar Spark test; tests/spark/test_spark_sessions.py checks which way the batches went.)
"""

from __future__ import annotations

import io
import os
import struct
import threading
from pathlib import Path

import pyarrow as pa

from spark_reader.handoff import PipeSender, SharedSlots, SlotSender


def _batch(n: int, start: int = 0) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(range(start, start + n), pa.int64()), pa.array([b"v" * 50] * n, pa.binary())],
        names=["offset", "value"],
    )


def _slots(tmp_path: Path, slot_bytes: int) -> SharedSlots:
    path = tmp_path / "slots"
    path.write_bytes(b"")
    return SharedSlots(str(path), slot_bytes)


def _notices(raw: bytes, slots: SharedSlots) -> tuple[pa.Schema, list[tuple[str, pa.RecordBatch]]]:
    """What the JVM reads: the schema, then each batch and the way it came."""
    view = io.BytesIO(raw)
    assert view.read(1) == b"S"
    schema = pa.ipc.read_schema(pa.py_buffer(view.read(struct.unpack(">I", view.read(4))[0])))
    out = []
    while (kind := view.read(1)) != b"E":
        if kind == b"B":
            slot, length = struct.unpack(">II", view.read(8))
            start = slot * slots.slot_bytes
            table = pa.ipc.open_stream(bytes(slots.map[start : start + length])).read_all()
            out.append(("slot", table.to_batches()[0]))
        else:
            assert kind == b"I"
            message = view.read(struct.unpack(">I", view.read(4))[0])
            out.append(("inline", pa.ipc.read_record_batch(pa.py_buffer(message), schema)))
    return schema, out


def test_batches_cross_in_slots_or_inline_and_read_back_equal(tmp_path: Path) -> None:
    slots = _slots(tmp_path, 256 << 10)
    out = io.BytesIO()
    acks = io.BytesIO(b"\1" * 4)
    huge = pa.record_batch(
        [pa.array([210], pa.int64()), pa.array([b"h" * (300 << 10)], pa.binary())], names=["offset", "value"]
    )  # one row bigger than a slot
    batches = [_batch(10), _batch(200, 10), huge, _batch(5, 211)]
    sender = SlotSender(slots, out, acks, batches[0].schema)
    for b in batches[:2]:
        sender.send(b)
    _, got = _notices(out.getvalue() + b"E", slots)  # what the JVM has seen so far, read before overwrites
    assert [(way, b.equals(want)) for (way, b), want in zip(got, batches[:2], strict=True)] == [
        ("slot", True),
        ("slot", True),
    ]
    for b in batches[2:]:
        sender.send(b)
    sender.close()
    sender.drain()
    schema, got = _notices(out.getvalue(), slots)
    assert schema == batches[0].schema
    assert [way for way, _ in got] == ["slot", "slot", "inline", "slot"]
    assert got[2][1].equals(huge)
    assert sender.counts() == {"slots": 3, "inline": 1}
    assert acks.read() == b""  # every acknowledgement taken: the next request starts clean


def test_a_batch_bigger_than_a_slot_crosses_in_slices_of_its_rows(tmp_path: Path) -> None:
    slots = _slots(tmp_path, 256 << 10)
    out = io.BytesIO()
    acks = io.BytesIO(b"\1" * 2)
    batch = _batch(5000)  # ~300 KiB: two halves fit
    sender = SlotSender(slots, out, acks, batch.schema)
    sender.send(batch)
    sender.close()
    sender.drain()
    _, got = _notices(out.getvalue(), slots)
    assert [way for way, _ in got] == ["slot", "slot"]
    assert [b.num_rows for _, b in got] == [2500, 2500]
    assert pa.Table.from_batches([b for _, b in got]).equals(pa.Table.from_batches([batch]))
    assert sender.counts() == {"slots": 2, "inline": 0}


def test_a_slot_is_not_overwritten_before_its_batch_is_acknowledged(tmp_path: Path) -> None:
    slots = _slots(tmp_path, 64 << 10 << 2)
    read_end, write_end = os.pipe()
    acks = os.fdopen(read_end, "rb", buffering=0)
    out = io.BytesIO()
    sender = SlotSender(slots, out, acks, _batch(1).schema)
    sender.send(_batch(10))  # slot 0
    sender.send(_batch(10, 10))  # slot 1
    third = threading.Thread(target=sender.send, args=(_batch(10, 20),))
    third.start()
    third.join(0.5)
    assert third.is_alive(), "the third batch overwrote slot 0 before the first was acknowledged"
    os.write(write_end, b"\1")  # the JVM is done with the first batch
    third.join(5)
    assert not third.is_alive() and sender.sent == 3
    os.write(write_end, b"\1\1")
    sender.close()
    sender.drain()
    os.close(write_end)
    acks.close()


def test_the_pipe_sender_writes_one_arrow_stream() -> None:
    out = io.BytesIO()
    sender = PipeSender(out, _batch(1).schema)
    sender.send(_batch(3))
    sender.send(_batch(2, 3))
    sender.close()
    sender.drain()
    table = pa.ipc.open_stream(out.getvalue()).read_all()
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert sender.counts() == {"pipe": 2}
