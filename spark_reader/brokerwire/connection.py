"""The connections to the brokers: kafka-python's network client, used for its protocol layer only.

Why kafka-python (3.x) and not wire code of our own: its network client (`kafka.net.compat.KafkaNetClient`,
3.x's successor of 2.x's `kafka.client_async.KafkaClient`, what its own consumer uses) does everything a
client must do before the first Fetch, and does it as the Java client does: ApiVersions negotiation on
every connection (each request goes out at the highest version both sides know, within the bounds a
request sets), SASL PLAIN and SCRAM-SHA-256/512 (with KIP-368 re-authentication), TLS, reconnect
back-off, per-request timeouts, correlation ids, and KIP-219 throttling (a connection told to wait by a
quota pauses itself). Its protocol classes (3.x: `kafka.protocol.consumer.FetchRequest`,
`ListOffsetsRequest`, `kafka.protocol.metadata.MetadataRequest`) are generated from Kafka's own JSON
message schemas, and a Fetch response's `records` field is decoded as what the schema says it is, bytes:
the response is copied twice after the socket, into its frame and into `records` (memcpy, per response;
`spark_reader.brokerwire.transport` keeps kafka-python's decoder from copying the frame again), never
turned into a Python object per record (its consumer parses records later, in `kafka.record`, which
this layer never calls). So it is used: a maintained client, where ours would re-implement SASL, TLS
and version negotiation; what is ours is above it (which request, when, and what an error means:
`spark_reader.brokerwire.client`) and the few places below.

What kafka-python does not do for us, and so is done here: it blocks nowhere (an event loop driven by
`poll`), so `request` drives the loop until the answer or the deadline; a throttled connection refuses
requests until the throttle ends, so `request` waits that out first instead of failing; its DEBUG
logging would print SASL frames (`spark_reader.brokerwire.redact`); and its socket reads drop a
broker's last answer when the broker closes right after it, which is how a failed SASL authentication
ends (`spark_reader.brokerwire.transport`: the one part of its connection replaced, over a private
method of kafka-python 3.0.x).

No I/O thread is started: the loop runs in the caller's thread, only while a request is awaited. The
reader still overlaps the network with its decoding: `send_now` sends the next Fetch before the current
response is decoded, and the kernel's socket buffer takes the answer meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from spark_reader.brokerwire import redact
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.brokerwire.stats import WireStats

log = logging.getLogger(__name__)


class Deadline:
    """A point in time (monotonic) an operation must end by; `remaining_ms` is never negative."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self._at = time.monotonic() + timeout_ms / 1000

    def remaining_ms(self) -> int:
        return max(0, int((self._at - time.monotonic()) * 1000))

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self._at


