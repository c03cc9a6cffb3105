"""Kafka's ``kafka-dump-log`` text, byte for byte: what ``rsm dump-log`` prints for each file kind.

Every line is the one ``org.apache.kafka.tools.DumpLogSegments`` prints for the same file and flags
(field names, order, ``OptionalLong`` values, Java's ``toString`` of each type), so scripts written
against Kafka's tool read ours unchanged; ``tests/tools/test_dump_log_kafka.py`` diffs the two on the same
files. Payloads are printed as Kafka's default ``StringDecoder`` prints them: the bytes decoded as UTF-8
(malformed input replaced by U+FFFD, as Java's ``new String(bytes, UTF_8)`` does) and written as UTF-8,
nothing escaped, interpreted or cut.

Everything is written as bytes (``out`` is a binary stream). A ``.log`` whose batches are all magic 2 is
printed from the columnar C decoder's output (one pass over the file, no Python object per record);
legacy magic 0/1 entries, control batches and anything the fast path does not recognise go through the
per-batch reference decoder, which prints the same lines.

One module per file kind: `log` (with `control` for control records' text), `indexes` (the index,
time index, transaction index, producer snapshot and leader-epoch checkpoint), over `common` (options,
findings and Java's text of values).
"""

from rsm.cli.kafka_dump.common import DumpError, Findings, Options, java_file_name
from rsm.cli.kafka_dump.control import control_record_text
from rsm.cli.kafka_dump.indexes import (
    dump_index,
    dump_leader_epoch_checkpoint,
    dump_producer_snapshot,
    dump_time_index,
    dump_txn_index,
)
from rsm.cli.kafka_dump.log import dump_log, dump_log_bytes

__all__ = [
    "DumpError",
    "Findings",
    "Options",
    "control_record_text",
    "dump_index",
    "dump_leader_epoch_checkpoint",
    "dump_log",
    "dump_log_bytes",
    "dump_producer_snapshot",
    "dump_time_index",
    "dump_txn_index",
    "java_file_name",
]
