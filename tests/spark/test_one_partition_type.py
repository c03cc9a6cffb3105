"""One input partition type (`spark_reader.offset_range.OffsetRangePartition`): a split is one topic
partition's offset range from one source, the store's segment copies (`TieredPartition`) or the Kafka
brokers (`BrokerTailPartition`), and the rest of the source asks its questions of that type.

- both variants are the one type, and answer its questions for the same offsets: which offsets, from
  where, how many rows at most, what bytes of the store, in what Arrow schema;
- the same records give the same Arrow rows from either source: a store split reads the segment copy
  (through the RSM's fetch path), the brokers' variant reads those segments' bytes as a Fetch response
  carries them (`tail.chunk_rows`, what its task runs on each response); the brokers' own answers are
  tests/spark/test_kafka_broker_tail.py's, against a real broker;
- the callers dispatch by the type: packing (`split_bytes`, `pack`), counting (`count_partition`), the
  readers (`read_partition`) and the columnar scan's worker (`jvm_ops.read`), with no type check on a
  variant left outside the variants' own classes; both still pickle by their old module paths.

No Spark session and no broker: the store is the real RSM's on the file store (`tiering.PartitionLog`).
"""

from __future__ import annotations

import ast
import io
import pickle
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from segment_format.columnar import decompressed_sections
from spark_reader import jvm_ops, partition_reader
from spark_reader.brokerwire.reader import WireChunk
from spark_reader.counting import count_partition, reference_count
from spark_reader.filters import PushedFilters
from spark_reader.hybrid import tail_settings
from spark_reader.offset_range import OffsetRangePartition
from spark_reader.offsets import Kind, Position
from spark_reader.options import parse_options
from spark_reader.packing import pack, split_bytes
from spark_reader.partition_reader import TieredPartition, read_partition
from spark_reader.planning import Planner
from spark_reader.tail import BrokerTailPartition, chunk_rows

TOPIC = "orders"
ROOT = Path(__file__).resolve().parents[2]


def _tier(tmp_path: Path) -> tuple[dict[str, str], bytes]:
    """Four segments of ten records (offsets 0..39, headers on every third) tiered through the RSM on the
    file store; returns the query's options and the segments' log bytes (what the brokers would send)."""
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), TOPIC, 0), tmp_path / "w")
    logs = []
    for i in range(4):
        log.append(10, codec=i % 2)
        logs.append(log.roll()[1].log_segment.read_bytes())
    rsm.close()
    options = {**configs, "subscribe": TOPIC, "includeHeaders": "true", "kafka.bootstrap.servers": "b:9092"}
    return options, b"".join(logs)


@pytest.fixture
def both(tmp_path: Path) -> tuple[list[TieredPartition], BrokerTailPartition, bytes]:
    """The store's splits of offsets 0..39 and the brokers' range of the same offsets, and the log bytes."""
    options, records = _tier(tmp_path)
    partition_reader._clients.clear()
    opts = parse_options(options)
    planner = Planner(opts)
    (sp,) = planner.select(PushedFilters())
    pr = planner.partition_range(sp, Position(Kind.EARLIEST), Position(Kind.LATEST))
    store = planner.plan([pr], PushedFilters())
    return store, BrokerTailPartition(TOPIC, 0, 0, 40, tail_settings(opts)), records


def _table(batches: object) -> pa.Table:
    return pa.Table.from_batches(list(batches))  # type: ignore[arg-type]


