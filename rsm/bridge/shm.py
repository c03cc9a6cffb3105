"""Shared-memory rings for fetch answers: the bridge writes decoded bytes once, the client copies once.

Why: through the socket every fetched byte is copied into the kernel, out of it, and into Kafka's array,
with system calls for each piece; on a small machine where the broker and the bridge compete for CPU
that was half the cost of a fetch.  With a ring the bridge copies the decoded chunk into a slot of a
file both sides map, and only a 17-byte SHM_DATA frame (slot, length) crosses the socket; the client
copies from its mapping into the caller's array and returns the slot with an SHM_RELEASE frame.

Safety: ring files live in a private directory (owner-only ``0700``, files ``0600``, created with
``O_EXCL | O_NOFOLLOW``) on tmpfs (``/dev/shm``) when there is one, so decoded data never reaches a disk;
each file is unlinked as soon as the client has mapped it (its first frame after the handshake), and on
connection close at the latest.  Files of bridges that died are removed when a bridge starts.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import mmap
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from segment_format._native import ArenaBlock, buffer_address

from rsm.processes import pid_alive

log = logging.getLogger(__name__)

DEFAULT_SLOTS = 8
DEFAULT_SLOT_BYTES = 1024 * 1024
MIN_SLOT_BYTES = 64 * 1024
MAX_SLOT_BYTES = 16 * 1024 * 1024
# an arena block holds one decoded chunk: as small as the smallest chunk.size (rsm.config.MIN_CHUNK_SIZE)
MIN_BLOCK_BYTES = 4 * 1024
# the JVM plugin maps the arena as one buffer, at most Integer.MAX_VALUE bytes
MAX_ARENA_BYTES = 2**31 - 1
_RING_NAME = re.compile(r"^(?:ring|arena)-(\d+)-[0-9a-f]{16}$")


def default_shm_dir() -> Path:
    """A private directory on tmpfs (``/dev/shm/rsm-bridge-<uid>``), else under the temp directory."""
    base = Path("/dev/shm")
    if not base.is_dir():
        import tempfile

        base = Path(tempfile.gettempdir())
    return base / f"rsm-bridge-{os.getuid()}"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` owner-only (0700) if missing; refuse one that is not ours or is open to others.

    Why: whoever can replace or read files in the directory could read fetched segment data.
    """
    path = Path(path)
    old = os.umask(0o077)
    try:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700, parents=False)
    except OSError as exc:
        raise ValueError(f"cannot create the shared-memory directory {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"shared-memory directory {path} is not a directory (or is a symlink)")
    if st.st_uid != os.getuid():
        raise ValueError(
            f"shared-memory directory {path} belongs to uid {st.st_uid}, not to us ({os.getuid()})"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ValueError(
            f"shared-memory directory {path} is open to group/others (mode {stat.S_IMODE(st.st_mode):o})"
        )
    return path


def remove_stale_rings(directory: Path) -> int:
    """Remove ring files left by bridges that are gone (their pid is in the name); returns the count."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = _RING_NAME.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            (Path(directory) / name).unlink()
            removed += 1
    if removed:
        log.info("removed %d stale shared-memory ring(s) from %s", removed, directory)
    return removed


def create_shared_file(
    directory: Path, kind: str, size: int, *, reserve: bool = True
) -> tuple[Path, mmap.mmap, int]:
    """A new file ``<kind>-<pid>-<random>`` (mode 0600, exclusive create) of ``size`` bytes, mapped
    read-write; returns its path, the mapping and its open descriptor (the caller closes it).

    ``reserve``: its pages are reserved now (``reserve_pages``); else the file is sparse and costs nothing
    until reserved, which must happen before anything is written to it.
    """
    path = Path(directory) / f"{kind}-{os.getpid()}-{secrets.token_hex(8)}"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.ftruncate(fd, size)
        if reserve:
            reserve_pages(fd, size)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return path, mm, fd


def reserve_pages(fd: int, size: int) -> None:
    """Reserve the pages of the file's first ``size`` bytes (OSError, e.g. ENOSPC, when they cannot be).

    Why: on a full tmpfs (a small /dev/shm in a container) writing to a sparse mapping kills the bridge
    with SIGBUS; reserving fails cleanly instead, and the bridge goes without the file.
    """
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)


def open_shared_file(path: Path, size: int, what: str) -> mmap.mmap:
    """A client's read-only mapping of a bridge's file, checked to be an owner-only file of ``size`` bytes."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077 or st.st_size < size:
            raise ValueError(f"shared-memory {what} {path} is not an owner-only file of {size} bytes")
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


class ChunkArena:
    """Fixed-size blocks of one shared file that decoded chunks live in, so a client reads them in place.

    Why: through a ring every fetched byte is copied by the bridge into a slot and again by the broker out
    of it; for plain segments that copy was a fifth of the bridge's work. The bridge hands the arena to the
    RSM as its chunk allocator: a chunk decoded into a block is cached as the block itself, and a fetch
    announces its bytes by arena offset (``ARENA_DATA``) with no copy. A block goes back to the free list
    when its last reference goes (evicted from the cache, no stream reading it, every piece of it released
    by the client), so a block a client may still read is never reused.
    """

    def __init__(self, path: Path | None, mm: mmap.mmap, block_bytes: int) -> None:
        self.path = path
        self.mm = mm
        self.block_bytes = block_bytes
        self.size = len(mm)
        self.blocks = self.size // block_bytes
        self.base = buffer_address(mm)
        self.unlinked = False
        # deque append/popleft are atomic: blocks are freed from any thread (by the last reference's owner)
        self._free: collections.deque[int] = collections.deque(
            range(0, self.blocks * block_bytes, block_bytes)
        )

    @classmethod
    def create(cls, directory: Path, blocks: int, block_bytes: int) -> ChunkArena:
        """An arena file ``arena-<pid>-<random>`` of ``blocks`` blocks (it stays named: clients map it)."""
        check_arena_shape(blocks, block_bytes)
        path, mm, fd = create_shared_file(directory, "arena", blocks * block_bytes)
        os.close(fd)  # the mapping keeps the memory
        return cls(path, mm, block_bytes)

    @classmethod
    def anonymous(cls, blocks: int, block_bytes: int) -> ChunkArena:
        """The same allocator over private memory (no file): for an in-process RSM, e.g. as a baseline."""
        return cls(None, mmap.mmap(-1, blocks * block_bytes), block_bytes)

    def allocate(self, size: int) -> ArenaBlock | None:
        """A block for ``size`` bytes, or None (too large for a block, or none free: decode on the heap)."""
        if size > self.block_bytes:
            return None
        try:
            offset = self._free.popleft()
        except IndexError:
            return None
        return ArenaBlock(self.mm, offset, size, self._free.append)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def locate(self, view: memoryview) -> int | None:
        """Offset of ``view``'s bytes in the arena, or None when they are not in it."""
        offset = buffer_address(view) - self.base
        return offset if offset >= 0 and offset + len(view) <= self.size else None

    def describe(self) -> dict[str, object]:
        """What the server's HELLO tells a client (which maps the file read-only)."""
        return {"path": str(self.path), "bytes": self.size}

    def unlink(self) -> None:
        """Remove the file's name (at shutdown); mappings, and blocks still referenced, stay valid."""
        if not self.unlinked and self.path is not None:
            self.unlinked = True
            self.path.unlink(missing_ok=True)


def check_arena_shape(blocks: int, block_bytes: int) -> None:
    """ValueError unless an arena of ``blocks`` blocks of ``block_bytes`` can exist: at least one block, a
    block at least as large as the smallest chunk (blocks are sized by chunk.size; a ring slot's minimum
    has nothing to do with them), and no more bytes than a client can map."""
    if blocks < 1 or block_bytes < MIN_BLOCK_BYTES or blocks * block_bytes > MAX_ARENA_BYTES:
        raise ValueError(
            f"bad chunk arena shape: {blocks} blocks of {block_bytes} bytes (blocks of at least"
            f" {MIN_BLOCK_BYTES} bytes, at most {MAX_ARENA_BYTES} bytes in all)"
        )


@dataclass(eq=False)
class ShmRing:
    """One connection's ring of ``slots`` slots of ``slot_bytes`` each, written by the bridge.

    Flow control: slots are used in order (``next_slot``); the bridge counts the pieces it announced and the
    client has not released (slots and arena pieces alike, its connection's ``pieces``) and never has more
    than ``slots`` of them, so the slot it writes next is always free.

    Memory: the file is sparse until a fetch uses the ring (``reserve``), and a connection that stays idle
    gives the pages of its free slots back (``give_back``), so a connection that only offered "shm" costs
    nothing and one that fetched once does not keep 8 MiB until it closes.
    """

    path: Path
    slots: int
    slot_bytes: int
    mm: mmap.mmap
    fd: int  # kept open: the pages are reserved through it, after the name is gone
    next_slot: int = 0
    unlinked: bool = False
    reserved: bool = False  # every page reserved; False: sparse (new, or given back), reserve before writing
    view: memoryview = field(init=False)

    def __post_init__(self) -> None:
        self.view = memoryview(self.mm)

    @classmethod
    def create(
        cls, directory: Path, slots: int = DEFAULT_SLOTS, slot_bytes: int = DEFAULT_SLOT_BYTES
    ) -> ShmRing:
        """A new ring file ``ring-<pid>-<random>`` (mode 0600, exclusive create) mapped read-write."""
        if not 1 <= slots <= 64:
            raise ValueError(f"bridge.shm.slots={slots} outside [1, 64]")
        if not MIN_SLOT_BYTES <= slot_bytes <= MAX_SLOT_BYTES:
            raise ValueError(
                f"bridge.shm.slot.bytes={slot_bytes} outside [{MIN_SLOT_BYTES}, {MAX_SLOT_BYTES}]"
            )
        path, mm, fd = create_shared_file(directory, "ring", slots * slot_bytes, reserve=False)
        return cls(path, slots, slot_bytes, mm, fd)  # the file name goes once the client mapped it

    def describe(self) -> dict[str, object]:
        """What the server's HELLO tells the client about this ring."""
        return {"path": str(self.path), "slots": self.slots, "slot_bytes": self.slot_bytes}

    def unlink(self) -> None:
        if not self.unlinked:
            self.unlinked = True
            self.path.unlink(missing_ok=True)

    def reserve(self) -> bool:
        """Reserve the ring's pages before a fetch writes to it; False when they cannot be (a full tmpfs:
        that fetch is answered with DATA frames instead, and a later one tries again)."""
        if not self.reserved:
            try:
                reserve_pages(self.fd, self.slots * self.slot_bytes)
            except OSError:
                return False
            self.reserved = True
        return True

    def give_back(self, held: int) -> int:
        """Return the pages of every slot but the ``held`` the client still holds (the last ones written:
        slots are used in order) to the system; returns the bytes given back. The next fetch reserves the
        ring again. Where the system cannot (no ``MADV_REMOVE``), the ring stays as it is."""
        free = [(self.next_slot + k) % self.slots for k in range(self.slots - held)]
        given = 0
        for slot in free:
            start = -(-slot * self.slot_bytes // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the slot
            end = (slot + 1) * self.slot_bytes // mmap.PAGESIZE * mmap.PAGESIZE
            if end <= start:
                continue
            try:
                self.mm.madvise(mmap.MADV_REMOVE, start, end - start)
            except (AttributeError, OSError):
                return given
            given += end - start
        self.reserved = False
        return given

    def close(self) -> None:
        self.unlink()
        self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def slot_view(self, slot: int) -> memoryview:
        base = slot * self.slot_bytes
        return self.view[base : base + self.slot_bytes]


class ClientRing:
    """The client's read-only mapping of the bridge's ring (opened by the path the HELLO named)."""

    def __init__(self, path: Path, slots: int, slot_bytes: int) -> None:
        self.mm = open_shared_file(path, slots * slot_bytes, "ring")
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.view = memoryview(self.mm)

    def slot(self, slot: int, length: int) -> memoryview:
        if not 0 <= slot < self.slots or not 0 <= length <= self.slot_bytes:
            raise ValueError(f"SHM_DATA slot {slot} length {length} outside the ring")
        base = slot * self.slot_bytes
        return self.view[base : base + length]

    def close(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()
