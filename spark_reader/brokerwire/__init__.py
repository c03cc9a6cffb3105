"""The brokers' fetch layer: a partition's offset range from the Kafka brokers as raw record batches.

A hybrid read's live tail (`spark_reader.tail`) and the driver's questions to the brokers
(`spark_reader.broker`) go through it. It fetches the records as the brokers' own bytes, whole record
batches, and hands them to the columnar decoder the store path already uses (`segment_format.columnar`),
so no Python code runs per record: a broker range and a store chunk are one decoder and one set of rules.

Built on kafka-python 3.x's network client and its protocol classes (`connection` says why: it already
does ApiVersions, SASL PLAIN/SCRAM, TLS, timeouts and throttling, and its Fetch response keeps `records`
as bytes); what is ours is which request goes where, what each error means (`client`), the whole-batch
cut of a response (`batches`), the range loop (`reader`), read_committed from a response's aborted list
(`aborts`) and the decode (`arrow`).

    from spark_reader.brokerwire import BrokerWire, read_arrow
    with BrokerWire.from_kafka_params(opts.kafka_params) as client:
        for batch in read_arrow(client, "payments", 0, start, end, IsolationLevel.READ_COMMITTED):
            ...  # pyarrow.RecordBatch in segment_format.arrow_schema.RECORD_SCHEMA

| module | job |
| --- | --- |
| `settings` | the `kafka.*` options (Java names) -> `WireSettings`: the one translation, the rest refused |
| `connection` | kafka-python's network client: send one request, wait (throttles, deadlines) |
| `pool` | connections kept for the process's next client of the same brokers (Spark's consumer pool) |
| `redact` | keeps kafka-python's DEBUG lines from printing SASL frames |
| `metadata`, `offsets`, `fetch` | the Metadata, ListOffsets and Fetch requests and their answers |
| `batches` | the whole batches of a response, the offset after them, the cut at an end (headers) |
| `client` | `BrokerWire`: topics, leaders, offsets, fetches; retries and errors as a Java consumer's |
| `reader` | `read_range`: [start, end) as `WireChunk`s (raw bytes + aborted transactions) |
| `aborts` | the Java consumer's read_committed rule over a chunk's decoded batches |
| `arrow` | `decode_chunk` / `read_arrow`: chunks -> Arrow rows through segment_format's decoder |
| `count` | `count_chunk`: the rows `decode_chunk` would give, from the batch headers (`count()`) |
| `errors`, `stats` | what it raises; what it counted |
"""

from __future__ import annotations

from spark_reader.brokerwire.arrow import decode_chunk, decode_chunks, read_arrow
from spark_reader.brokerwire.client import BrokerWire
from spark_reader.brokerwire.count import count_chunk
from spark_reader.brokerwire.errors import BrokerError, OffsetOutOfRangeError, WireError, WireTimeoutError
from spark_reader.brokerwire.fetch import AbortedTransaction, FetchResult
from spark_reader.brokerwire.metadata import PartitionLeader
from spark_reader.brokerwire.reader import WireChunk, read_range
from spark_reader.brokerwire.settings import SaslMechanism, SecurityProtocol, WireSettings
from spark_reader.brokerwire.stats import WireStats

__all__ = [
    "AbortedTransaction",
    "BrokerError",
    "BrokerWire",
    "FetchResult",
    "OffsetOutOfRangeError",
    "PartitionLeader",
    "SaslMechanism",
    "SecurityProtocol",
    "WireChunk",
    "WireError",
    "WireSettings",
    "WireStats",
    "WireTimeoutError",
    "count_chunk",
    "decode_chunk",
    "decode_chunks",
    "read_arrow",
    "read_range",
]
