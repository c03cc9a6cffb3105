"""The chunk arena: decoded chunks in shared memory that the broker reads in place (ARENA_DATA).

Covers the native block type (lifetime through views), the allocator, decoding into blocks for every
chunk kind (against the heap path), and the bridge's pinning rule: a block a client may still read is
never reused, however hard other fetches press on a tiny arena.
"""

from __future__ import annotations

import dataclasses
import gc
import mmap
import os
import stat
import threading
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all, write_keyring
from segment_format._native import ArenaBlock
from test_bridge_server import tempfile_dir

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.bridge import protocol
from rsm.bridge.client import BridgeConnection
from rsm.bridge.protocol import FrameType
from rsm.bridge.server import BridgeServer, default_arena_blocks
from rsm.bridge.shm import ChunkArena, open_shared_file, remove_stale_rings

KIB = 1024


def test_a_block_lives_while_any_view_of_it_does_and_is_freed_once() -> None:
    mm = mmap.mmap(-1, 64 * KIB)
    freed: list[int] = []
    block = ArenaBlock(mm, 8 * KIB, 100, freed.append)
    assert (len(block), block.offset) == (100, 8 * KIB)
    view = memoryview(block)
    view[:5] = b"hello"
    assert mm[8 * KIB : 8 * KIB + 5] == b"hello"
    piece = view[10:20]
    del block, view
    gc.collect()
    assert freed == []  # a slice still holds it
    del piece
    assert freed == [8 * KIB]
    with pytest.raises(ValueError, match="outside the arena"):
        ArenaBlock(mm, 64 * KIB - 10, 100, freed.append)
    with pytest.raises(TypeError, match="callable"):
        ArenaBlock(mm, 0, 1, None)
    assert freed == [8 * KIB]


def test_the_allocator_hands_out_each_block_once_until_it_is_freed() -> None:
    arena = ChunkArena.anonymous(3, 64 * KIB)
    assert arena.allocate(64 * KIB + 1) is None  # larger than a block: decode on the heap
    blocks = [arena.allocate(64 * KIB - i) for i in range(3)]
    assert sorted(b.offset for b in blocks) == [0, 64 * KIB, 128 * KIB]
    assert arena.allocate(1) is None and arena.free_blocks == 0  # exhausted
    view = memoryview(blocks[1])[5:9]
    assert arena.locate(view) == blocks[1].offset + 5
    assert arena.locate(memoryview(b"elsewhere")) is None
    offset = blocks[1].offset
    del blocks[1]
    assert arena.free_blocks == 0  # the view pins it
    del view
    assert arena.free_blocks == 1
    assert arena.allocate(10).offset == offset


def test_the_arena_file_is_owner_only_and_stale_ones_are_removed(tmp_path: Path) -> None:
    d = tmp_path / "shm"
    d.mkdir(mode=0o700)
    arena = ChunkArena.create(d, 2, 64 * KIB)
    st = arena.path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 128 * KIB
    assert arena.path.name.startswith(f"arena-{os.getpid()}-")
    client = open_shared_file(arena.path, arena.size, "arena")  # what a client maps, read-only
    block = arena.allocate(5)
    memoryview(block)[:] = b"abcde"
    assert client[block.offset : block.offset + 5] == b"abcde"
    others = tmp_path / "others"
    others.mkdir(mode=0o700)
    dead = others / "arena-999999999-0123456789abcdef"  # a bridge pid that is not running
    live = others / "arena-1-0123456789abcdef"  # pid 1 is alive: its arena is left alone
    dead.write_bytes(b"")
    live.write_bytes(b"")
    assert remove_stale_rings(others) == 1 and not dead.exists() and live.exists()
    arena.unlink()
    assert not arena.path.exists()
    assert bytes(memoryview(block)) == b"abcde"  # mappings outlive the name


