"""`BrokerWire`: the fetch layer's client of the brokers, and what each error of theirs means.

Four requests, each sent to the node that must answer it: ApiVersions (on every new connection, by
kafka-python), Metadata (leaders and leader epochs: one topic for a read, the query's topics or all of
them for the driver's `topics`), ListOffsets (to each partition's leader, every topic's partitions led by
one broker in one request) and Fetch (one partition, from its leader). Errors are handled as a Java
consumer handles them:

- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE, a dropped
  connection or any other error Kafka marks retriable: forget the topic's leaders, wait
  `retry.backoff.ms`, ask Metadata again and retry against the leader it names; each request waits at most
  `request.timeout.ms`, and one operation with its retries at most `default.api.timeout.ms`
  (`WireTimeoutError` then, naming the last error);
- OFFSET_OUT_OF_RANGE: `OffsetOutOfRangeError` carrying the log's start and end (one ListOffsets), so the
  caller applies failOnDataLoss;
- a throttle (`throttle_time_ms`, a quota): the next request to that broker waits it out
  (`spark_reader.brokerwire.connection`);
- authentication or authorization refused, a TLS certificate not trusted, a version the broker does not
  have: `BrokerError` at once, one line (retrying cannot help, and would only make the user wait);
- no bootstrap server reachable within `default.api.timeout.ms`: `WireTimeoutError` saying so
  ("cannot reach the Kafka brokers ... (kafka.bootstrap.servers)"), the option to check named.

Not thread-safe: one client per task (or thread). Close it when done (or use it as a context manager):
its connection then goes back to this process's pool for the next client of the same brokers
(`spark_reader.brokerwire.pool`, as Spark's Kafka source pools its consumers), unless it saw an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from segment_format.errors import CorruptRecordError
from spark_reader.brokerwire.connection import Deadline, WireConnection
from spark_reader.brokerwire.errors import BrokerError, OffsetOutOfRangeError, WireError, WireTimeoutError
from spark_reader.brokerwire.fetch import FetchResult, fetch_request, parse_fetch
from spark_reader.brokerwire.metadata import (
    NO_LEADER,
    UNKNOWN_TOPIC,
    PartitionLeader,
    metadata_request,
    parse_leaders,
    parse_topics,
)
from spark_reader.brokerwire.offsets import list_offsets_request, parse_list_offsets
from spark_reader.brokerwire.pool import POOL
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.brokerwire.stats import WireStats
from spark_reader.brokerwire.transport import is_fatal
from spark_reader.offsets import EARLIEST, LATEST
from spark_reader.options import IsolationLevel

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class PendingFetch:
    """A Fetch sent ahead (`BrokerWire.fetch_ahead`): what it asked, and the future of its answer."""

    topic: str
    partition: int
    offset: int
    isolation: IsolationLevel
    node_id: int
    future: Any


def _name(exc: BaseException) -> str:
    """A kafka-python error as Kafka names it (NOT_LEADER_OR_FOLLOWER), with its text if any."""
    code = getattr(type(exc), "message", None)
    text = str(exc.args[0]) if exc.args else ""
    text = text.removeprefix(f"{type(exc).__name__}: ")
    name = code if isinstance(code, str) else type(exc).__name__
    return f"{name}: {text}" if text and text != name else name


class BrokerWire:
    """A client of the brokers that fetches raw record batches (see the module docstring)."""

    def __init__(self, settings: WireSettings) -> None:
        self.settings = settings
        self.stats = WireStats()
        self._conn = POOL.take(settings, self.stats) or WireConnection(settings, self.stats)
        self._leaders: dict[str, dict[int, PartitionLeader]] = {}
        self._clean = True  # no error seen: the connection may go back to the pool
        self._closed = False

    @classmethod
    def from_kafka_params(cls, params: Mapping[str, str]) -> BrokerWire:
        """A client for the `kafka.*` options (prefix stripped), as Spark's Kafka source takes them."""
        return cls(WireSettings.from_kafka_params(params))

    def __enter__(self) -> BrokerWire:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, GeneratorExit):
            self._clean = False
        self.close()

    def close(self) -> None:
        """Done with the brokers: the connection goes back to the pool for this process's next client
        when this one saw no error and it is still sound (`spark_reader.brokerwire.pool`), else closes."""
        if self._closed:
            return
        self._closed = True
        if self._clean and self._conn.reusable():
            POOL.give(self.settings, self._conn)
        else:
            self._conn.close()

    @property
    def servers(self) -> str:
        return self.settings.bootstrap_servers

    def _sasl_name(self) -> str:
        """The mechanism and listener a failed authentication used ("SASL SCRAM-SHA-512 over
        SASL_PLAINTEXT"): never the credentials."""
        mechanism = self.settings.sasl_mechanism
        name = f"SASL {mechanism.value}" if mechanism is not None else "SASL"
        return f"{name} over {self.settings.security_protocol.value}"

    def _deadline(self) -> Deadline:
        return Deadline(self.settings.default_api_timeout_ms)

    # -- retries -------------------------------------------------------------------------------------
    def _retrying(
        self, what: str, topics: str | Iterable[str], deadline: Deadline, attempt: Callable[[], T]
    ) -> T:
        """`attempt()` until it returns, retrying what Kafka marks retriable (see the module docstring);
        an error saying the leaders moved drops `topics`' cached leaders first."""
        import kafka.errors as Errors

        topics = (topics,) if isinstance(topics, str) else tuple(topics)

        while True:
            try:
                self._conn.bootstrap(deadline)
                return attempt()
            except (Errors.SaslAuthenticationFailedError, Errors.IllegalSaslStateError) as exc:
                self._clean = False
                raise BrokerError(
                    f"{self._sasl_name()} authentication to the Kafka brokers {self.servers} failed: "
                    f"{_name(exc)} (check kafka.sasl.jaas.config's username and password)"
                ) from None
            except Errors.AuthorizationError as exc:
                self._clean = False
                raise BrokerError(
                    f"the Kafka brokers {self.servers} refused access ({what}): {_name(exc)}"
                ) from None
            except Errors.KafkaError as exc:
                self._clean = False
                reason = _name(exc)
                if is_fatal(exc):  # a certificate not trusted, a host name not in it
                    raise BrokerError(f"TLS with the Kafka brokers {self.servers} failed: {reason}") from None
                if not exc.retriable:
                    raise WireError(f"{what}: the Kafka brokers {self.servers} answered {reason}") from None
                if getattr(exc, "invalid_metadata", False) or isinstance(exc, Errors.KafkaTimeoutError):
                    for topic in topics:
                        self._leaders.pop(topic, None)
            if deadline.expired and not self._conn.bootstrapped:
                raise WireTimeoutError(
                    f"cannot reach the Kafka brokers {self.servers} (kafka.bootstrap.servers) within "
                    f"{deadline.timeout_ms / 1000:g} s (kafka.default.api.timeout.ms): {reason}"
                )
            if deadline.expired:
                raise WireTimeoutError(
                    f"{what}: no answer from the Kafka brokers {self.servers} within "
                    f"{deadline.timeout_ms / 1000:g} s (kafka.default.api.timeout.ms); last error: {reason}"
                )
            self.stats.retries += 1
            log.debug("%s: %s; retrying in %d ms", what, reason, self.settings.retry_backoff_ms)
            self._conn.wait(min(self.settings.retry_backoff_ms, deadline.remaining_ms()))

    # -- metadata ------------------------------------------------------------------------------------
    def _topic_leaders(self, topic: str, deadline: Deadline) -> dict[int, PartitionLeader]:
        """The topic's leaders, from the cache or one Metadata request (kafka-python errors raised)."""
        import kafka.errors as Errors

        cached = self._leaders.get(topic)
        if cached is not None:
            return cached
        response = self._conn.request(self._conn.any_node(), metadata_request(topic), deadline)
        self.stats.metadata_refreshes += 1
        self._conn.cluster.update_metadata(response)  # the brokers' addresses, for the connections
        answer = parse_leaders(response, topic)
        if answer.error_code:
            raise Errors.for_code(answer.error_code)(topic)
        self._leaders[topic] = answer.leaders
        return answer.leaders

    def _leader(self, topic: str, partition: int, deadline: Deadline) -> PartitionLeader:
        import kafka.errors as Errors

        leaders = self._topic_leaders(topic, deadline)
        leader = leaders.get(partition)
        if leader is None:
            raise WireError(f"{topic}-{partition}: the topic has no partition {partition} on {self.servers}")
        if leader.error_code:
            raise Errors.for_code(leader.error_code)(f"{topic}-{partition}")
        if leader.node_id == NO_LEADER:
            raise Errors.LeaderNotAvailableError(f"{topic}-{partition}")
        return leader

    def leaders(self, topic: str) -> dict[int, PartitionLeader]:
        """The topic's partitions and their leaders (a fresh Metadata request)."""
        self._leaders.pop(topic, None)
        deadline = self._deadline()
        return self._retrying(
            f"{topic}: metadata", topic, deadline, lambda: self._topic_leaders(topic, deadline)
        )

    def topics(self, names: Sequence[str] | None = None) -> dict[str, dict[int, PartitionLeader]]:
        """The topics of `names` that exist (None: every topic but Kafka's internal ones), each with its
        partitions' leaders, from one Metadata request (fresh; its leaders are kept for the requests
        that follow, so a ListOffsets after it needs no Metadata of its own). Never creates a topic."""
        import kafka.errors as Errors

        if names is not None and not names:
            return {}  # an empty list would be Kafka's "no topics": a request for nothing
        deadline = self._deadline()

        def attempt() -> dict[str, dict[int, PartitionLeader]]:
            response = self._conn.request(self._conn.any_node(), metadata_request(names), deadline)
            self.stats.metadata_refreshes += 1
            self._conn.cluster.update_metadata(response)
            out: dict[str, dict[int, PartitionLeader]] = {}
            for name, answer in sorted(parse_topics(response).items()):
                if names is None and answer.internal:
                    continue
                error = Errors.for_code(answer.error_code)
                if answer.error_code in (UNKNOWN_TOPIC, Errors.InvalidTopicError.errno):
                    continue  # not on the brokers
                if error is not Errors.NoError:
                    raise error(name)  # refused access: at once; a topic still being created: retried
                out[name] = self._leaders[name] = answer.leaders
            return out

        what = "metadata of " + ("every topic" if names is None else ", ".join(names))
        return self._retrying(what, names or (), deadline, attempt)

    def versions(self) -> dict[str, int]:
        """The versions of Metadata, ListOffsets and Fetch this client sends: the highest both it and the
        brokers know (ApiVersions, on connecting), Fetch capped at 12 (`spark_reader.brokerwire.fetch`)."""
        deadline = self._deadline()
        self._retrying("ApiVersions", "", deadline, lambda: None)
        return self._conn.versions()

    # -- ListOffsets ---------------------------------------------------------------------------------
    def list_offsets(
        self,
        topic: str,
        specs: Mapping[int, int],
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[int, int | None]:
        """`offsets` for partitions of one topic, by partition."""
        found = self.offsets({(topic, p): spec for p, spec in specs.items()}, isolation)
        return {p: offset for (_, p), offset in found.items()}

    def offsets(
        self,
        specs: Mapping[Key, int],
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[Key, int | None]:
        """Per (topic, partition): EARLIEST (-2), LATEST (-1: the high watermark, the last stable offset
        under read_committed) or the first offset at or after a timestamp (None: no record that late).

        One request per leader, every topic's partitions it leads in it; partitions whose leader moved
        are retried against the new one."""
        import kafka.errors as Errors

        deadline = self._deadline()
        out: dict[Key, int | None] = {}
        todo = dict(specs)

        def attempt() -> dict[Key, int | None]:
            by_node: dict[int, dict[Key, int]] = {}
            epochs: dict[Key, int] = {}
            for (t, p), spec in todo.items():
                leader = self._leader(t, p, deadline)
                by_node.setdefault(leader.node_id, {})[(t, p)] = spec
                epochs[(t, p)] = leader.leader_epoch
            failed: type[Errors.KafkaError] | None = None
            for node, parts in by_node.items():
                request = list_offsets_request(parts, epochs, isolation, self.settings.request_timeout_ms)
                answers = parse_list_offsets(self._conn.request(node, request, deadline))
                for key in parts:
                    listed = answers.get(key)
                    error = Errors.for_code(listed.error_code if listed else UNKNOWN_TOPIC)
                    if listed is not None and error is Errors.NoError:
                        out[key] = listed.offset
                        del todo[key]
                    elif error.retriable:
                        failed = failed or error
                    else:
                        raise error(f"{key[0]}-{key[1]}")
            if todo:
                t, p = min(todo)
                raise (failed or Errors.UnknownTopicOrPartitionError)(f"{t}-{p}")
            return out

        topics = sorted({t for t, _ in specs})
        return self._retrying(f"{', '.join(topics)}: ListOffsets", topics, deadline, attempt)

    # -- Fetch ---------------------------------------------------------------------------------------
    def fetch_ahead(
        self,
        topic: str,
        partition: int,
        offset: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> PendingFetch | None:
        """Send the Fetch for `offset` now, without waiting for its answer (`fetch(..., ahead=)` collects
        it), so the broker answers while the caller decodes what it has. None when it cannot go out at
        once (leader unknown, connection down or throttled): `fetch` then sends it itself."""
        leader = self._leaders.get(topic, {}).get(partition)
        if leader is None or leader.node_id == NO_LEADER or leader.error_code:
            return None
        request = fetch_request(topic, partition, offset, leader.leader_epoch, isolation, self.settings)
        future = self._conn.send_now(leader.node_id, request)
        if future is None:
            return None
        return PendingFetch(topic, partition, offset, isolation, leader.node_id, future)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        ahead: PendingFetch | None = None,
    ) -> FetchResult:
        """One Fetch of `partition` from `offset`, from its leader, retried as the module says; `ahead`,
        a Fetch of that same offset sent by `fetch_ahead`, is its first attempt.

        The result's records are whole batches (a partial one at the end is cut off) exactly as the
        broker sent them. Raises `OffsetOutOfRangeError` with the log's bounds."""
        import kafka.errors as Errors

        deadline = self._deadline()
        name = f"{topic}-{partition}"
        if ahead is not None and (ahead.topic, ahead.partition, ahead.offset, ahead.isolation) != (
            topic,
            partition,
            offset,
            isolation,
        ):
            ahead = None  # asked ahead for something else: its answer is dropped

        def attempt() -> FetchResult:
            nonlocal ahead
            if ahead is not None:
                node_id, sent = ahead.node_id, ahead.future
                ahead = None
            else:
                leader = self._leader(topic, partition, deadline)
                node_id, sent = leader.node_id, None
                request = fetch_request(
                    topic, partition, offset, leader.leader_epoch, isolation, self.settings
                )
            while True:
                if sent is not None:
                    response, sent = self._conn.collect(node_id, sent, deadline), None
                else:
                    response = self._conn.request(node_id, request, deadline)
                try:
                    result = parse_fetch(response, topic, partition)
                except CorruptRecordError as exc:
                    raise WireError(
                        f"{name}: corrupt records from the Kafka brokers {self.servers}: {exc}"
                    ) from None
                if result is not None:
                    break
                if not getattr(response, "throttle_time_ms", 0):
                    raise Errors.UnknownTopicOrPartitionError(name)
                # throttled: an answer without data; the next request waits the throttle out first
                leader = self._leader(topic, partition, deadline)
                request = fetch_request(
                    topic, partition, offset, leader.leader_epoch, isolation, self.settings
                )
            self.stats.fetches += 1
            error = Errors.for_code(result.error_code)
            if error is Errors.OffsetOutOfRangeError:
                raise self._out_of_range(topic, partition, offset)
            if error is not Errors.NoError:
                raise error(name)
            self.stats.record_bytes += len(result.records)
            self.stats.trimmed_bytes += result.trimmed
            return result

        return self._retrying(f"{name}: fetch at offset {offset}", topic, deadline, attempt)

    def _out_of_range(self, topic: str, partition: int, offset: int) -> OffsetOutOfRangeError:
        bounds = self.list_offsets(topic, {partition: EARLIEST})
        end = self.list_offsets(topic, {partition: LATEST})
        start, stop = bounds.get(partition), end.get(partition)
        log.info("%s-%d: offset %d out of range (log %s..%s)", topic, partition, offset, start, stop)
        return OffsetOutOfRangeError(topic, partition, offset, start or 0, stop or 0)

    def wait(self, ms: float) -> None:
        """Let `ms` pass while serving the connections (a reader backing off)."""
        self._conn.wait(ms)

    def __repr__(self) -> str:
        return f"BrokerWire({self.servers}, {self.settings.security_protocol.value})"
