"""What record validation adds to a copy, as ratios measured in one run.

    python benchmarks/validation.py [--records 200000] [--repeat 5] [--json out.json]

One process pinned to one core. For a zstd and an uncompressed segment of 100-byte values (batches of
16 KiB as a Java producer fills them, a `trace-id` header on every record; JSON values, or for the schema-id
policy the same JSON behind the 5-byte schema-registry header) it copies the segment with the
RemoteStorageManager to a file store (as a new user would: defaults, no encryption), fewest CPU seconds of
`--repeat` runs (the machine is shared: wall time would count other processes' turns), alternating:

- no policy (the copy as it is: integrity of batches and indexes, chunk CRCs, upload);
- the built-in policies: `header:trace-id`, `schema-id`, `json`;
- the seed's sample policy as a user writes it (per record, `validate(topic, record)`, in this file) through
  the per-record adapter;
- and, for the compressed segment, decompressing every batch's records alone (what any decoder must pay).

Targets: the header and schema-id policies add to the copy at most 2x the decompression time (on
the uncompressed segment: at most the plain copy's own time) and check >= 5 M records/s per core beyond
decompression (records / (added time - decompression time), since a decoder cannot be faster than the
decompression it needs; the uncompressed segment has none); the hints visibly save work: the header and
schema-id policies add less than the JSON one, which reads whole values. Exit status 1 if a target fails.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Target, console, finish, pin_to_one_cpu, print_table  # noqa: E402

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
CPU = pin_to_one_cpu()

from rsm import (  # noqa: E402
    LogConfig,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import InvalidRecordException  # noqa: E402
from rsm.validation import (  # noqa: E402
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)
from segment_format.codecs import CompressionType, decompress  # noqa: E402
from segment_format.indexes import build_indexes  # noqa: E402
from segment_format.log_entries import iter_batches  # noqa: E402
from segment_format.writer import build_batch  # noqa: E402

MB = 1e6
BATCH_BYTES = 16 << 10


class SeedRequireHeader(RecordValidationPolicy):
    """The seed's sample policy, as a user writes it: one record at a time."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        if not any(h.key == topic.validation_policy for h in record.headers):
            raise InvalidRecordException(f"requires a header with key: {topic.validation_policy}")

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(access_headers=True, access_key_bytes=0, access_value_bytes=0)


def best_cpu_times(fns: Sequence[Callable[[], object]], repeat: int) -> list[float]:
    """Fewest CPU seconds of this process (all its threads) per function, run in turn (a, b, a, b, ...).

    CPU time, not wall time: the machine is shared, and wall time would count the turns other processes
    take on this core while the copy waits (ratios of wall times swung by 2x between runs here)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                fn()
                best[i] = min(best[i], time.process_time() - start)
            finally:
                gc.enable()
    return best


def _value(rng: random.Random, framed: bool) -> bytes:
    body = (
        f'{{"order":{rng.randrange(10**9)},"item":"sku-{rng.randrange(10**6):06d}",'
        f'"qty":{rng.randrange(1, 99)},"price":{rng.randrange(100, 99999) / 100},"n":"'
    )
    size = 95 if framed else 100
    body = (body + "x" * size)[: size - 2] + '"}'
    head = b"\x00" + rng.randrange(1, 50).to_bytes(4, "big") if framed else b""
    return head + body.encode()


def build(directory: Path, records: int, codec: CompressionType, framed: bool) -> tuple[Path, int, int]:
    """A segment in `directory` with Kafka's indexes; returns (log path, last offset, size)."""
    rng = random.Random(7)
    directory.mkdir(parents=True)
    per_batch = BATCH_BYTES // 125
    batches, offset, ts = [], 0, 1_700_000_000_000
    while offset < records:
        n = min(per_batch, records - offset)
        recs = [
            (b"user-%06d" % rng.randrange(10**6), _value(rng, framed), [("trace-id", b"%016x" % rng.getrandbits(64))], ts + offset + i)
            for i in range(n)
        ]  # fmt: skip
        batches.append(build_batch(recs, base_offset=offset, compression=codec, producer_id=1000,
                                   producer_epoch=0, base_sequence=offset))  # fmt: skip
        offset += n
    raw = b"".join(batches)
    log = directory / "00000000000000000000.log"
    log.write_bytes(raw)
    offset_index, time_index = build_indexes(raw, 0)
    log.with_suffix(".index").write_bytes(offset_index)
    log.with_suffix(".timeindex").write_bytes(time_index)
    log.with_suffix(".snapshot").write_bytes(bytes(10))
    return log, offset - 1, len(raw)


