"""A three-node Kafka 4.4 KRaft cluster for tests: every node a broker and a controller, as operators run it.

Each node is a :class:`harness.kafka.KafkaBroker` (same JVM options, logs, formatting, start/stop) with a
static ``controller.quorum.voters`` naming every node, one cluster id formatted on all, replication factor
``len(nodes)`` for the internal topics, and its own work dir, ports and (when given) its own per-node
properties, e.g. the bridge's socket path::

    cluster = KafkaCluster(tmp_path, extra_props=tiered_storage_props(...), node_props=lambda n: {...})
    cluster.start()                      # launches all nodes, then waits for each and for 3 registered brokers
    cluster.leader("t", 0)               # node id leading t-0
    cluster.kill(node_id)                # kill -9 of the node's JVM (and the bridge it started)
    cluster.restart(node_id)             # same ports and data
    cluster.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.kafka import DEFAULT_JVM_OPTS, KafkaBroker, new_cluster_id
from harness.maven import JavaBuild
from harness.ports import LOOPBACK, free_ports

log = logging.getLogger(__name__)

CLUSTER_JVM_OPTS: tuple[str, ...] = tuple(
    "-Xmx384m" if opt.startswith("-Xmx") else "-Xms96m" if opt.startswith("-Xms") else opt
    for opt in DEFAULT_JVM_OPTS
)


class ClusterNode(KafkaBroker):
    """One node of a :class:`KafkaCluster`: a KafkaBroker whose quorum is the whole cluster."""

    def __init__(self, cluster: KafkaCluster, work_dir: Path, node_id: int, **kwargs: Any) -> None:
        super().__init__(work_dir, node_id=node_id, **kwargs)
        self.cluster = cluster
        self.cluster_id = cluster.cluster_id
        self.replication_factor = len(cluster.node_ids)

    def _quorum_voters(self) -> str:
        return self.cluster.quorum_voters

    def __repr__(self) -> str:
        state = f"running on {self.bootstrap_servers}" if self.is_running() else "stopped"
        return f"ClusterNode({self.node_id}, {state})"


class KafkaCluster:
    """``size`` KRaft nodes (broker+controller each) on loopback ports; all share ``extra_props``."""

    def __init__(
        self,
        work_dir: Path,
        size: int = 3,
        extra_props: Mapping[str, str] | None = None,
        extra_classpath: Sequence[Path] = (),
        *,
        node_props: Callable[[ClusterNode], Mapping[str, str]] | None = None,
        java_build: JavaBuild | None = None,
        jvm_opts: Sequence[str] = CLUSTER_JVM_OPTS,
        extra_env: Mapping[str, str] | None = None,
        start_timeout: float = 180.0,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.node_ids = list(range(1, size + 1))
        self.cluster_id = new_cluster_id()
        ports = free_ports(2 * size)
        self.nodes: dict[int, ClusterNode] = {}
        for i, node_id in enumerate(self.node_ids):
            node = ClusterNode(
                self,
                self.work_dir / f"node-{node_id}",
                node_id,
                extra_props=extra_props,
                extra_classpath=extra_classpath,
                java_build=java_build,
                jvm_opts=jvm_opts,
                extra_env=extra_env,
                start_timeout=start_timeout,
            )
            node.port, node.controller_port = ports[2 * i], ports[2 * i + 1]
            self.nodes[node_id] = node
        for node in self.nodes.values():  # per-node properties may name every node's address
            node.extra_props.update(node_props(node) if node_props else {})

    # ------------------------------------------------------------------ addresses
    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self.nodes.values())

    @property
    def bootstrap_servers(self) -> str:
        """Every node's PLAINTEXT address (clients find the live ones)."""
        return ",".join(f"{LOOPBACK}:{n.port}" for n in self.nodes.values())

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id]

    def running(self) -> list[ClusterNode]:
        return [n for n in self.nodes.values() if n.is_running()]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KafkaCluster:
        """Launch every node, then wait for each to answer and for all brokers to be registered."""
        try:
            for node in self.nodes.values():
                node.launch()
            for node in self.nodes.values():
                node.wait_until_ready()
            self.wait_for_brokers(len(self.nodes))
        except BaseException:
            self.stop()
            raise
        log.info("kafka cluster up: %s", self.bootstrap_servers)
        return self

    def stop(self) -> None:
        """Stop every node at once: one by one, the last nodes wait for a quorum that is gone."""
        threads = [
            threading.Thread(target=n.stop, daemon=True) for n in self.nodes.values() if n.is_running()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for node in self.nodes.values():  # a node whose thread failed (stop() is idempotent)
            node.stop()

    def kill(self, node_id: int) -> None:
        """kill -9 of the node: SIGKILL to its JVM and the bridge it started (one process group)."""
        self.nodes[node_id].kill()

    def restart(self, node_id: int) -> ClusterNode:
        """(Re)start a node on its ports and data; a killed node recovers its logs."""
        node = self.nodes[node_id]
        node.stop()
        node.start()
        return node

    def admin_client(self, **kwargs: Any) -> Any:
        """A kafka-python ``KafkaAdminClient`` bootstrapped from the running nodes (close it when done)."""
        from kafka import KafkaAdminClient  # noqa: PLC0415

        kwargs.setdefault("request_timeout_ms", 30_000)
        servers = ",".join(f"{LOOPBACK}:{n.port}" for n in self.running())
        return KafkaAdminClient(bootstrap_servers=servers, **kwargs)

    def wait_for_brokers(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            admin = self.admin_client(request_timeout_ms=5000)
            try:
                seen = admin.describe_cluster().get("brokers") or []
                if len(seen) >= count:
                    return
            except Exception as exc:  # noqa: BLE001 - not ready yet
                seen = f"{type(exc).__name__}: {exc}"
            finally:
                admin.close()
            time.sleep(0.5)
        raise TimeoutError(f"{count} brokers not registered after {timeout:.0f}s (last: {seen})")

    # ------------------------------------------------------------------ topics
    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Create ``topic`` (replication factor = cluster size unless given); waits for every leader."""
        node = self.running()[0]
        return node.create_topic(
            topic, partitions, configs, timeout=timeout, replication_factor=replication_factor
        )

    def describe(self, topic: str) -> dict[int, dict[str, Any]]:
        """partition -> kafka-python's description (``leader_id``, ``replica_nodes``, ``isr_nodes``, ...)."""
        admin = self.admin_client()
        try:
            (description,) = admin.describe_topics([topic])
        finally:
            admin.close()
        parts = description.get("partitions") or []
        return {int(p.get("partition_index", p.get("partition", -1))): dict(p) for p in parts}

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic-partition`` (-1 while it has none)."""
        part = self.describe(topic).get(partition) or {}
        return int(part.get("leader_id", part.get("leader", -1)))

    def wait_for_leader(
        self, topic: str, partition: int, *, not_on: int | None = None, timeout: float = 60.0
    ) -> int:
        """Wait until ``topic-partition`` has a leader (other than ``not_on``); its node id."""
        deadline = time.monotonic() + timeout
        leader = -1
        while time.monotonic() < deadline:
            try:
                leader = self.leader(topic, partition)
            except Exception:  # noqa: BLE001 - a node going away answers errors for a moment
                leader = -1
            if leader >= 0 and leader != not_on:
                return leader
            time.sleep(0.3)
        raise TimeoutError(f"{topic}-{partition} has no leader other than {not_on} after {timeout:.0f}s")

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"=== node {n.node_id} ===\n{n.log_tail(lines)}" for n in self.nodes.values())

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaCluster({self.work_dir}, nodes={[repr(n) for n in self.nodes.values()]})"
