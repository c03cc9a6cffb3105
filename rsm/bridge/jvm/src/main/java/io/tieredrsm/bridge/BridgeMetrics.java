package io.tieredrsm.bridge;

import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.MetricValueProvider;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.Max;
import org.apache.kafka.common.metrics.stats.Meter;
import org.apache.kafka.common.utils.Time;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The plugin's metrics in the broker's metrics registry, so they show in the broker's JMX (and whatever
 * scrapes it) beside Kafka's own {@code RemoteLogManager} metrics.
 *
 * <p>Where they are registered: Kafka 4.1+ hands a plugin that implements {@code Monitorable} (KIP-877,
 * {@link BridgeRemoteStorageManager}) a {@link PluginMetrics} right after {@code configure}; its metrics are named
 * {@code kafka.server:type=plugins,config=remote.log.storage.manager.class.name,class=BridgeRemoteStorageManager,<tags>}.
 * Kafka 4.4 does that only when the plugin is on the broker's classpath: with
 * {@code remote.log.storage.manager.class.path} set, the broker wraps the plugin in a
 * {@code ClassLoaderAwareRemoteStorageManager}, which is not {@code Monitorable}, and never calls us. Then
 * (no {@code PluginMetrics} by the first poll) the plugin registers the same names itself: Kafka's metrics
 * library with its {@link JmxReporter} under the broker's JMX domain {@code kafka.server}, in the broker
 * JVM's platform MBean server, so both set-ups show identical MBeans. So does
 * {@link PortableBridgeRemoteStorageManager} (not {@code Monitorable}, for Kafka 3.9 and 4.0), under its own
 * class name. This class refers to {@code PluginMetrics} only in {@link #attach}, which only that subclass
 * calls: a broker without KIP-877 never resolves it.
 *
 * <p>What: every figure of the bridge's {@code metrics} snapshot (the RSM's copy, fetch, delete, cache,
 * error, validation and S3 figures per topic and partition, see rsm/metrics.py), polled every
 * {@code bridge.metrics.poll.ms} (5000; 0 = off) and read from the last poll; cumulative ones
 * ({@code -total}) are carried across bridge restarts. And the plugin's own: {@code bridge-restarts-total},
 * {@code bridge-connections}, {@code bridge-in-flight-requests}, {@code bridge-queue-time-avg/-max} (ms waiting
 * for a pooled connection), {@code bridge-requests-rate/-total}, {@code bridge-request-errors-rate/-total}
 * (calls whose bridge connection failed) and {@code bridge-up} (1 when the last poll answered).
 */