CASES = {
    "plain": {"compression.enabled": "false", "encryption.enabled": "false"},
    "zstd": {"compression.enabled": "true", "encryption.enabled": "false"},
    "encrypted": {"compression.enabled": "false", "encryption.enabled": "true"},
    "zstd+encrypted": {"compression.enabled": "true", "encryption.enabled": "true"},
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", ["file", "s3"])
def test_chunks_decoded_into_blocks_match_the_heap_path(
    tmp_path: Path, s3_server, case: str, backend: str
) -> None:
    if backend == "s3":
        configs = s3_server.rsm_configs(bucket=s3_server.make_bucket())
    else:
        configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "b"}
    configs.update(CASES[case])
    configs.update(
        {
            "chunk.size": str(64 * KIB),
            "cache.chunk.bytes": str(128 * KIB),
            "encryption.keyring.path": str(write_keyring(tmp_path / "keyring.json")),
            "encryption.key.id": "k1",
        }
    )
    seg = make_segment(
        tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "arena", 0), batches=80, value_size=500
    )
    original = seg.data.log_segment.read_bytes()
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    arena = ChunkArena.anonymous(4, 64 * KIB)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        rsm.set_chunk_allocator(arena.allocate)
        for start, end in [
            (0, None),
            (100, 200_000),
            (64 * KIB - 3, 64 * KIB + 3),
            (len(original) - 1, None),
        ]:
            got = read_all(rsm.fetch_log_segment(md, start, end))
            assert got == original[start : None if end is None else end + 1], (start, end)
        assert arena.free_blocks < 4  # the cache holds blocks: chunks were decoded into the arena
        rsm.set_chunk_allocator(None)
        rsm.close()
        gc.collect()
        assert arena.free_blocks == 4  # every block came back
    finally:
        rsm.close()


def test_a_corrupt_chunk_decoded_into_a_block_is_refused_and_the_block_freed(tmp_path: Path) -> None:
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "bucket": "b",
        "chunk.size": str(64 * KIB),
        "compression.enabled": "false",
    }
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "bad", 3), batches=40, value_size=500)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    arena = ChunkArena.anonymous(2, 64 * KIB)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        log_object = next(p for p in (tmp_path / "store").rglob("*.log"))
        raw = bytearray(log_object.read_bytes())
        raw[100] ^= 0xFF
        log_object.write_bytes(raw)
        rsm.set_chunk_allocator(arena.allocate)
        with pytest.raises(RemoteStorageException, match="CRC-32C mismatch"):
            read_all(rsm.fetch_log_segment(md, 0))
        gc.collect()
        assert arena.free_blocks == 2
    finally:
        rsm.close()


@pytest.fixture
def short_dir() -> Path:
    d = Path(tempfile_dir()) / f"rsma-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    yield d
    for p in sorted(d.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    d.rmdir()


def _uncached_bridge(
    tmp_path: Path, sock: Path, chunk: int, batches: int, **server_options: int
) -> tuple[BridgeServer, threading.Thread, bytes, dict]:
    """A bridge serving an RSM with no chunk cache and no prefetch (every read decodes its chunk) and one
    plain tiered segment; returns (server, its thread, the segment's bytes, its encoded metadata)."""
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "bucket": "b",
            "chunk.size": str(chunk),
            "compression.enabled": "false",
            "cache.chunk.bytes": "0",
            "fetch.prefetch.chunks": "0",
        }
    )
    seg = make_segment(
        tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "arena", 0), batches=batches, value_size=3000
    )
    md = dataclasses.replace(seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data))
    server = BridgeServer(rsm, sock, shm_dir=sock.parent / "shm", **server_options)
    server.bind()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server, t, seg.data.log_segment.read_bytes(), protocol.encode_metadata(md)


def _map_arena(conn: BridgeConnection) -> mmap.mmap:
    """The bridge's chunk arena as a client maps it (read-only), from the connection's HELLO answer."""
    desc = conn.server_hello["arena"]
    return open_shared_file(Path(desc["path"]), desc["bytes"], "arena")


