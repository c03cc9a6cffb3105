"""What a read from the brokers raises: one line naming the brokers, the partition and the offset.

All are `BrokerError`s (so `ReaderError`s, which Spark shows as one line): the driver's questions
(`spark_reader.broker`) and the tasks' reads (`spark_reader.tail`) go through this layer, so one family
names every failure of the brokers. `OffsetOutOfRangeError` carries the partition's log start and end
as the brokers gave them right after the refusal, so the caller applies failOnDataLoss (fail, or go on
from the log start) without asking again. No message holds a credential: kafka-python's own errors are
reduced to their class name and the broker's error message, which never echoes a password.
"""

from __future__ import annotations

from spark_reader.errors import ReaderError


class BrokerError(ReaderError):
    """The brokers cannot answer (unreachable, authentication, authorization): one line naming them."""


class WireError(BrokerError):
    """The brokers refused or could not answer a request of the fetch layer."""


class WireTimeoutError(WireError):
    """Retriable errors (a leader moving, a connection dropping) went on past default.api.timeout.ms."""


class OffsetOutOfRangeError(WireError):
    """The fetch offset is outside the partition's log: retention (or DeleteRecords) moved its start past
    it, or it is beyond the end. `log_start_offset` / `log_end_offset` are the log's bounds right after."""

    def __init__(
        self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"{topic}-{partition}: offset {offset} is out of range on the Kafka brokers (their log holds "
            f"offsets {log_start_offset}..{log_end_offset - 1})"
        )
