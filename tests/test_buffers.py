"""segment_format.buffers: the native GIL-free copy against its pure-Python reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segment_format.buffers import copy_into, copy_into_reference

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
