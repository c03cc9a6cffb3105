"""Record compression codecs, framed exactly as the Java client frames them, on top of cramjam.

cramjam gives the raw algorithms; the framing Kafka uses differs from cramjam's defaults, so it is done
here by hand:

* gzip: a plain gzip member, header as ``java.util.zip.GZIPOutputStream`` (Java 16+) writes it (mtime 0,
  OS 255), deflated by zlib (stdlib) at level 6: byte-identical to the Java client. Any gzip stream (any
  OS byte, several members) is read.
* snappy: xerial ``SnappyOutputStream`` framing (16-byte header, then int32 length + raw snappy block per
  32 KiB of input). Raw snappy without the header (librdkafka) is accepted on read.
* lz4: an LZ4 frame as ``KafkaLZ4BlockOutputStream`` writes it (FLG 0x60, BD 0x40, 64 KiB independent
  blocks, no checksums, 4-byte end mark). For magic 0 Kafka computed the header checksum over the magic
  number too (KAFKA-3160): written that way for magic 0 and not checked when reading magic 0.
* zstd: a streamed zstd frame at level 3, byte-identical to zstd-jni's ``ZstdOutputStream``; read
  through python-zstandard (one reusable context per thread: see ``_zstd_decompress``).

lz4 output is byte-identical to Kafka's too (lz4 HC level 9 both sides); snappy is not (snappy-java and
cramjam's Rust snappy choose different matches) but its framing is the same.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import cramjam
import zstandard

from .errors import CorruptRecordError

__all__ = ["CompressionType", "compress", "decompress", "xxh32"]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
LZ4_MAGIC = 0x184D2204
LZ4_FLG = 0x60  # version 01, independent blocks, no block checksum, no content size / checksum
LZ4_BD = 0x40  # 64 KiB maximum block size
LZ4_BLOCK_SIZE = 64 * 1024
LZ4_LEVEL = 9  # Kafka's default compression.lz4.level (lz4-java high compressor)
GZIP_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION
ZSTD_LEVEL = 3
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # Java 16+ GZIPOutputStream: mtime 0, OS 255
# Snappy cannot expand data more than ~21x (a 3-byte copy of 64 bytes); claimed sizes beyond this bound
# are corrupt, and refusing them keeps a bogus length from allocating its size.
SNAPPY_MAX_RATIO = 32
# Kafka holds a batch's decompressed records in one Java array, so they cannot exceed 2 GiB; a stream
# claiming or producing more is refused before it is materialised (decompression bombs).
MAX_DECOMPRESSED_SIZE = 0x7FFFFFFF


class CompressionType(enum.IntEnum):
    """Codec id in the low 3 bits of a batch's attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka uses in configs and in kafka-dump-log (``none``, ``gzip`` ...)."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Parse ``none``/``gzip``/``snappy``/``lz4``/``zstd`` (case-insensitive)."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


# ---------------------------------------------------------------------------------------------- xxh32
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (used only for the few bytes of an LZ4 frame descriptor, so pure Python)."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# ------------------------------------------------------------------------------------------ compress
def _gzip_compress(data: bytes) -> bytes:
    # The stdlib's zlib is the same deflate implementation java.util.zip uses, so with Java's level and
    # window the bytes are identical to the Java client's (cramjam's deflate produces different bytes).
    deflater = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    deflated = deflater.compress(data) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & _M32, len(data) & _M32)
    return GZIP_HEADER + deflated + trailer


