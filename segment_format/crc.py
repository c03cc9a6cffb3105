"""Checksums used by Kafka: CRC-32C (record batches v2, producer snapshots) and CRC-32 (magic 0/1)."""

from __future__ import annotations

import zlib

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``; as Kafka's ``Crc32C``."""
    return _crc32c.crc32c(data, value)


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32 (IEEE, as java.util.zip.CRC32) of ``data``, continuing from ``value``."""
    return zlib.crc32(data, value) & 0xFFFFFFFF