final class BridgeMetrics implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(BridgeMetrics.class);
    /** PluginMetrics' group and the tags Kafka gives a plugin's metrics (org.apache.kafka.common.internals.Plugin). */
    static final String GROUP = "plugins";
    static final String CONFIG_TAG = "remote.log.storage.manager.class.name";
    static final String JMX_DOMAIN = "kafka.server";

    /** Where metrics go: the broker's PluginMetrics, or our own registry reported to JMX. */
    private interface Registry extends AutoCloseable {
        MetricName name(String name, String doc, Map<String, String> tags);

        void add(MetricName name, MetricValueProvider<?> value);

        @Override
        void close();
    }

    private static final class PluginRegistry implements Registry {
        private final PluginMetrics metrics;

        PluginRegistry(PluginMetrics metrics) {
            this.metrics = metrics;
        }

        public MetricName name(String name, String doc, Map<String, String> tags) {
            return metrics.metricName(name, doc, new LinkedHashMap<>(tags));
        }

        public void add(MetricName name, MetricValueProvider<?> value) {
            metrics.addMetric(name, value);
        }

        public void close() {
            // the broker closes the PluginMetrics it gave, with the plugin
        }
    }

    private static final class OwnRegistry implements Registry {
        private final Metrics metrics = new Metrics(new MetricConfig(), List.of(new JmxReporter()), Time.SYSTEM,
                new KafkaMetricsContext(JMX_DOMAIN));
        private final Map<String, String> pluginTags = new LinkedHashMap<>();

        OwnRegistry(String className) {
            pluginTags.put("config", CONFIG_TAG);
            pluginTags.put("class", className);
        }

        public MetricName name(String name, String doc, Map<String, String> tags) {
            Map<String, String> all = new LinkedHashMap<>(pluginTags);
            all.putAll(tags);
            return metrics.metricName(name, GROUP, doc, all);
        }

        public void add(MetricName name, MetricValueProvider<?> value) {
            metrics.addMetric(name, value);
        }

        public void close() {
            metrics.close();
        }
    }

    private final PortableBridgeRemoteStorageManager owner;
    private final long pollMs;
    private final String className;
    private ScheduledExecutorService poller;
    private Registry registry;
    private boolean closed;

    /** Series registered so far (name + tags) and their values: the bridge's last, and what dead bridges left. */
    private final Set<String> registered = ConcurrentHashMap.newKeySet();
    private final Map<String, Double> last = new ConcurrentHashMap<>();
    private final Map<String, Double> carried = new ConcurrentHashMap<>();
    private final Set<String> counters = ConcurrentHashMap.newKeySet();
    private volatile Object lastPid;
    private volatile long lastPollOkMs;
    private volatile int pidChanges;
    private volatile boolean warnedUnsupported;

    /**
     * The plugin's own windowed figures, computed by Kafka's stats from the first call on (before the broker's
     * registry is known) and shown through gauges in whichever registry is chosen. No reporter: not in JMX.
     */
    private final Metrics own = new Metrics();
    private final Sensor queueTime = own.sensor("queue-time");
    private final Sensor requests = own.sensor("requests");
    private final Sensor requestErrors = own.sensor("request-errors");
    private static final String[][] OWN_STATS = {
        {"bridge-queue-time-avg", "ms a call waited for a pooled connection (avg over 30-60 s)"},
        {"bridge-queue-time-max", "ms a call waited for a pooled connection (max over 30-60 s)"},
        {"bridge-requests-rate", "requests to the bridge per second (the metrics polls not counted)"},
        {"bridge-requests-total", "requests to the bridge (the metrics polls not counted)"},
        {"bridge-request-errors-rate", "calls whose bridge connection failed, per second"},
        {"bridge-request-errors-total", "calls whose bridge connection failed"},
    };

    BridgeMetrics(PortableBridgeRemoteStorageManager owner, long pollMs) {
        this.owner = owner;
        this.pollMs = pollMs;
        this.className = owner.getClass().getSimpleName();
        queueTime.add(ownName(OWN_STATS[0][0]), new Avg());
        queueTime.add(ownName(OWN_STATS[1][0]), new Max());
        requests.add(new Meter(ownName(OWN_STATS[2][0]), ownName(OWN_STATS[3][0])));
        requestErrors.add(new Meter(ownName(OWN_STATS[4][0]), ownName(OWN_STATS[5][0])));
    }

    private MetricName ownName(String name) {
        return own.metricName(name, "rsm-bridge-plugin");
    }

    /** Starts polling the bridge; the first poll, a second from now, also decides where metrics go. */
    synchronized void start() {
        if (pollMs <= 0 || poller != null) {
            return;
        }
        poller = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "rsm-bridge-metrics");
            t.setDaemon(true);
            return t;
        });
        poller.scheduleWithFixedDelay(this::pollQuietly, Math.min(1000, pollMs), pollMs, TimeUnit.MILLISECONDS);
    }

    /** The broker's PluginMetrics (Monitorable.withPluginMetrics): everything is registered there from now on. */
    synchronized void attach(PluginMetrics pluginMetrics) {
        if (closed) {
            return;
        }
        if (registry != null) {
            registry.close(); // our own registry, chosen before the broker's arrived: its MBeans go
        }
        registered.clear();
        registry = new PluginRegistry(pluginMetrics);
        registerOwn();
        LOG.info("bridge RSM metrics registered with the broker's plugin metrics");
    }

    private synchronized Registry registry() {
        if (registry == null && !closed) {
            registry = new OwnRegistry(className);
            registerOwn();
            LOG.info("bridge RSM metrics registered in JMX under {}:type={} (the broker gave no PluginMetrics: the "
                    + "plugin is loaded through remote.log.storage.manager.class.path, or is not Monitorable)",
                    JMX_DOMAIN, GROUP);
        }
        return registry;
    }

    private void registerOwn() {
        Map<String, String> none = Map.of();
        gauge("bridge-restarts-total", "bridge processes restarted by the plugin (or seen replaced)", none,
                () -> (double) (owner.bridgeRestarts() + (owner.managesBridge() ? 0 : pidChanges)));
        gauge("bridge-connections", "open connections to the bridge (pooled and in use)", none,
                () -> (double) owner.openConnections());
        gauge("bridge-in-flight-requests", "requests to the bridge under way", none,
                () -> (double) owner.inFlightRequests());
        gauge("bridge-up", "1 when the bridge answered the last metrics poll", none,
                () -> System.currentTimeMillis() - lastPollOkMs <= 3 * pollMs ? 1.0 : 0.0);
        for (String[] stat : OWN_STATS) {
            org.apache.kafka.common.metrics.KafkaMetric m = own.metric(ownName(stat[0]));
            gauge(stat[0], stat[1], none, () -> {
                Object v = m.metricValue();
                return v instanceof Number ? ((Number) v).doubleValue() : Double.NaN;
            });
        }
    }

    private void gauge(String name, String doc, Map<String, String> tags, java.util.function.DoubleSupplier value) {
        registry.add(registry.name(name, doc, tags), (Gauge<Double>) (config, now) -> value.getAsDouble());
    }

    void queued(long nanos) {
        queueTime.record(nanos / 1e6);
    }

    void request() {
        requests.record();
    }

    void requestFailed() {
        requestErrors.record();
    }

    private void pollQuietly() {
        try {
            poll();
        } catch (Throwable e) { // never let the scheduled task die
            LOG.debug("bridge metrics poll failed: {}", e.toString());
        }
    }

    /** One poll: the bridge's snapshot into the registry (new series registered, values replaced). */
    @SuppressWarnings("unchecked")
    void poll() throws Exception {
        if (registry() == null) {
            return; // closed
        }
        Map<String, Object> answer;
        try {
            answer = owner.invoke("metrics", Map.of());
        } catch (org.apache.kafka.server.log.remote.storage.RemoteStorageException e) {
            if (String.valueOf(e.getMessage()).contains("UNSUPPORTED_OPERATION") && !warnedUnsupported) {
                warnedUnsupported = true;
                LOG.warn("the bridge does not answer the metrics operation (an older bridge): only the plugin's "
                        + "own metrics are shown");
            }
            throw e;
        }
        Object pid = answer.get("pid");
        Object counterNames = answer.get("counters");
        if (counterNames instanceof List) {
            for (Object c : (List<Object>) counterNames) {
                counters.add(String.valueOf(c));
            }
        }
        Map<String, Object> docs = answer.get("docs") instanceof Map ? (Map<String, Object>) answer.get("docs") : Map.of();
        synchronized (this) {
            if (lastPid != null && pid != null && !pid.equals(lastPid)) {
                // a new bridge: what the dead one counted stays counted
                for (Map.Entry<String, Double> e : last.entrySet()) {
                    if (counters.contains(nameOf(e.getKey()))) {
                        carried.merge(e.getKey(), e.getValue(), Double::sum);
                    }
                }
                last.clear();
                pidChanges++;
            }
            lastPid = pid;
            Map<String, Double> now = new ConcurrentHashMap<>();
            for (Object s : (List<Object>) answer.getOrDefault("series", List.of())) {
                Map<String, Object> series = (Map<String, Object>) s;
                Map<String, String> tags = new TreeMap<>();
                ((Map<String, Object>) series.getOrDefault("tags", Map.of())).forEach((k, v) -> tags.put(k, String.valueOf(v)));
                Map<String, Object> values = (Map<String, Object>) series.getOrDefault("values", Map.of());
                for (Map.Entry<String, Object> v : values.entrySet()) {
                    if (!(v.getValue() instanceof Number)) {
                        continue;
                    }
                    String key = key(v.getKey(), tags);
                    now.put(key, ((Number) v.getValue()).doubleValue());
                    if (!registered.contains(key) && registry != null) {
                        register(registry, key, v.getKey(), tags, String.valueOf(docs.getOrDefault(v.getKey(), v.getKey())));
                    }
                }
            }
            // gauges absent from this snapshot (no value now) read as NaN; counters keep what was carried
            Set<String> gone = new HashSet<>(last.keySet());
            gone.removeAll(now.keySet());
            for (String k : gone) {
                last.remove(k);
            }
            last.putAll(now);
            lastPollOkMs = System.currentTimeMillis();
        }
    }

    private void register(Registry reg, String key, String name, Map<String, String> tags, String doc) {
        // the broker's tags come first in the MBean name: topic, then partition, then the family's own
        Map<String, String> ordered = new LinkedHashMap<>();
        for (String t : new String[] {"topic", "partition"}) {
            if (tags.containsKey(t)) {
                ordered.put(t, tags.get(t));
            }
        }
        tags.forEach(ordered::putIfAbsent);
        try {
            reg.add(reg.name(name, doc, ordered), (Gauge<Double>) (config, now) -> value(key));
            registered.add(key);
        } catch (IllegalArgumentException e) { // registered by an earlier registry of this process
            registered.add(key);
            LOG.debug("metric {} not registered: {}", key, e.getMessage());
        }
    }

    private Double value(String key) {
        Double v = last.get(key);
        Double base = carried.get(key);
        if (v == null) { // not in the last snapshot (a new bridge has not recorded it yet): no rate, no value
            return base != null ? base : nameOf(key).endsWith("-rate") ? 0.0 : Double.NaN;
        }
        return base != null ? v + base : v;
    }

    /** The value a metric shows now (tests and the driver): name and tags as the bridge reports them. */
    Double valueOf(String name, Map<String, String> tags) {
        return value(key(name, new TreeMap<>(tags)));
    }

    private static String key(String name, Map<String, String> sortedTags) {
        StringBuilder sb = new StringBuilder(name);
        sortedTags.forEach((k, v) -> sb.append('|').append(k).append('=').append(v));
        return sb.toString();
    }

    private static String nameOf(String key) {
        int bar = key.indexOf('|');
        return bar < 0 ? key : key.substring(0, bar);
    }

    @Override
    public synchronized void close() {
        closed = true;
        if (poller != null) {
            poller.shutdownNow();
        }
        if (registry != null) {
            registry.close();
        }
        own.close();
    }
}
