"""segment_format.buffers: the native GIL-free copy and file read against their pure-Python references."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_format.buffers import copy_into, copy_into_reference, pread_into, pread_into_reference
from segment_format.crc import crc32c

pieces = st.lists(st.binary(max_size=300), max_size=8)


@settings(max_examples=300, deadline=None)
@given(sources=pieces, slack=st.integers(0, 50), fill=st.integers(0, 255), as_views=st.booleans())
def test_copy_into_matches_reference(sources: list[bytes], slack: int, fill: int, as_views: bool) -> None:
    total = sum(map(len, sources))
    srcs = [memoryview(bytearray(s))[0:] for s in sources] if as_views else sources
    native, reference = bytearray([fill]) * (total + slack), bytearray([fill]) * (total + slack)
    assert copy_into(native, srcs) == copy_into_reference(reference, srcs) == total
    assert native == reference
    assert native[:total] == b"".join(sources)
    assert native[total:] == bytes([fill]) * slack  # nothing written past the sources


@pytest.mark.parametrize("copy", [copy_into, copy_into_reference])
def test_copy_into_refuses_what_does_not_fit_and_writes_nothing(copy) -> None:
    target = bytearray(b"\xee" * 5)
    with pytest.raises(ValueError, match="6 bytes of sources do not fit in a target of 5 bytes"):
        copy(target, [b"abc", b"def"])
    assert target == b"\xee" * 5


def test_copy_into_writes_into_a_slice_of_a_larger_buffer() -> None:
    big = bytearray(16)
    assert copy_into(memoryview(big)[4:12], [b"abcd", memoryview(b"xxefgh")[2:]]) == 8
    assert big == bytes(4) + b"abcdefgh" + bytes(4)


def test_copy_into_refuses_a_read_only_target() -> None:
    with pytest.raises(BufferError):
        copy_into(b"immutable", [b"x"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, 700_000), (1, 262_144), (262_143, 262_146), (699_990, 10), (699_990, 100), (700_000, 5), (0, 0)],
)
@pytest.mark.parametrize("checksum", [True, False])
def test_pread_into_matches_the_reference(tmp_path: Path, offset: int, length: int, checksum: bool) -> None:
    """Reads across the native loop's 256 KiB blocks, short reads at the end of the file, empty ones."""
    data = random.Random(offset + length).randbytes(700_000)
    path = tmp_path / "object"
    path.write_bytes(data)
    native, reference = bytearray(b"\xee" * length), bytearray(b"\xee" * length)
    got = pread_into(path, offset, native, checksum=checksum)
    assert got == pread_into_reference(path, offset, reference, checksum=checksum)
    assert native == reference
    n = got[0]
    assert n == max(0, min(length, len(data) - offset))
    assert native[:n] == data[offset : offset + n]
    assert got[1] == (crc32c(data[offset : offset + n]) if checksum else None)


@pytest.mark.parametrize("read", [pread_into, pread_into_reference])
def test_pread_into_names_a_missing_file_and_refuses_bad_arguments(tmp_path: Path, read) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read(tmp_path / "missing", 0, bytearray(4))
    assert info.value.filename == str(tmp_path / "missing") or str(tmp_path / "missing") in str(info.value)
    with pytest.raises(IsADirectoryError):
        read(tmp_path, 0, bytearray(4))
    (tmp_path / "f").write_bytes(b"abc")
    with pytest.raises(ValueError, match="negative offset"):
        read(tmp_path / "f", -1, bytearray(4))
    with pytest.raises(BufferError):
        read(tmp_path / "f", 0, memoryview(b"read-only target"))