def test_a_store_range_and_a_broker_range_are_one_type(both: tuple) -> None:
    store, tail, _ = both
    assert len(store) == 4 and all(type(p) is TieredPartition for p in store)
    for part in [*store, tail]:
        assert isinstance(part, OffsetRangePartition)
    # which offsets: the store's splits cover the brokers' range of the same offsets, one segment each
    assert [(p.topic, p.partition, p.start, p.end) for p in store] == [
        (TOPIC, 0, o, o + 10) for o in (0, 10, 20, 30)
    ]
    assert (tail.topic, tail.partition, tail.start, tail.end) == (TOPIC, 0, 0, 40)
    assert sum(p.planned_rows() for p in store) == tail.planned_rows() == 40
    # from where: an object of the store, named in the split's description; the brokers' addresses
    for p in store:
        assert p.source == f"main/{p.split.manifest.location['log']}" and p.source in repr(p)
        assert p.stored_bytes() == p.split.end_position - p.split.start_position > 0
    assert tail.source == "b:9092" and tail.stored_bytes() is None
    assert repr(tail) == f"BrokerTailPartition({TOPIC}-0 offsets 0..39 from b:9092)"
    # in what schema: the same query's options give the same one, whole or pruned
    assert tail.arrow_schema() == store[0].arrow_schema()
    assert "headers" in tail.arrow_schema().names and "violation" not in tail.arrow_schema().names
    assert tail.arrow_schema(["value", "offset"]) == store[0].arrow_schema(["value", "offset"])


@pytest.mark.parametrize("columns", [None, ("offset",), ("value", "headers", "partition")])
def test_the_same_records_give_the_same_rows_from_either_source(both: tuple, columns: tuple | None) -> None:
    store, tail, records = both
    from_store = _table(b for p in store for b in p.rows(columns))
    response = WireChunk(
        topic=TOPIC, partition=0, records=memoryview(records), start=0, end=40, next_offset=40, aborted=(),
        high_watermark=40, last_stable_offset=40, log_start_offset=0,
    )  # fmt: skip
    from_brokers = _table(chunk_rows(response, tail, columns))
    assert from_store.schema == from_brokers.schema == tail.arrow_schema(columns)
    assert from_store.to_pydict() == from_brokers.to_pydict()
    assert from_store.num_rows == 40


def test_callers_treat_every_split_through_the_one_type(both: tuple) -> None:
    store, tail, _ = both
    # packing: a split of the store by its bytes, the brokers' range never packed
    assert [split_bytes(p) for p in store] == [p.stored_bytes() for p in store]
    assert split_bytes(tail) is None and split_bytes(object()) is None
    tasks = pack([*store[:2], tail, *store[2:]], max_bytes=1 << 30, open_cost=0, min_partitions=1)
    assert tasks == [store[:2], [tail], store[2:]]
    # counting: each split counts itself (the store's from its batch headers: no record section
    # decompressed, half the segments being compressed), equal to reading it
    before = decompressed_sections()
    counted = [count_partition(p) for p in store]
    assert decompressed_sections() == before
    assert counted == [reference_count(p) for p in store] == [10] * 4
    assert decompressed_sections() > before
    assert count_partition(object()) == 0  # Spark's placeholder of a query planned to nothing
    # the readers: a split's rows, whatever its source; nothing for the placeholder
    assert _table(read_partition(store[1], ("offset",))).column("offset").to_pylist() == list(range(10, 20))
    assert list(read_partition(object())) == []
    # the columnar scan's worker: a packed task of store splits, its schema from the split
    for count in (False, True):
        out = io.BytesIO()
        status, trailer, _ = jvm_ops.read({"columns": ["offset"], "count": count}, pickle.dumps(store), out)
        assert status == jvm_ops.OK and trailer["rows"] == 40, trailer
    # both still pickle by their module paths (the scan's JVM side carries them as opaque bytes)
    for part in (store[0], tail):
        back = pickle.loads(pickle.dumps(part))
        assert type(back) is type(part) and repr(back) == repr(part)
    assert (
        f"{TieredPartition.__module__}.{TieredPartition.__name__}"
        == "spark_reader.partition_reader.TieredPartition"
    )
    assert (
        f"{BrokerTailPartition.__module__}.{BrokerTailPartition.__name__}"
        == "spark_reader.tail.BrokerTailPartition"
    )


def test_no_caller_checks_which_variant_a_split_is() -> None:
    """`isinstance(part, TieredPartition)` / `BrokerTailPartition` nowhere in the source: callers ask the
    split (the one type's methods), so a third source is one more variant, not one more branch each."""
    variants = {"TieredPartition", "BrokerTailPartition"}
    found = []
    for path in sorted((ROOT / "spark_reader").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if named & variants:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