class WireConnection:
    """kafka-python's network client for one set of brokers; `request` sends one request and waits."""

    def __init__(self, settings: WireSettings, stats: WireStats) -> None:
        from kafka.net.compat import KafkaNetClient
        from kafka.net.selector import NetworkSelector

        from spark_reader.brokerwire.transport import WireConnectionManager

        redact.install()
        self.settings = settings
        self.stats = stats
        configs = settings.client_configs()
        net = NetworkSelector(**configs)
        self._manager = WireConnectionManager(net, **configs)
        self._client = KafkaNetClient(net=net, manager=self._manager)
        self._bootstrapped = False

    @property
    def cluster(self) -> Any:  # noqa: ANN401 - kafka.cluster.ClusterMetadata
        """kafka-python's view of the cluster: the brokers' addresses by node id."""
        return self._client.cluster

    @property
    def bootstrapped(self) -> bool:
        """Whether a bootstrap server answered (the brokers were reached at least once)."""
        return self._bootstrapped

    def _raise_fatal(self) -> None:
        if self._manager.fatal is not None:
            raise self._manager.fatal

    def bootstrap(self, deadline: Deadline) -> None:
        """Connect to a bootstrap server (ApiVersions, SASL) and learn the brokers (its first Metadata).

        kafka-python's bootstrap would retry a refused password until its timeout: the loop is driven
        here and stops at the first failure no retry can mend."""
        from kafka.errors import KafkaTimeoutError

        if self._bootstrapped:
            return
        future = self._manager.bootstrap_async(timeout_ms=max(1, deadline.remaining_ms()))
        while not future.is_done:
            self._client.poll(timeout_ms=min(100, max(1, deadline.remaining_ms())), future=future)
            self._raise_fatal()
            if deadline.expired and not future.is_done:
                last = self._manager.last_failure
                raise KafkaTimeoutError(
                    f"no bootstrap server answered; the last connection: {last}"
                    if last is not None
                    else "no bootstrap server answered"
                )
        if future.failed():
            raise future.exception
        self._bootstrapped = True

    def any_node(self) -> Any:  # noqa: ANN401 - a node id (int, or kafka-python's bootstrap id)
        """The node with the fewest requests in flight (a bootstrap server before the first Metadata)."""
        return self._client.least_loaded_node(bootstrap_fallback=True)

    def wait(self, ms: float) -> None:
        """Let `ms` pass while serving the connections (a back-off or a throttle)."""
        end = time.monotonic() + ms / 1000
        while (left := end - time.monotonic()) > 0:
            self._client.poll(timeout_ms=left * 1000)

    def request(self, node_id: Any, request: Any, deadline: Deadline) -> Any:  # noqa: ANN401
        """Send `request` to `node_id` and return its response; raises kafka-python's errors.

        Waits out a throttle the broker asked for first (KIP-219: a client must not send before it ends),
        then waits for the connection (connect, ApiVersions, SASL), then for the answer, each bounded by
        `deadline` and the request by request.timeout.ms."""
        throttle = self._client.throttle_delay(node_id)
        if throttle > 0:
            log.debug("node %s throttled us: waiting %.0f ms before the next request", node_id, throttle)
            self.wait(min(throttle, deadline.remaining_ms()))
        try:
            self._client.await_ready(node_id, timeout_ms=max(1, deadline.remaining_ms()))
        finally:
            self._raise_fatal()
        return self.collect(node_id, self._client.send(node_id, request), deadline)

    def send_now(self, node_id: Any, request: Any) -> Any | None:  # noqa: ANN401
        """Send `request` without waiting, if the connection to `node_id` is up and not throttled; its
        future (for `collect`), or None when sending would mean waiting (the caller sends it later)."""
        if self._manager.fatal is not None or self._client.throttle_delay(node_id) > 0:
            return None
        if not self._client.is_ready(node_id):
            return None
        return self._client.send(node_id, request)

    def collect(self, node_id: Any, future: Any, deadline: Deadline) -> Any:  # noqa: ANN401
        """The response `future` (from `send_now` or `request`) brings, waiting for it as `request` does."""
        from kafka.errors import KafkaTimeoutError

        wait_ms = min(deadline.remaining_ms(), self.settings.request_timeout_ms + 1000)
        self._client.poll(timeout_ms=max(1, wait_ms), future=future)
        if not future.is_done:
            raise KafkaTimeoutError(f"no answer from node {node_id} within {wait_ms} ms")
        if future.failed():
            raise future.exception
        response = future.value
        self.stats.requests += 1
        throttle_ms = getattr(response, "throttle_time_ms", 0) or 0
        if throttle_ms > 0:
            self.stats.throttle_ms += throttle_ms
        return response

    def versions(self) -> dict[str, int]:
        """The negotiated versions of the requests this layer sends (after `bootstrap`)."""
        from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
        from kafka.protocol.metadata import MetadataRequest

        from spark_reader.brokerwire.fetch import FETCH_MAX_VERSION

        return {
            "Metadata": self._client.api_version(MetadataRequest, max_version=MetadataRequest.max_version),
            "ListOffsets": self._client.api_version(
                ListOffsetsRequest, max_version=ListOffsetsRequest.max_version
            ),
            "Fetch": self._client.api_version(FetchRequest, max_version=FETCH_MAX_VERSION),
        }

    def reusable(self) -> bool:
        """Whether another client may take this connection over (`spark_reader.brokerwire.pool`): it
        reached the brokers, no error made it unusable, no request of its own is still in flight, and
        each of its sockets is still open once what they hold is read (a broker that closed one, or
        stopped, is noticed here)."""
        if not self._bootstrapped or self._manager.fatal is not None:
            return False
        if self._client.in_flight_request_count():
            return False
        self._client.poll(timeout_ms=0)
        conns = self._manager.open_connections()
        return bool(conns) and all(c.connected for c in conns) and not self._client.in_flight_request_count()

    def close(self) -> None:
        self._client.close()