def test_a_block_a_client_still_reads_is_never_reused(short_dir: Path, tmp_path: Path) -> None:
    """A tiny arena (4 blocks), no chunk cache: while one client holds ARENA_DATA pieces unreleased, other
    fetches decode many chunks; the held pieces' bytes stay exactly the segment's, and come back free."""
    chunk = 64 * KIB
    server, t, data, meta = _uncached_bridge(
        tmp_path, short_dir / "a.sock", chunk, 120, arena_blocks=4, shm_slots=8
    )
    assert len(data) > 20 * chunk
    holder = BridgeConnection(short_dir / "a.sock", timeout=10, transport="shm")
    other = BridgeConnection(short_dir / "a.sock", timeout=10, transport="shm")
    try:
        arena_map = _map_arena(holder)

        def request(conn: BridgeConnection, rid: int, start: int, stop_after: int) -> list[tuple[int, int]]:
            header = {"op": "fetch_log_segment", "metadata": meta, "start_position": start,
                      "transport": "shm", "arena": True, "stop_after": stop_after}  # fmt: skip
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, header)
            pieces = []
            while True:
                f = protocol.recv_frame(conn.sock)
                if f.type == FrameType.ARENA_DATA:
                    pieces.append(protocol.ARENA_DATA_PAYLOAD.unpack(f.payload))
                elif f.type == FrameType.END:
                    return pieces
                else:
                    raise AssertionError(f"unexpected {f.type.name}: {f.header}")

        def health(conn: BridgeConnection, rid: int) -> dict:
            """Answered after every frame sent before it on the same connection (releases included)."""
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, {"op": "health"})
            return protocol.recv_frame(conn.sock).header

        start = chunk - 10  # spans two chunks: two pieces, two blocks
        held = request(holder, 1, start, 100)
        assert len(held) == 2  # not released: both blocks are pinned
        # the other client walks the whole segment through the two remaining blocks, releasing as it goes
        for i, pos in enumerate(range(0, len(data) - 1000, chunk // 2)):
            pieces = request(other, 10 + i, pos, 1000)
            assert pieces
            for offset, n in pieces:
                assert arena_map[offset : offset + n] == data[pos : pos + n]
                pos += n
            other.release_slots(len(pieces))
        assert health(other, 5000)["arena_free_blocks"] == 2  # the held two are still out
        got = b"".join(arena_map[o : o + n] for o, n in held)
        assert got == data[start : start + 100]  # the pinned blocks were not reused
        holder.release_slots(2)
        answer = health(holder, 5001)
        assert answer["arena_bytes_streamed"] >= 100 + 1000 * i
        assert answer["arena_free_blocks"] == 4
    finally:
        holder.close()
        other.close()
        server.stop()
        t.join(15)


def test_a_streaming_read_gets_a_chunk_per_frame_and_heap_chunks_split_into_slots(
    short_dir: Path, tmp_path: Path
) -> None:
    """Past the first fetch size, pieces in the arena are announced a whole chunk at a time (one frame and
    one release per chunk); a chunk the arena cannot hold (every block pinned) goes through ring slots,
    cut into slot-sized parts. Either way the reader gets exactly the segment's bytes."""
    chunk, slot = 256 * KIB, 64 * KIB
    server, t, data, meta = _uncached_bridge(
        tmp_path, short_dir / "s.sock", chunk, 200, arena_blocks=3, shm_slots=8, shm_slot_bytes=slot
    )  # 3 blocks: a ring's worth of read-ahead (two chunks) and the chunk decoded next, as the default sizes it
    assert len(data) > 8 * chunk
    reader = BridgeConnection(short_dir / "s.sock", timeout=10, transport="shm")
    holder = BridgeConnection(short_dir / "s.sock", timeout=10, transport="shm")
    try:
        arena_map = _map_arena(reader)
        ring = reader.ring
        assert ring is not None

        def stream(conn: BridgeConnection, rid: int, start: int, **extra: object) -> list[tuple[str, int]]:
            """The whole range from ``start``, each piece checked and released as it is read."""
            header = {"op": "fetch_log_segment", "metadata": meta, "start_position": start,
                      "transport": "shm", "arena": True, **extra}  # fmt: skip
            protocol.send_frame(conn.sock, FrameType.REQUEST, rid, header)
            pieces, pos = [], start
            while True:
                f = protocol.recv_frame(conn.sock)
                if f.type == FrameType.END:
                    assert pos == len(data)
                    return pieces
                if f.type == FrameType.ARENA_DATA:
                    offset, n = protocol.ARENA_DATA_PAYLOAD.unpack(f.payload)
                    got = bytes(arena_map[offset : offset + n])
                else:
                    assert f.type == FrameType.SHM_DATA, f"unexpected {f.type.name}: {f.header}"
                    index, n = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
                    got = bytes(ring.slot(index, n))
                assert got == data[pos : pos + n], f"piece at {pos} differs"
                pieces.append((f.type.name, n))
                pos += n
                conn.release_slots(1)

        pieces = stream(reader, 1, 0)
        later = [p for p in pieces[:-1] if sum(n for _, n in pieces[: pieces.index(p)]) >= 1024 * KIB]
        assert later and all(p == ("ARENA_DATA", chunk) for p in later)  # a chunk per frame past 1 MiB
        assert all(n <= slot for _, n in pieces[:4])  # the first MiB in slot-sized pieces

        # read-ahead is bounded in bytes, not pieces: with nothing released past the first MiB, a ring's
        # worth (8 slots of 64 KiB) is announced - two chunk pieces - and the bridge waits
        header = {"op": "fetch_log_segment", "metadata": meta, "start_position": 0, "transport": "shm",
                  "arena": True}  # fmt: skip
        protocol.send_frame(reader.sock, FrameType.REQUEST, 10, header)

        def piece(f: protocol.Frame) -> tuple[str, int]:
            layout = (
                protocol.ARENA_DATA_PAYLOAD if f.type == FrameType.ARENA_DATA else protocol.SHM_DATA_PAYLOAD
            )
            return f.type.name, layout.unpack(f.payload)[1]

        pos = 0
        while pos < 1024 * KIB:
            pos += piece(protocol.recv_frame(reader.sock))[1]
            reader.release_slots(1)
        ahead = []
        reader.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            while True:
                ahead.append(piece(protocol.recv_frame(reader.sock)))
        reader.sock.settimeout(10)
        assert ahead == [("ARENA_DATA", chunk)] * 2
        protocol.send_frame(reader.sock, FrameType.CANCEL, 10)
        reader.release_slots(2)
        while protocol.recv_frame(reader.sock).type != FrameType.END:
            pass
        # the release follows the CANCEL, so the bridge may read it after the END: a health answer on the
        # same connection comes after it, and both blocks are free again
        protocol.send_frame(reader.sock, FrameType.REQUEST, 11, {"op": "health"})
        assert protocol.recv_frame(reader.sock).header["arena_free_blocks"] == 3

        # pin every arena block (chunks 0 and 1, then chunk 2): every chunk the reader needs is now decoded
        # on the heap
        held = []
        for rid, start in ((2, chunk - 10), (4, 2 * chunk + 5)):
            protocol.send_frame(holder.sock, FrameType.REQUEST, rid, {"op": "fetch_log_segment", "metadata": meta,
                                "start_position": start, "transport": "shm", "arena": True, "stop_after": 100})  # fmt: skip
            while (f := protocol.recv_frame(holder.sock)).type != FrameType.END:
                held.append(f.type)
        assert held == [FrameType.ARENA_DATA] * 3  # all three blocks pinned
        pieces = stream(reader, 3, 5 * chunk + 7)
        assert {kind for kind, _ in pieces} == {"SHM_DATA"} and max(n for _, n in pieces) == slot
    finally:
        reader.close()
        holder.close()
        server.stop()
        t.join(15)


def test_the_default_arena_holds_the_cache_and_what_ten_readers_pin() -> None:
    """The chunk cache's blocks, plus for each of Kafka's ten readers its current chunk, its prefetches and
    the chunks its read-ahead spans (8 slots of 1 MiB over 4 MiB chunks: three), capped at 256 MiB."""
    mib = 1024 * KIB
    assert default_arena_blocks(64 * mib, 4 * mib, 0, 8 * mib) == 16 + 10 * 4
    assert default_arena_blocks(8 * mib, 4 * mib, 2, 8 * mib) == 2 + 10 * 6
    assert default_arena_blocks(1024 * mib, 4 * mib, 0, 8 * mib) == 64  # the cap
    assert default_arena_blocks(0, 64 * mib, 0, 8 * mib) == 4  # chunks bigger than the cap's share


@pytest.mark.parametrize(
    "chunk",
    [4 * KIB, 32 * KIB, 64 * KIB, 100 * KIB + 3, 1024 * KIB, 4096 * KIB, 64 * 1024 * KIB, 256 * 1024 * KIB],
)
def test_the_default_arena_fits_every_valid_chunk_size(chunk: int) -> None:
    """Any chunk.size the RSM accepts gets an arena the shape check accepts (chunk.size=32768 used to be
    refused, "bad chunk arena shape: 4638 blocks of 32768 bytes", and every fetched byte was copied), at
    most 256 MiB (or one block), and, with small chunks, a read-ahead share bounded by the ring's slots
    (each announced piece counts for at least one slot) rather than by its bytes."""
    from rsm.bridge.memory import ARENA_MAX_BYTES
    from rsm.bridge.shm import check_arena_shape
    from rsm.config.settings import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE

    assert MIN_CHUNK_SIZE <= chunk <= MAX_CHUNK_SIZE
    blocks = default_arena_blocks(64 * 1024 * KIB, chunk, 1, 8 * 1024 * KIB, slots=8)
    check_arena_shape(blocks, chunk)  # raises ValueError on a shape the bridge would refuse
    assert blocks >= 1 and blocks * chunk <= max(ARENA_MAX_BYTES, chunk)
    if chunk == 32 * KIB:
        assert blocks == 2048 + 10 * (1 + 1 + 8)  # the cache's; per reader: current, prefetch, one per slot


def test_the_arena_shape_check_refuses_what_a_client_cannot_map() -> None:
    from rsm.bridge.shm import MAX_ARENA_BYTES, check_arena_shape

    with pytest.raises(ValueError, match="bad chunk arena shape"):
        check_arena_shape(0, 64 * KIB)
    with pytest.raises(ValueError, match="bad chunk arena shape"):
        check_arena_shape(1, 4 * KIB - 1)  # smaller than any chunk
    with pytest.raises(ValueError, match="bad chunk arena shape"):
        check_arena_shape(MAX_ARENA_BYTES // (256 * 1024 * KIB) + 1, 256 * 1024 * KIB)  # over 2 GiB: the JVM


def test_a_bridge_with_32_kib_chunks_serves_from_its_arena(
    short_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """chunk.size=32768: the bridge creates its arena (no "bad chunk arena shape" warning) and fetched
    chunks are announced where they lie (ARENA_DATA), not copied into ring slots."""
    chunk = 32 * KIB
    with caplog.at_level("WARNING"):
        server, t, data, meta = _uncached_bridge(tmp_path, short_dir / "c.sock", chunk, 150)
    reader = BridgeConnection(short_dir / "c.sock", timeout=10, transport="shm")
    try:
        assert "chunk arena" not in caplog.text
        assert server.arena is not None and server.arena.block_bytes == chunk
        arena_map = _map_arena(reader)
        assert len(data) > 2 * 1024 * KIB
        header = {"op": "fetch_log_segment", "metadata": meta, "start_position": 0, "transport": "shm",
                  "arena": True}  # fmt: skip
        protocol.send_frame(reader.sock, FrameType.REQUEST, 1, header)
        kinds, got = set(), bytearray()
        while (f := protocol.recv_frame(reader.sock)).type != FrameType.END:
            kinds.add(f.type)
            if f.type == FrameType.ARENA_DATA:
                offset, n = protocol.ARENA_DATA_PAYLOAD.unpack(f.payload)
                got += arena_map[offset : offset + n]
            else:
                index, n = protocol.SHM_DATA_PAYLOAD.unpack(f.payload)
                got += reader.ring.slot(index, n)
            reader.release_slots(1)
        assert bytes(got) == data
        assert FrameType.ARENA_DATA in kinds  # past the first MiB (copied into a slot: 32 views > 8 slots)
    finally:
        reader.close()
        server.stop()
        t.join(15)
