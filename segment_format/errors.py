"""Exceptions of :mod:`segment_format`.

Every problem found while parsing corrupt input is a :class:`CorruptRecordError` naming the file (when
known), the byte position and what is wrong, so an operator can find the bad bytes with a hex viewer.
"""

from __future__ import annotations


class SegmentFormatError(Exception):
    """Base class of every error raised by :mod:`segment_format`."""


class CorruptRecordError(SegmentFormatError):
    """Input bytes are not what Kafka writes (bad CRC, truncated batch, impossible length, ...).

    ``position`` is the absolute byte position in ``file`` (or in the buffer parsed) where the problem
    was found, usually the start of the offending batch or field.
    """

    def __init__(self, reason: str, *, file: str | None = None, position: int | None = None) -> None:
        self.reason = reason
        self.file = file
        self.position = position
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.file if self.file is not None else "<bytes>"
        pos = "?" if self.position is None else str(self.position)
        return f"{where}: byte {pos}: {self.reason}"

    def __str__(self) -> str:
        return self._render()

    def with_location(self, *, file: str | None = None, position_offset: int = 0) -> CorruptRecordError:
        """A copy with the file filled in and the position shifted (errors found in a sub-buffer)."""
        pos = None if self.position is None else self.position + position_offset
        return CorruptRecordError(self.reason, file=file if file is not None else self.file, position=pos)


class UnsupportedFormatError(SegmentFormatError):
    """Valid input this package does not handle (for example an unknown file suffix)."""
