"""The brokers' side of a hybrid read (`kafka.bootstrap.servers`): the driver's questions to the brokers.

With `kafka.bootstrap.servers` the source reads history from the store and the live tail from the brokers
(`spark_reader.hybrid` splits each partition). Everything the driver asks the brokers is here, and it is
cheap on purpose: per query (or micro-batch) one Metadata request naming the query's topics (every topic
only for `subscribePattern`), which gives their partitions and leaders, and one ListOffsets request per
leader (the high watermark, or the last stable offset under read_committed, as Spark's Kafka source takes
`latest`). A timestamp option the store cannot answer, or a partition the store holds nothing of, adds
one more ListOffsets (offsetsForTimes / earliest). The driver never fetches.

The client is the one the tasks read the tail with (`spark_reader.brokerwire.BrokerWire`), made from the
same `WireSettings`: the `kafka.*` options (the Java client's names, as Spark's Kafka source takes them)
are translated in one place (`spark_reader.brokerwire.settings`), so a setting the tasks could not honour
fails the query here, in one line, before any task runs, and the driver's failures (unreachable brokers,
a refused password, a certificate not trusted) read as the tasks' do. Besides its own two requests the
client makes what a connection makes: ApiVersions, and once the bootstrap's Metadata of no topic (the
brokers' addresses); tests/spark/test_kafka_hybrid.py counts them. Values are never logged (credentials).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from spark_reader.brokerwire.client import BrokerWire
from spark_reader.brokerwire.errors import BrokerError
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.options import SourceOptions

log = logging.getLogger(__name__)

__all__ = ["BrokerError", "BrokerTopic", "BrokerView", "warn_once"]


@dataclass(frozen=True)
class BrokerTopic:
    name: str
    partitions: tuple[int, ...]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """A warning logged once per process (a stream's triggers would repeat it every micro-batch)."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("%s", message)


class BrokerView:
    """The driver's questions to the brokers for one query or micro-batch (see the module docstring).

    `topics` is one Metadata request; `offsets` one ListOffsets request per leader for every partition at
    once, latest, earliest and timestamps mixed, at the query's isolation level (so latest is the last
    stable offset under read_committed), answered from the leaders `topics` learnt. Each waits at most
    `kafka.default.api.timeout.ms` (60 s), retries included. Close it when done."""

    def __init__(self, opts: SourceOptions, settings: WireSettings | None = None) -> None:
        self.opts = opts
        self.settings = settings or WireSettings.from_kafka_params(opts.kafka_params)
        self.servers = self.settings.bootstrap_servers
        self.client = BrokerWire(self.settings)

    def close(self) -> None:
        self.client.close()

    def topics(self) -> dict[str, BrokerTopic]:
        """The selected topics that exist on the brokers, with their partitions (one Metadata request)."""
        opts = self.opts
        if opts.subscribe_pattern is not None:
            pattern = re.compile(opts.subscribe_pattern)
            found = {
                name: leaders
                for name, leaders in self.client.topics(None).items()
                if pattern.fullmatch(name) and not name.startswith("__")
            }
        else:
            found = self.client.topics(sorted(opts.subscribe or opts.assign or ()))
        out: dict[str, BrokerTopic] = {}
        for name, leaders in sorted(found.items()):
            parts = tuple(sorted(leaders))
            if opts.assign is not None:
                parts = tuple(p for p in parts if p in opts.assign.get(name, ()))
            out[name] = BrokerTopic(name, parts)
        return out

    def offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
        """One ListOffsets round: per partition LATEST, EARLIEST, or a timestamp (offsetsForTimes).

        Latest is the high watermark, or the last stable offset under read_committed. A timestamp no
        record reaches gives None. No request for no partition."""
        if not specs:
            return {}
        return self.client.offsets(specs, self.opts.isolation_level)