def _snappy_compress(data: bytes) -> bytes:
    out = [XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _lz4_header(magic: int) -> bytes:
    descriptor = bytes((LZ4_FLG, LZ4_BD))
    if magic == 0:  # KAFKA-3160: Java hashed the magic number too
        hc = (xxh32(struct.pack("<I", LZ4_MAGIC) + descriptor) >> 8) & 0xFF
    else:
        hc = (xxh32(descriptor) >> 8) & 0xFF
    return struct.pack("<I", LZ4_MAGIC) + descriptor + bytes((hc,))


def _lz4_compress(data: bytes, magic: int) -> bytes:
    out = [_lz4_header(magic)]
    view = memoryview(data)
    for start in range(0, len(data), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        block = bytes(
            cramjam.lz4.compress_block(
                chunk, mode="high_compression", compression=LZ4_LEVEL, store_size=False
            )
        )
        if len(block) >= len(chunk):  # incompressible: stored raw, flagged by the size's high bit
            out.append(struct.pack("<I", len(chunk) | 0x80000000))
            out.append(bytes(chunk))
        else:
            out.append(struct.pack("<I", len(block)))
            out.append(block)
    out.append(b"\x00\x00\x00\x00")
    return b"".join(out)


def compress(codec: CompressionType | int, data: bytes, *, magic: int = 2) -> bytes:
    """Compress a batch's records (or a legacy wrapper's inner message set) as the Java client does."""
    codec = CompressionType(codec)
    data = bytes(data)
    if codec is CompressionType.NONE:
        return data
    if codec is CompressionType.GZIP:
        return _gzip_compress(data)
    if codec is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec is CompressionType.LZ4:
        return _lz4_compress(data, magic)
    if codec is CompressionType.ZSTD:
        if magic < 2:
            raise ValueError("zstd needs magic 2")
        # zstd-jni's ZstdOutputStream: streamed frame (no content size), data flushed, then an empty
        # last block on close; the same calls on cramjam's streaming compressor give the same bytes.
        compressor = cramjam.zstd.Compressor(level=ZSTD_LEVEL)
        compressor.compress(data)
        return bytes(compressor.flush()) + bytes(compressor.finish())
    raise ValueError(f"unknown codec {codec}")  # pragma: no cover - IntEnum above is closed


# ---------------------------------------------------------------------------------------- decompress
def _corrupt(codec: str, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"invalid {codec} data: {what}", position=0)


def _snappy_raw(data: bytes | memoryview) -> bytes:
    try:
        claimed = cramjam.snappy.decompress_raw_len(data)
    except Exception as exc:
        raise _corrupt("snappy", str(exc) or type(exc).__name__) from None
    if claimed > SNAPPY_MAX_RATIO * len(data) + 64 or claimed > MAX_DECOMPRESSED_SIZE:
        raise _corrupt("snappy", f"claims {claimed} bytes from {len(data)} compressed")
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as exc:
        raise _corrupt("snappy", str(exc) or type(exc).__name__) from None


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    if bytes(data[:8]) != XERIAL_MAGIC:
        return _snappy_raw(data)
    if len(data) < 16:
        raise _corrupt("snappy", "truncated xerial header")
    out = []
    pos = 16
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise _corrupt("snappy", f"truncated xerial chunk length at {pos}")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise _corrupt("snappy", f"xerial chunk of {length} bytes at {pos - 4} overruns the data")
        out.append(_snappy_raw(data[pos : pos + length]))
        pos += length
    return b"".join(out)


_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def _lz4_decompress(data: bytes | memoryview, magic: int) -> bytes:
    end = len(data)
    if end < 7:
        raise _corrupt("lz4", "truncated frame header")
    (frame_magic,) = struct.unpack_from("<I", data, 0)
    if frame_magic != LZ4_MAGIC:
        raise _corrupt("lz4", f"bad frame magic 0x{frame_magic:08x}")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise _corrupt("lz4", f"unsupported frame version {flg >> 6}")
    if flg & 0x01:
        raise _corrupt("lz4", "dictionary id not supported")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
    if block_max is None or bd & 0x8F:
        raise _corrupt("lz4", f"bad block descriptor 0x{bd:02x}")
    pos = 6
    if flg & 0x08:  # content size
        pos += 8
    if pos >= end:
        raise _corrupt("lz4", "truncated frame header")
    descriptor_end = pos
    hc = data[pos]
    pos += 1
    if magic != 0:  # magic 0 frames carry Kafka's old wrong checksum; Kafka ignores it there
        expected = (xxh32(bytes(data[4:descriptor_end])) >> 8) & 0xFF
        if hc != expected:
            raise _corrupt("lz4", f"frame header checksum 0x{hc:02x} != 0x{expected:02x}")
    block_checksum = bool(flg & 0x10)
    out = []
    scratch = bytearray(block_max)
    while True:
        if pos + 4 > end:
            raise _corrupt("lz4", f"truncated block size at {pos}")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            break
        stored = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if size > block_max or pos + size > end:
            raise _corrupt("lz4", f"block of {size} bytes at {pos - 4} is impossible")
        block = data[pos : pos + size]
        pos += size
        if stored:
            out.append(bytes(block))
        else:
            try:
                n = cramjam.lz4.decompress_block_into(block, scratch)
                out.append(bytes(scratch[:n]))
            except Exception as exc:
                raise _corrupt("lz4", f"bad block at {pos - size - 4}: {exc}") from None
        if block_checksum:
            pos += 4
    # an optional content checksum (4 bytes) may follow; Kafka's writer never sets it
    return b"".join(out)


def _gzip_decompress(data: bytes | memoryview) -> bytes:
    # zlib with wbits 16+MAX_WBITS reads gzip members; decompressing with a bounded step keeps memory in
    # proportion to real output, and trailing members (concatenated gzip) are read too.
    out = []
    buf = bytes(data)
    while buf:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        budget = MAX_DECOMPRESSED_SIZE - sum(len(o) for o in out)
        try:
            out.append(d.decompress(buf, budget + 1))
        except zlib.error as exc:
            raise _corrupt("gzip", str(exc)) from None
        if len(out[-1]) > budget:
            raise _corrupt("gzip", f"decompresses to more than {MAX_DECOMPRESSED_SIZE} bytes")
        if not d.eof:
            raise _corrupt("gzip", "truncated stream")
        buf = d.unused_data
        if buf[:2] != b"\x1f\x8b":  # like GZIPInputStream: bytes after a member that are not a member end it
            break
    return b"".join(out)


def _zstd_frame_content_size(data: bytes | memoryview) -> int | None:
    """Content size a zstd frame header declares (None when absent or unreadable)."""
    if len(data) < 6 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    fhd = data[4]
    fcs_flag, single_segment, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or pos + size > len(data):
        return None
    value = int.from_bytes(bytes(data[pos : pos + size]), "little")
    return value + 256 if size == 2 else value


_zstd_local = threading.local()


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """Every frame of `data` decompressed, as zstd-jni's ZstdInputStream reads a section: frame after
    frame, anything else (a truncated frame, bytes that are not a frame) refused.

    Through python-zstandard with one decompression context per thread, not cramjam's one-shot call,
    which sets a context up for every section: a Kafka batch's section is one small frame (~40 KB of
    zstd), so that set-up was ~15% of decompressing it (measured on the Spark benchmark's batches: 52 vs
    45 us per section), and zstd is most of what a scan of zstd topics spends."""
    claimed = _zstd_frame_content_size(data)
    if claimed is not None and claimed > MAX_DECOMPRESSED_SIZE:
        raise _corrupt("zstd", f"frame claims {claimed} bytes")
    context = getattr(_zstd_local, "context", None)
    if context is None:
        context = _zstd_local.context = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    rest: bytes | memoryview = data
    try:
        while True:
            frame = context.decompressobj()
            out.append(frame.decompress(rest))
            if not frame.eof:
                raise _corrupt("zstd", "incomplete frame")
            rest = frame.unused_data
            if not rest:
                break
    except zstandard.ZstdError as exc:
        raise _corrupt("zstd", str(exc) or type(exc).__name__) from None
    return out[0] if len(out) == 1 else b"".join(out)


def decompress(codec: CompressionType | int, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """Decompress a batch's records (or a legacy wrapper's value); errors are CorruptRecordError.

    Positions in the errors are relative to ``data``; callers shift them to file positions.
    """
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec id {codec}", position=0) from None
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return _gzip_decompress(data)
    if codec is CompressionType.SNAPPY:
        return _snappy_decompress(data)
    if codec is CompressionType.LZ4:
        return _lz4_decompress(data, magic)
    return _zstd_decompress(data)
