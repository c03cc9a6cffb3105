package io.tieredrsm.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the running broker's Kafka API offers the plugin, probed once per JVM.
 *
 * <p>The plugin jar is compiled against Kafka 3.9's API, the oldest it supports, and the same jar runs on
 * every Kafka from 3.9 on. What arrived later is looked up here rather than linked, and what that changes on
 * this broker is logged once, on one line of the broker's log starting with {@link #LOG_PREFIX}:
 * <ul>
 *   <li>{@code RemoteLogSegmentMetadata.isTxnIdxEmpty()} (Kafka 4.0): before it the bridge is not told
 *       {@code txn_idx_empty}; nothing is lost, the Python RSM works it out itself when it copies a segment
 *       (whether the segment came with a transaction index).</li>
 *   <li>{@code org.apache.kafka.common.metrics.Monitorable} (KIP-877, Kafka 4.1): before it the broker hands
 *       plugins no metrics registry; the plugin's metrics register themselves in the broker JVM's JMX under
 *       the same names (see {@link BridgeMetrics}). The class implementing it, {@link BridgeRemoteStorageManager},
 *       cannot load there: those brokers name {@link PortableBridgeRemoteStorageManager}.</li>
 * </ul>
 */
final class KafkaApi {
    /** How the one compatibility line of the broker's log starts (tests/broker/test_kafka_versions.py reads it). */
    static final String LOG_PREFIX = "rsm bridge plugin compatibility: ";
    private static final Logger LOG = LoggerFactory.getLogger(KafkaApi.class);
    private static final MethodHandle TXN_IDX_EMPTY = txnIdxEmptyHandle();
    /** Whether the broker's Kafka has KIP-877 plugin metrics (Monitorable, PluginMetrics). */
    static final boolean MONITORABLE = present("org.apache.kafka.common.metrics.Monitorable");
    private static final AtomicBoolean LOGGED = new AtomicBoolean();

    private KafkaApi() {
    }

    private static MethodHandle txnIdxEmptyHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(RemoteLogSegmentMetadata.class, "isTxnIdxEmpty",
                    MethodType.methodType(boolean.class));
        } catch (NoSuchMethodException | IllegalAccessException e) {
            return null;
        }
    }

    private static boolean present(String className) {
        try {
            Class.forName(className, false, KafkaApi.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }

    /** The segment's {@code isTxnIdxEmpty()}, or null on a Kafka whose metadata does not have it (before 4.0). */
    static Boolean txnIdxEmpty(RemoteLogSegmentMetadata m) {
        if (TXN_IDX_EMPTY == null) {
            return null;
        }
        try {
            return (boolean) TXN_IDX_EMPTY.invokeExact(m);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException("RemoteLogSegmentMetadata.isTxnIdxEmpty failed: " + e, e);
        }
    }

    /** What this broker's API changes for {@code plugin}, one phrase each, without "; " (empty: nothing). */
    static List<String> adaptations(Class<?> plugin) {
        List<String> out = new ArrayList<>();
        if (TXN_IDX_EMPTY == null) {
            out.add("txn_idx_empty not sent (RemoteLogSegmentMetadata.isTxnIdxEmpty arrived in Kafka 4.0: "
                    + "the RSM finds an empty transaction index itself)");
        }
        if (!MONITORABLE) {
            out.add("metrics in the plugin's own JMX registry (KIP-877 plugin metrics arrived in Kafka 4.1)");
        } else if (!Kip877.isMonitorable(plugin)) {
            out.add("metrics in the plugin's own JMX registry (" + plugin.getSimpleName() + " is not Monitorable: "
                    + "name io.tieredrsm.bridge.BridgeRemoteStorageManager for the broker's plugin metrics)");
        }
        return out;
    }

    /**
     * The broker's Kafka version, from the {@code kafka/kafka-version.properties} of its kafka-clients jar (read
     * as a resource: the class that reads it moved to an internal package in Kafka 4.4).
     */
    static String kafkaVersion() {
        ClassLoader loader = RemoteLogSegmentMetadata.class.getClassLoader();
        try (InputStream in = loader == null ? null : loader.getResourceAsStream("kafka/kafka-version.properties")) {
            if (in == null) {
                return "unknown";
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown").trim();
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
    }

    /** Logs, once per JVM, what this broker's Kafka version changes for the plugin. */
    static void logOnce(Class<?> plugin) {
        if (!LOGGED.compareAndSet(false, true)) {
            return;
        }
        List<String> adapted = adaptations(plugin);
        LOG.info("{}Kafka {}, plugin class {}: {}", LOG_PREFIX, kafkaVersion(), plugin.getName(),
                adapted.isEmpty() ? "nothing adapted" : "adapted: " + String.join("; ", adapted));
    }

    /** Holds the only reference to KIP-877's interface: loaded only where {@link #MONITORABLE} is true. */
    private static final class Kip877 {
        static boolean isMonitorable(Class<?> plugin) {
            return org.apache.kafka.common.metrics.Monitorable.class.isAssignableFrom(plugin);
        }
    }
}
