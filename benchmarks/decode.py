"""Columnar decode speed: the C kernel against the pure-Python reference and against decompression alone.

    python benchmarks/decode.py [--records 200000] [--check] [--json out.json]

One process pinned to one core. For 100-byte and 1 KiB values, uncompressed and each codec (gzip,
snappy, lz4, zstd), it builds a segment of magic-2 batches the way a Java producer fills them
(batch.size 16 KiB for 90% of batches, some 64 KiB, 256 KiB and 1 MiB ones; JSON-like values with random numbers,
so they compress like real payloads) and measures, best of several runs:

- columnar: ``segment_format.columnar.decode_batches`` of the whole segment (CRC-32C checked), to a
  ``pyarrow.RecordBatch``;
- reference: ``segment_format.columnar.decode_reference`` (one Python loop per record) on a prefix;
- decompression alone: ``segment_format.codecs.decompress`` of every batch's records section, which is
  the least any decoder of these bytes must spend.

records/s and MB/s (segment bytes on disk per second) for each, then the targets: columnar decode
of uncompressed 100-byte records >= 3 M records/s and >= 20x the reference; for compressed batches
columnar time <= 2x decompression alone. Prints a PASS/FAIL line per target; exits 0 unless ``--check``
is given and a target failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    Target,
    best_time,
    best_times,
    console,
    pin_to_one_cpu,
    print_table,
    report_targets,
)

# One core for the whole process, before pyarrow/numpy start any helper thread (they inherit it), and
# no BLAS thread pool at all.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
CPU = pin_to_one_cpu()

import crc32c  # noqa: E402

from segment_format.codecs import CompressionType, compress, decompress  # noqa: E402
from segment_format.columnar import decode_batches, decode_reference  # noqa: E402
from segment_format.writer import build_batch  # noqa: E402

VALUE_SIZES = (100, 1024)
CODECS = tuple(CompressionType)
# A Java producer closes a batch at batch.size (16 KiB by default); some applications raise it. Drawn
# per batch with these weights: 90% of batches are 16 KiB (about 45% of the bytes), 1% are 1 MiB.
BATCH_SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
BATCH_WEIGHTS = (90, 7, 2, 1)
MB = 1e6


def _value_pool(rng: random.Random, size: int, count: int = 4096) -> list[bytes]:
    """JSON-ish values with random numbers and a small vocabulary: compressible like real payloads."""
    skus = [f"sku-{rng.randrange(10**6):06d}" for _ in range(500)]
    pool = []
    for _ in range(count):
        parts = []
        while sum(map(len, parts)) < size:
            parts.append(
                f'{{"order":{rng.randrange(10**9)},"item":"{rng.choice(skus)}",'
                f'"qty":{rng.randrange(1, 99)},"price":{rng.randrange(100, 99999) / 100}}}'
            )
        pool.append(",".join(parts).encode()[:size])
    return pool


def build_segment(records: int, value_size: int, seed: int = 7) -> list[bytes]:
    """Uncompressed magic-2 batches (one bytes object each) holding ``records`` records."""
    rng = random.Random(seed)
    pool = _value_pool(rng, value_size)
    batches = []
    offset = 0
    ts = 1_700_000_000_000
    approx = value_size + 20
    while offset < records:
        (batch_size,) = rng.choices(BATCH_SIZES, BATCH_WEIGHTS)
        per_batch = max(1, batch_size // approx)
        per_batch = min(per_batch, records - offset)
        recs = [
            (b"user-%06d" % rng.randrange(10**6), rng.choice(pool), (), ts + offset + i)
            for i in range(per_batch)
        ]
        batches.append(
            build_batch(recs, base_offset=offset, producer_id=1000, producer_epoch=0, base_sequence=offset)
        )
        offset += per_batch
    return batches


def recompress(batch: bytes, codec: CompressionType) -> bytes:
    """The same batch with its records section compressed by ``codec`` (header fixed, CRC recomputed)."""
    if codec is CompressionType.NONE:
        return batch
    payload = compress(codec, batch[61:], magic=2)
    (attributes,) = struct.unpack_from(">h", batch, 21)
    after_crc = bytearray(batch[21:61] + payload)
    struct.pack_into(">h", after_crc, 0, (attributes & ~0x07) | int(codec))
    head = bytearray(batch[:21])
    struct.pack_into(">i", head, 8, len(after_crc) + 9)
    struct.pack_into(">I", head, 17, crc32c.crc32c(after_crc))
    return bytes(head + after_crc)


@dataclass
class Row:
    value_size: int
    codec: str
    records: int
    segment_bytes: int
    columnar_s: float
    reference_records_per_s: float
    decompress_s: float | None

    @property
    def columnar_records_per_s(self) -> float:
        return self.records / self.columnar_s

    @property
    def vs_reference(self) -> float:
        return self.columnar_records_per_s / self.reference_records_per_s

    @property
    def vs_decompress(self) -> float | None:
        return None if self.decompress_s is None else self.columnar_s / self.decompress_s


def measure(value_size: int, records: int, reference_records: int, repeat: int) -> list[Row]:
    plain = build_segment(records, value_size)
    rows = []
    for codec in CODECS:
        batches = [recompress(b, codec) for b in plain]
        segment = b"".join(batches)
        view = memoryview(segment)
        payloads = []
        position = 0
        for b in batches:
            payloads.append(view[position + 61 : position + len(b)])
            position += len(b)

        decoded = decode_batches(segment)
        assert decoded.num_rows == records, (decoded.num_rows, records)
        del decoded

        prefix, n_prefix = [], 0
        for b in batches:
            if n_prefix >= reference_records:
                break
            prefix.append(b)
            n_prefix += struct.unpack_from(">i", b, 57)[0]
        prefix_bytes = b"".join(prefix)
        reference = best_time(lambda data=prefix_bytes: decode_reference(data), repeat=max(2, repeat // 2))

        def decode_all(segment: bytes = segment) -> None:
            decode_batches(segment)

        def decompress_all(payloads: list[memoryview] = payloads, codec: CompressionType = codec) -> None:
            for p in payloads:
                decompress(codec, p, magic=2)

        if codec is CompressionType.NONE:
            columnar, decompress_s = best_time(decode_all, repeat=repeat, min_seconds=0.5), None
        else:
            # measured in turn so both see the same interference from the rest of the machine
            columnar, decompress_s = best_times([decode_all, decompress_all], repeat=repeat, min_seconds=1.0)
        rows.append(
            Row(
                value_size,
                codec.kafka_name,
                records,
                len(segment),
                columnar,
                n_prefix / reference,
                decompress_s,
            )
        )
        del view, payloads
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records", type=int, default=200_000, help="records per 100-byte segment (1 KiB: 1/4)"
    )
    parser.add_argument("--reference-records", type=int, default=30_000, help="records the reference decodes")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (the fastest counts)")
    parser.add_argument("--value-sizes", type=int, nargs="+", default=list(VALUE_SIZES), help="value sizes")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target fails")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    console.print(f"decode benchmark: one process pinned to CPU {CPU}, best of {args.repeat} runs")
    rows: list[Row] = []
    for size in args.value_sizes:
        records = args.records if size <= 100 else max(1, args.records // 4)
        reference_records = args.reference_records if size <= 100 else max(1, args.reference_records // 4)
        rows += measure(size, records, reference_records, args.repeat)

    table = []
    for r in rows:
        ref_t = r.records / r.reference_records_per_s
        table.append(
            [
                f"{r.value_size} B {r.codec}",
                f"{r.records:,}",
                f"{r.segment_bytes / MB:,.1f}",
                f"{r.columnar_records_per_s / 1e6:,.2f}",
                f"{r.segment_bytes / r.columnar_s / MB:,.0f}",
                f"{r.reference_records_per_s / 1e6:,.3f}",
                f"{r.segment_bytes / ref_t / MB:,.1f}",
                "-" if r.decompress_s is None else f"{r.records / r.decompress_s / 1e6:,.2f}",
                "-" if r.decompress_s is None else f"{r.segment_bytes / r.decompress_s / MB:,.0f}",
                f"{r.vs_reference:,.1f}x",
                "-" if r.vs_decompress is None else f"{r.vs_decompress:.2f}",
            ]
        )
    print_table(
        "columnar decode vs reference vs decompression alone (MB/s = segment bytes on disk per second)",
        [
            "values / codec",
            "records",
            "segment MB",
            "columnar M rec/s",
            "columnar MB/s",
            "reference M rec/s",
            "reference MB/s",
            "decompress M rec/s",
            "decompress MB/s",
            "columnar / reference",
            "columnar time / decompress time",
        ],
        table,
    )

    by_key = {(r.value_size, r.codec): r for r in rows}
    targets = []
    plain100 = by_key.get((100, "none"))
    if plain100 is not None:  # absent when --value-sizes leaves out 100
        targets += [
            Target(
                "columnar, uncompressed 100-byte values",
                plain100.columnar_records_per_s / 1e6,
                3.0,
                unit=" M rec/s",
            ),
            Target(
                "columnar speed / reference speed, uncompressed 100-byte values",
                plain100.vs_reference,
                20.0,
                unit="x",
            ),
        ]
    for r in rows:
        if r.vs_decompress is not None:
            targets.append(
                Target(
                    f"columnar time / decompression time, {r.codec} {r.value_size}-byte values",
                    r.vs_decompress,
                    2.0,
                    at_least=False,
                    unit="x",
                )
            )
    passed = report_targets(targets)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [asdict(r) for r in rows],
                    "targets": [{**asdict(t), "passed": t.passed} for t in targets],
                },
                indent=2,
            )
        )
    return 0 if passed or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
