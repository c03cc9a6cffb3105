"""The ``leader-epoch-checkpoint`` file: which leader epoch started at which offset.

Text: a version line (``0``), an entry count line, then one ``epoch startOffset`` line per entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from .entry_file import EntryFile
from .errors import CorruptRecordError

__all__ = ["EpochEntry", "LeaderEpochCheckpoint"]

VERSION = 0


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset written under it."""

    epoch: int
    start_offset: int


class LeaderEpochCheckpoint(EntryFile[EpochEntry]):
    """Entries of a leader-epoch checkpoint, epochs and start offsets increasing."""

    @classmethod
    def from_bytes(cls, data: bytes, *, file: str | None = None) -> LeaderEpochCheckpoint:
        """Parse the checkpoint text; errors name the byte where the bad line starts."""
        lines: list[tuple[int, str]] = []
        pos = 0
        for raw in data.split(b"\n"):
            lines.append((pos, raw.decode("utf-8", errors="replace").strip()))
            pos += len(raw) + 1
        if lines and lines[-1][1] == "":
            lines.pop()

        def bad(i: int, what: str) -> CorruptRecordError:
            where = lines[i][0] if i < len(lines) else len(data)
            return CorruptRecordError(what, file=file, position=where)

        if len(lines) < 2:
            raise bad(len(lines), "checkpoint needs a version line and a count line")
        if lines[0][1] != str(VERSION):
            raise bad(0, f"unrecognised checkpoint version {lines[0][1]!r}")
        try:
            count = int(lines[1][1])
        except ValueError:
            raise bad(1, f"malformed entry count {lines[1][1]!r}") from None
        if count < 0 or count != len(lines) - 2:
            raise bad(1, f"entry count {count} but {len(lines) - 2} entry lines")
        entries = []
        for i in range(2, len(lines)):
            parts = lines[i][1].split()
            try:
                epoch, start = (int(p) for p in parts)
            except ValueError:
                raise bad(i, f"malformed checkpoint entry {lines[i][1]!r}") from None
            entries.append(EpochEntry(epoch, start))
        return cls(entries)

    def to_bytes(self) -> bytes:
        lines = [str(VERSION), str(len(self.entries))] + [f"{e.epoch} {e.start_offset}" for e in self.entries]
        return ("\n".join(lines) + "\n").encode()

    def epoch_for_offset(self, offset: int) -> int | None:
        """Leader epoch in force at ``offset`` (largest entry whose start offset is <= it)."""
        found = None
        for e in self.entries:
            if e.start_offset <= offset:
                found = e.epoch
            else:
                break
        return found

    def lookup(self, offset: int) -> EpochEntry | None:
        """Largest entry at or below ``offset`` (by start offset)."""
        found = None
        for e in self.entries:
            if e.start_offset <= offset:
                found = e
            else:
                break
        return found
