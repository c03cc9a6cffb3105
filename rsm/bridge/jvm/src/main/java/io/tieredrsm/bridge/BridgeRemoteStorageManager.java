package io.tieredrsm.bridge;

import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;

/**
 * The bridge RemoteStorageManager for Kafka 4.1 and later: {@link PortableBridgeRemoteStorageManager} plus
 * KIP-877's {@link Monitorable}, so that a broker that loads the plugin from its own classpath hands it its
 * metrics registry ({@link PluginMetrics}) and the plugin's metrics go there (see {@link BridgeMetrics}).
 *
 * <p>{@code Monitorable} arrived in Kafka 4.1: a Kafka 3.9 or 4.0 broker cannot load this class (the JVM
 * resolves an interface when it loads the class that implements it, so no run-time check can help). Those
 * brokers load {@link PortableBridgeRemoteStorageManager} from the same jar, whose metrics register
 * themselves in the broker JVM's JMX under the same names.
 */
public class BridgeRemoteStorageManager extends PortableBridgeRemoteStorageManager implements Monitorable {
    private PluginMetrics pluginMetrics;

    /** Kafka hands its metrics registry to Monitorable plugins right after configure (KIP-877). */
    @Override
    public synchronized void withPluginMetrics(PluginMetrics pluginMetrics) {
        this.pluginMetrics = pluginMetrics;
        BridgeMetrics m = metrics();
        if (m != null) {
            m.attach(pluginMetrics);
        }
    }

    @Override
    void metricsCreated(BridgeMetrics created) {
        if (pluginMetrics != null) {
            created.attach(pluginMetrics);
        }
    }
}
