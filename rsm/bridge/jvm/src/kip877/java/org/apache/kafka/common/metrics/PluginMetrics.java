package org.apache.kafka.common.metrics;

import java.util.LinkedHashMap;

import org.apache.kafka.common.MetricName;

/**
 * Compile-time stand-in for Kafka 4.1's {@code PluginMetrics} (KIP-877), see {@link Monitorable}: never
 * compiled into a class file, never in the jar. Same signatures as Kafka 4.1 to 4.4's.
 */
public interface PluginMetrics {
    MetricName metricName(String name, String description, LinkedHashMap<String, String> tags);

    void addMetric(MetricName metricName, MetricValueProvider<?> metricValueProvider);

    void removeMetric(MetricName metricName);

    Sensor addSensor(String name);

    void removeSensor(String name);
}
