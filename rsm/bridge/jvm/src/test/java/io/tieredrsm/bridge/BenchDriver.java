package io.tieredrsm.bridge;

import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

/**
 * Benchmark driver for benchmarks/bridge.py: N threads fetch through the plugin (the broker's path) from a
 * running bridge and print one JSON line of figures.
 *
 * <pre>
 * BenchDriver PROPS_FILE SEGMENT_JSON THREADS FETCHES READ_BYTES(-1 = whole segment) SEED [WARMUP_SECONDS]
 *   stdin: "go" (one measured run, answered with a "@@ {json}" line) ... "quit"
 * </pre>
 */
public final class BenchDriver {
    private BenchDriver() {
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        try (InputStream s = Files.newInputStream(Paths.get(args[0]))) {
            p.load(s);
        }
        Map<String, Object> configs = new HashMap<>();
        p.forEach((k, v) -> configs.put((String) k, v));
        @SuppressWarnings("unchecked")
        Map<String, Object> seg = (Map<String, Object>) Json.parse(args[1]);
        int threads = Integer.parseInt(args[2]);
        int fetches = Integer.parseInt(args[3]);
        long readBytes = Long.parseLong(args[4]);
        long seed = Long.parseLong(args[5]);
        double warmupSeconds = args.length > 6 ? Double.parseDouble(args[6]) : 10.0;
        TopicIdPartition tip = new TopicIdPartition(Uuid.fromString((String) seg.get("topic_id")),
                new TopicPartition((String) seg.get("topic"), ((Number) seg.get("partition")).intValue()));
        int size = ((Number) seg.get("size")).intValue();
        Object custom = seg.get("custom_metadata");
        RemoteLogSegmentMetadata md = new RemoteLogSegmentMetadata(
                new RemoteLogSegmentId(tip, Uuid.fromString((String) seg.get("segment_id"))),
                ((Number) seg.get("start")).longValue(), ((Number) seg.get("end")).longValue(), 0L, 0, 0L, size,
                custom == null ? Optional.empty()
                        : Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(Base64.getDecoder().decode((String) custom))),
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Map.of(0, 0L));

        BridgeRemoteStorageManager rsm = new BridgeRemoteStorageManager();
        rsm.configure(configs);
        // the broker is a long-running JVM, so the figure to judge is the JIT-compiled steady state, not
        // the first seconds of compilation: on a loaded 2-core machine C2 needs several seconds of this
        // workload (measured: the plugin's CPU per GiB falls 5x over the first ~10 runs, then holds)
        long warmupEnd = System.nanoTime() + (long) (warmupSeconds * 1e9);
        int warmups = 0;
        do {
            run(rsm, md, size, threads, fetches, readBytes, seed + 1000 + warmups++);
        } while (System.nanoTime() - warmupEnd < 0);
        System.out.println("@@ready");
        System.out.flush();
        // one measured run per "go" line (the Python side interleaves them with its other modes, so a
        // spell of load on the shared machine hits every mode alike); "quit" or EOF ends
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        for (String line = in.readLine(); line != null && !line.equals("quit"); line = in.readLine()) {
            Map<String, Object> out = run(rsm, md, size, threads, fetches, readBytes, seed);
            System.out.println("@@ " + Json.write(out));
            System.out.flush();
        }
        rsm.close();
    }

    private static Map<String, Object> run(BridgeRemoteStorageManager rsm, RemoteLogSegmentMetadata md, int size,
                                           int threads, int fetches, long readBytes, long seed) throws Exception {
        Random rng = new Random(seed);
        List<long[]> plans = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int n = readBytes < 0 ? Math.max(1, fetches / 20) : fetches;
            long[] plan = new long[n];
            for (int i = 0; i < n; i++) {
                plan[i] = readBytes < 0 ? 0 : (long) (rng.nextDouble() * (size - readBytes));
            }
            plans.add(plan);
        }
        List<Double> latencies = Collections.synchronizedList(new ArrayList<>());
        AtomicLong moved = new AtomicLong();
        CyclicBarrier barrier = new CyclicBarrier(threads + 1);
        List<Thread> workers = new ArrayList<>();
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        for (long[] plan : plans) {
            Thread th = new Thread(() -> {
                // Kafka reads a remote fetch into one buffer of its fetch size (RemoteLogManager.read:
                // Utils.readFully into ByteBuffer.allocate(maxBytes)): each read asks for all that is left
                byte[] buf = new byte[1024 * 1024];
                try {
                    barrier.await();
                    for (long pos : plan) {
                        long t0 = System.nanoTime();
                        long total = 0;
                        try (InputStream s = rsm.fetchLogSegment(md, (int) pos)) {
                            while (readBytes < 0 || total < readBytes) {
                                int want = readBytes < 0 ? buf.length : (int) Math.min(buf.length, readBytes - total);
                                int n = s.read(buf, 0, want);
                                if (n < 0) {
                                    break;
                                }
                                total += n;
                            }
                        }
                        latencies.add((System.nanoTime() - t0) / 1e6);
                        moved.addAndGet(total);
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            th.start();
            workers.add(th);
        }
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        barrier.await();
        long start = System.nanoTime();
        for (Thread th : workers) {
            th.join();
        }
        double wall = (System.nanoTime() - start) / 1e9;
        long cpu1 = os.getProcessCpuTime();
        if (!errors.isEmpty()) {
            throw new RuntimeException("fetch failed", errors.get(0));
        }
        List<Double> sorted = new ArrayList<>(latencies);
        Collections.sort(sorted);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("bytes", moved.get());
        out.put("wall_s", wall);
        out.put("mb_s", moved.get() / 1048576.0 / wall);
        out.put("p50_ms", sorted.get(sorted.size() / 2));
        out.put("p99_ms", sorted.get(Math.min(sorted.size() - 1, (int) (sorted.size() * 0.99))));
        out.put("client_cpu_s", (cpu1 - cpu0) / 1e9);
        return out;
    }
}