def measure(root: Path, records: int, codec: CompressionType, repeat: int) -> dict[str, float]:
    json_log, last, size = build(root / f"{codec.kafka_name}-json", records, codec, framed=False)
    sr_log, sr_last, sr_size = build(root / f"{codec.kafka_name}-sr", records, codec, framed=True)
    tip = TopicIdPartition(uuid.uuid4(), "bench", 0)

    def rsm_for(policy_class: str | None) -> RemoteStorageManager:
        rsm = RemoteStorageManager()
        configs = {"storage.backend": "file", "storage.file.root": str(root / "store")}
        if policy_class:
            configs["record.validation.policy.class.name"] = policy_class
        rsm.configure(configs)
        return rsm

    builtin, seed = rsm_for(None), rsm_for("__main__:SeedRequireHeader")

    def copier(rsm: RemoteStorageManager, log: Path, last: int, size: int, policy: str | None):  # type: ignore[no-untyped-def]
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 0, last, 0, 0, 0, size, {0: 0})
        data = LogSegmentData(log, log.with_suffix(".index"), log.with_suffix(".timeindex"), None,
                              log.with_suffix(".snapshot"), b"0\n1\n0 0\n")  # fmt: skip
        lc = LogConfig({"record.validation.policy": policy} if policy else {})
        return lambda: rsm.copy_log_segment_data(md, data, lc)

    payloads = []
    raw = json_log.read_bytes()
    for _, b in iter_batches(raw):
        payloads.append(memoryview(raw)[b.position + 61 : b.position + b.size_in_bytes])

    def decompress_all() -> None:
        for p in payloads:
            decompress(codec, p, magic=2)

    variants = {
        "no policy": copier(builtin, json_log, last, size, None),
        "no policy (schema-id segment)": copier(builtin, sr_log, sr_last, sr_size, None),
        "header": copier(builtin, json_log, last, size, "header:trace-id"),
        "schema-id": copier(builtin, sr_log, sr_last, sr_size, "schema-id"),
        "json": copier(builtin, json_log, last, size, "json"),
        "seed per-record header (adapter)": copier(seed, json_log, last, size, "trace-id"),
    }
    if codec is not CompressionType.NONE:
        variants["decompression alone"] = decompress_all
    for fn in variants.values():
        fn()  # warm: imports, parsers, the column pool; also checks every variant passes
    times = best_cpu_times(list(variants.values()), repeat)
    out = dict(zip(variants, times, strict=True))
    out["size"] = size
    for rsm in (builtin, seed):
        rsm.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7, help="runs per measurement (the fastest counts)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    console.print(f"validation benchmark: one process pinned to CPU {CPU}, {args.records:,} records of 100-byte "
                  f"values, fewest CPU seconds of {args.repeat} runs")  # fmt: skip
    n = args.records
    results: dict[str, dict[str, float]] = {}
    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="rsm-validation-bench-") as tmp:
        for codec in (CompressionType.ZSTD, CompressionType.NONE):
            r = measure(Path(tmp), n, codec, args.repeat)
            results[codec.kafka_name] = r
            rows = []
            for name, t in r.items():
                if name == "size":
                    continue
                base = r["no policy (schema-id segment)"] if name == "schema-id" else r["no policy"]
                is_policy = not name.startswith("no policy") and name != "decompression alone"
                added = t - base if is_policy else None
                rows.append([
                    name,
                    f"{t * 1000:,.1f}",
                    f"{r['size'] / t / MB:,.0f}",
                    f"{n / t / 1e6:,.2f}",
                    "-" if added is None else f"{added * 1000:,.1f}",
                    "-" if added is None or added <= 0 else f"{n / added / 1e6:,.1f}",
                    "-" if added is None else f"{t / base:,.2f}x",
                ])  # fmt: skip
            print_table(
                f"{codec.kafka_name}: copy of {n:,} records ({r['size'] / MB:,.1f} MB) to the file store",
                [
                    "variant",
                    "CPU ms",
                    "MB/s",
                    "M rec/s",
                    "added ms",
                    "M rec/s checked (added)",
                    "vs no policy",
                ],
                rows,
            )
            plain = r["no policy"]
            decomp = r.get("decompression alone")
            for name, base in (("header", plain), ("schema-id", r["no policy (schema-id segment)"])):
                added = r[name] - base
                if decomp is not None:
                    targets.append(Target(f"{codec.kafka_name}: {name} policy added time / decompression time",
                                          added / decomp, 2.0, at_least=False, unit="x"))  # fmt: skip
                    beyond = max(added - decomp, 1e-9)
                    targets.append(Target(f"{codec.kafka_name}: {name} policy, records checked per second beyond "
                                          "decompression", n / beyond / 1e6, 5.0, unit=" M/s"))  # fmt: skip
                else:
                    targets.append(Target(f"{codec.kafka_name}: {name} policy added time / plain copy time",
                                          added / base, 1.0, at_least=False, unit="x"))  # fmt: skip
                    targets.append(Target(f"{codec.kafka_name}: {name} policy, records checked per second",
                                          n / max(added, 1e-9) / 1e6, 5.0, unit=" M/s"))  # fmt: skip
                targets.append(Target(f"{codec.kafka_name}: {name} policy added time / json policy added time",
                                      added / (r["json"] - plain), 1.0, at_least=False, unit="x"))  # fmt: skip
    return finish(
        targets, {"records": n, "results": results, "targets": [t.__dict__ for t in targets]}, args.json
    )


if __name__ == "__main__":
    sys.exit(main())
