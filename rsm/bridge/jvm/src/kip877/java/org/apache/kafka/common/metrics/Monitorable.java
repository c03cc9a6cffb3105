package org.apache.kafka.common.metrics;

/**
 * Compile-time stand-in for Kafka 4.1's {@code Monitorable} (KIP-877): the plugin is compiled against Kafka
 * 3.9's API, which does not have it, and only {@code BridgeRemoteStorageManager} implements it. javac reads
 * this file from the source path ({@code -implicit:none}): no class file is made and none is in the jar, so
 * at run time the broker's own interface is the only one. Same signature as Kafka 4.1 to 4.4's.
 */
public interface Monitorable {
    void withPluginMetrics(PluginMetrics metrics);
}
