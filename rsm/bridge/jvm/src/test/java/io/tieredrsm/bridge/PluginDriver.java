package io.tieredrsm.bridge;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

/**
 * Test driver: drives {@link BridgeRemoteStorageManager} as the broker would, one command per stdin line,
 * one JSON answer per stdout line. Used by tests/broker/test_bridge_plugin.py (no broker needed).
 *
 * <pre>
 * configure PROPS_FILE          keys as Kafka passes them (rsm.config. already stripped)
 * segment JSON                  {"log","index","timeindex","txnindex"|null,"snapshot","epochs_file","start","end","topic","partition"}
 * copy | delete | health | close
 * fetch START [END]             reads everything: {"length","sha256"}
 * fetch_partial START N         reads N bytes, then closes the stream early
 * open START N                  reads N bytes and keeps the stream open (for "rest")
 * rest                          reads the open stream to its end: {"length","sha256"} or the exception
 * index TYPE
 * plugin_metrics                what a broker does for a Monitorable plugin: withPluginMetrics (JMX under kafka.server)
 * jmx PATTERN                   every attribute of the platform MBeans matching an ObjectName pattern
 * </pre>
 */
public final class PluginDriver {
    private PluginDriver() {
    }

    public static void main(String[] args) throws Exception {
        BridgeRemoteStorageManager rsm = new BridgeRemoteStorageManager();
        RemoteLogSegmentMetadata metadata = null;
        LogSegmentData data = null;
        InputStream held = null;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ", 2);
            Map<String, Object> out = new LinkedHashMap<>();
            try {
                switch (w[0]) {
                    case "configure": {
                        Properties p = new Properties();
                        try (InputStream s = Files.newInputStream(Paths.get(w[1]))) {
                            p.load(s);
                        }
                        Map<String, Object> m = new HashMap<>();
                        p.forEach((k, v) -> m.put((String) k, v));
                        rsm.configure(m);
                        break;
                    }
                    case "segment": {
                        @SuppressWarnings("unchecked")
                        Map<String, Object> s = (Map<String, Object>) Json.parse(w[1]);
                        TopicIdPartition tip = new TopicIdPartition(
                                s.containsKey("topic_id") ? Uuid.fromString((String) s.get("topic_id")) : Uuid.randomUuid(),
                                new TopicPartition((String) s.get("topic"), ((Number) s.get("partition")).intValue()));
                        Path log = Paths.get((String) s.get("log"));
                        metadata = new RemoteLogSegmentMetadata(RemoteLogSegmentId.generateNew(tip),
                                ((Number) s.get("start")).longValue(), ((Number) s.get("end")).longValue(),
                                System.currentTimeMillis(), 1, System.currentTimeMillis(), (int) Files.size(log),
                                segmentLeaderEpochs(Paths.get((String) s.get("epochs_file")),
                                        ((Number) s.get("start")).longValue(), ((Number) s.get("end")).longValue()));
                        Object txn = s.get("txnindex");
                        data = new LogSegmentData(log, Paths.get((String) s.get("index")),
                                Paths.get((String) s.get("timeindex")),
                                txn == null ? Optional.empty() : Optional.of(Paths.get((String) txn)),
                                Paths.get((String) s.get("snapshot")),
                                ByteBuffer.wrap(Files.readAllBytes(Paths.get((String) s.get("epochs_file")))));
                        out.put("topic_id", tip.topicId().toString());
                        out.put("segment_id", metadata.remoteLogSegmentId().id().toString());
                        break;
                    }
                    case "copy": {
                        Optional<RemoteLogSegmentMetadata.CustomMetadata> custom = rsm.copyLogSegmentData(metadata, data);
                        out.put("custom_metadata_bytes", custom.map(c -> c.value().length).orElse(-1));
                        RemoteLogSegmentMetadata m = metadata;
                        metadata = new RemoteLogSegmentMetadata(m.remoteLogSegmentId(), m.startOffset(), m.endOffset(),
                                m.maxTimestampMs(), m.brokerId(), m.eventTimestampMs(), m.segmentSizeInBytes(), custom,
                                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, m.segmentLeaderEpochs());
                        break;
                    }
                    case "fetch": {
                        String[] a = w[1].split(" ");
                        InputStream s = a.length == 1 ? rsm.fetchLogSegment(metadata, Integer.parseInt(a[0]))
                                : rsm.fetchLogSegment(metadata, Integer.parseInt(a[0]), Integer.parseInt(a[1]));
                        digest(s, Long.MAX_VALUE, out);
                        break;
                    }
                    case "fetch_partial": {
                        String[] a = w[1].split(" ");
                        InputStream s = rsm.fetchLogSegment(metadata, Integer.parseInt(a[0]));
                        digest(s, Long.parseLong(a[1]), out);
                        break;
                    }
                    case "open": {
                        String[] a = w[1].split(" ");
                        held = rsm.fetchLogSegment(metadata, Integer.parseInt(a[0]));
                        byte[] buf = new byte[Integer.parseInt(a[1])];
                        int got = 0;
                        while (got < buf.length) {
                            int n = held.read(buf, got, buf.length - got);
                            if (n < 0) {
                                break;
                            }
                            got += n;
                        }
                        out.put("length", got);
                        break;
                    }
                    case "rest": {
                        InputStream s = held;
                        held = null;
                        try {
                            digest(s, Long.MAX_VALUE, out);
                        } finally {
                            s.close();
                        }
                        break;
                    }
                    case "fetch_concurrent": {
                        // N threads each read the whole segment at once; answers the distinct digests
                        int n = Integer.parseInt(w[1]);
                        RemoteLogSegmentMetadata m = metadata;
                        java.util.Set<String> digests = java.util.concurrent.ConcurrentHashMap.newKeySet();
                        java.util.List<Throwable> errors = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
                        java.util.List<Thread> threads = new java.util.ArrayList<>();
                        for (int i = 0; i < n; i++) {
                            Thread t = new Thread(() -> {
                                try {
                                    Map<String, Object> r = new LinkedHashMap<>();
                                    digest(rsm.fetchLogSegment(m, 0), Long.MAX_VALUE, r);
                                    digests.add((String) r.get("sha256"));
                                } catch (Throwable e) {
                                    errors.add(e);
                                }
                            });
                            t.start();
                            threads.add(t);
                        }
                        for (Thread t : threads) {
                            t.join();
                        }
                        if (!errors.isEmpty()) {
                            throw new RuntimeException(errors.get(0));
                        }
                        out.put("digests", new java.util.ArrayList<>(digests));
                        break;
                    }
                    case "index":
                        digest(rsm.fetchIndex(metadata, IndexType.valueOf(w[1])), Long.MAX_VALUE, out);
                        break;
                    case "delete":
                        rsm.deleteLogSegmentData(metadata);
                        break;
                    case "health":
                        out.putAll(rsm.health());
                        out.put("restarts", rsm.bridgeRestarts());
                        break;
                    case "plugin_metrics": {
                        // what the broker does with a Monitorable plugin on its classpath (KIP-877): its own
                        // Metrics, reported to JMX under kafka.server, wrapped the way RemoteLogManager does
                        org.apache.kafka.common.metrics.Metrics brokerMetrics = new org.apache.kafka.common.metrics.Metrics(
                                new org.apache.kafka.common.metrics.MetricConfig(),
                                java.util.List.of(new org.apache.kafka.common.metrics.JmxReporter()),
                                org.apache.kafka.common.utils.Time.SYSTEM,
                                new org.apache.kafka.common.metrics.KafkaMetricsContext("kafka.server"));
                        // (Plugin arrived in Kafka 4.1; the driver is compiled against the plugin's oldest API)
                        Class.forName("org.apache.kafka.common.internals.Plugin")
                                .getMethod("wrapInstance", Object.class, org.apache.kafka.common.metrics.Metrics.class,
                                        String.class)
                                .invoke(null, rsm, brokerMetrics, "remote.log.storage.manager.class.name");
                        break;
                    }
                    case "jmx": {
                        // every attribute of the MBeans matching the pattern: {"<object name>:<attribute>": value}
                        javax.management.MBeanServer server = java.lang.management.ManagementFactory.getPlatformMBeanServer();
                        Map<String, Object> values = new java.util.TreeMap<>();
                        // Kafka's JmxReporter re-registers an MBean each time a metric joins it, so a name listed
                        // here may be gone for a moment when read: skipped, as a scraper does (the next poll sees it)
                        for (javax.management.ObjectName name : server.queryNames(new javax.management.ObjectName(w[1]), null)) {
                            try {
                                for (javax.management.MBeanAttributeInfo a : server.getMBeanInfo(name).getAttributes()) {
                                    Object v = server.getAttribute(name, a.getName());
                                    values.put(name + ":" + a.getName(),
                                            v instanceof Double && (((Double) v).isNaN() || ((Double) v).isInfinite()) ? null : v);
                                }
                            } catch (javax.management.InstanceNotFoundException reregistered) {
                                continue;
                            }
                        }
                        out.put("values", values);
                        break;
                    }
                    case "close":
                        rsm.close();
                        break;
                    default:
                        throw new IllegalArgumentException("unknown command " + w[0]);
                }
                out.put("ok", true);
            } catch (Exception e) {
                out.put("ok", false);
                out.put("exception", e.getClass().getSimpleName());
                out.put("message", String.valueOf(e.getMessage()));
                java.io.StringWriter trace = new java.io.StringWriter();
                e.printStackTrace(new java.io.PrintWriter(trace));
                out.put("trace", trace.toString());
            }
            System.out.println("@@ " + Json.write(out));
            System.out.flush();
        }
    }

    /**
     * The segment's leader epochs as Kafka's RemoteLogManager hands them to a copy: the checkpoint's entries
     * in [start, end], the one in force at start moved to start (LeaderEpochFileCache.epochEntriesInRange).
     * The copy refuses a batch of any other epoch; a file that is no checkpoint gives epoch 0 from start.
     */
    static Map<Integer, Long> segmentLeaderEpochs(Path checkpoint, long start, long end) {
        Map<Integer, Long> out = new LinkedHashMap<>();
        try {
            var lines = Files.readAllLines(checkpoint, StandardCharsets.UTF_8);
            int count = Integer.parseInt(lines.get(1).trim());
            for (String line : lines.subList(2, 2 + count)) {
                String[] f = line.trim().split("\\s+");
                int epoch = Integer.parseInt(f[0]);
                long offset = Long.parseLong(f[1]);
                if (offset <= start) {
                    out.clear();
                    out.put(epoch, start);
                } else if (offset <= end) {
                    out.put(epoch, offset);
                }
            }
        } catch (Exception e) {
            out.clear();
        }
        return out.isEmpty() ? Map.of(0, start) : out;
    }

    private static void digest(InputStream s, long max, Map<String, Object> out) throws Exception {
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        byte[] buf = new byte[8192];
        long total = 0;
        try (s) {
            while (total < max) {
                int n = s.read(buf, 0, (int) Math.min(buf.length, max - total));
                if (n < 0) {
                    break;
                }
                md.update(buf, 0, n);
                total += n;
            }
        }
        out.put("length", total);
        out.put("sha256", HexFormat.of().formatHex(md.digest()));
    }
}
