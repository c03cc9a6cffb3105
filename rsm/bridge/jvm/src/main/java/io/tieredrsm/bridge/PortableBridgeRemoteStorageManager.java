package io.tieredrsm.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.LinkedBlockingDeque;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's RemoteStorageManager, implemented by forwarding every call to the Python bridge process
 * ({@code rsm bridge serve}) over a Unix domain socket. Segment files travel by path; fetched bytes come
 * back as a stream of frames read lazily by the returned InputStream.
 *
 * <p>This class loads on every Kafka from 3.9 on: it is compiled against Kafka 3.9's API and adapts at run
 * time to what the running broker's API offers ({@link KafkaApi}, logged once). Its subclass
 * {@link BridgeRemoteStorageManager} adds KIP-877's {@code Monitorable} (Kafka 4.1+), an interface that a
 * Kafka 3.9 or 4.0 broker cannot load: on those, configure
 * {@code remote.log.storage.manager.class.name=io.tieredrsm.bridge.PortableBridgeRemoteStorageManager}.
 *
 * <p>Configuration (broker properties, all under {@code rsm.config.}, which Kafka strips):
 * <ul>
 *   <li>{@code bridge.socket.path}: the socket (default {@code <java.io.tmpdir>/rsm-bridge-<broker.id>/bridge.sock})</li>
 *   <li>{@code bridge.command}: command that runs {@code rsm bridge serve} (default {@code rsm bridge serve});
 *       the plugin appends {@code --config F --socket S --parent-pid P}. Empty: connect to a bridge the
 *       operator runs.</li>
 *   <li>{@code bridge.config.file}: the properties file handed to the bridge (default: the plugin writes
 *       its rsm.config.* settings, owner-only, next to the socket)</li>
 *   <li>{@code bridge.request.timeout.ms} (300000): longest wait for one answer frame (a copy of a large
 *       segment to a slow store is one answer); a late answer fails the call and drops the connection</li>
 *   <li>{@code bridge.pool.size} (32), {@code bridge.startup.timeout.ms} (60000),
 *       {@code bridge.restart.backoff.ms} (200), {@code bridge.restart.backoff.max.ms} (30000),
 *       {@code bridge.log.file} (next to the socket)</li>
 *   <li>{@code bridge.admin.bootstrap.servers} and other {@code bridge.admin.*} client settings: where to read
 *       topic configs (describeConfigs) that are sent as the LogConfig of each call;
 *       {@code bridge.topic.config.ttl.ms} (30000)</li>
 *   <li>{@code bridge.metrics.poll.ms} (5000; 0 = off): how often the bridge's metrics are read into the
 *       broker's metrics registry (see {@link BridgeMetrics})</li>
 * </ul>
 * All other keys go to the Python RemoteStorageManager.
 */
public class PortableBridgeRemoteStorageManager implements RemoteStorageManager {
    private static final Logger LOG = LoggerFactory.getLogger(PortableBridgeRemoteStorageManager.class);
    /** A fetch's first answer: Kafka's default fetch size (max.partition.fetch.bytes, 1 MiB). */
    static final int FIRST_ANSWER_BYTES = 1024 * 1024;
    static final String CLIENT_NAME = "rsm-bridge-jvm/0.1.0";
    private Path socketPath;
    private BridgeProcess bridge;
    private TopicConfigCache topicConfigs;
    private Semaphore slots;
    private final LinkedBlockingDeque<BridgeConnection> idle = new LinkedBlockingDeque<>();
    private final AtomicInteger requestIds = new AtomicInteger();
    private volatile boolean closed;
    private long stopGraceMs = 15_000;
    private long requestTimeoutMs = 300_000;
    /** bridge.transport=shm: fetch answers through a shared-memory ring per connection (else socket frames). */
    private boolean shm = true;
    private int poolSize;
    /** What we register in the broker's JMX (see BridgeMetrics). */
    private volatile BridgeMetrics metrics;

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, String> all = new TreeMap<>();
        configs.forEach((k, v) -> {
            if (v != null) {
                all.put(k, String.valueOf(v));
            }
        });
        BridgeLaunch launch = BridgeLaunch.resolve(all);
        String brokerId = launch.brokerId();
        socketPath = launch.socketPath();
        poolSize = Integer.parseInt(all.getOrDefault("bridge.pool.size", "32"));
        slots = new Semaphore(poolSize);
        stopGraceMs = Long.parseLong(all.getOrDefault("bridge.shutdown.grace.ms", "10000")) + 5_000;
        requestTimeoutMs = Long.parseLong(all.getOrDefault("bridge.request.timeout.ms", "300000"));
        String transport = all.getOrDefault("bridge.transport", "shm").trim().toLowerCase(java.util.Locale.ROOT);
        if (!transport.equals("shm") && !transport.equals("socket")) {
            throw new IllegalArgumentException("bridge.transport=" + transport + ": expected shm or socket");
        }
        shm = transport.equals("shm");

        bridge = launch.process(CLIENT_NAME);

        Properties admin = new Properties();
        all.forEach((k, v) -> {
            if (k.startsWith("bridge.admin.")) {
                admin.put(k.substring("bridge.admin.".length()), v);
            }
        });
        if (admin.containsKey("bootstrap.servers")) {
            admin.putIfAbsent("client.id", "rsm-bridge-topic-configs-" + brokerId);
            topicConfigs = new TopicConfigCache(admin,
                    Long.parseLong(all.getOrDefault("bridge.topic.config.ttl.ms", "30000")),
                    Long.parseLong(all.getOrDefault("bridge.topic.config.timeout.ms", "10000")));
        }
        LOG.info("bridge RSM configured: socket {}, transport {}, command {}, pool {}, topic configs from {}",
                socketPath, transport, launch.describeCommand(), poolSize,
                topicConfigs == null ? "(none)" : admin.get("bootstrap.servers"));
        KafkaApi.logOnce(getClass());
        // Start (or find) the bridge now so a broken set-up shows at broker start, not at the first copy.
        try {
            bridge.ensureRunning();
        } catch (RemoteStorageException e) {
            LOG.error("the bridge is not available yet: {}", e.getMessage());
        }
        startMetrics(Long.parseLong(all.getOrDefault("bridge.metrics.poll.ms", "5000")));
    }

    private synchronized void startMetrics(long pollMs) {
        metrics = new BridgeMetrics(this, pollMs);
        metricsCreated(metrics);
        metrics.start();
    }

    /** Called with the plugin's metrics before they start (under this object's lock): a subclass's hook. */
    void metricsCreated(BridgeMetrics created) {
        // the portable plugin has nothing to add: its metrics choose their own registry (BridgeMetrics)
    }

    /** The plugin's metrics once configured (null before). */
    final BridgeMetrics metrics() {
        return metrics;
    }

    // ------------------------------------------------------------------------------------- pool

    private BridgeConnection borrow() throws RemoteStorageException {
        if (closed) {
            throw new RemoteStorageException("the bridge RSM is closed");
        }
        long waitStart = System.nanoTime();
        try {
            slots.acquire();
            BridgeMetrics m = metrics;
            if (m != null) {
                m.queued(System.nanoTime() - waitStart);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RemoteStorageException("interrupted while waiting for a bridge connection", e);
        }
        BridgeConnection c;
        while ((c = idle.pollFirst()) != null) {
            if (c.settle() && !c.retireDue() && !c.isStale()) {
                return c;
            }
            c.dispose();
        }
        try {
            return connect();
        } catch (RemoteStorageException | RuntimeException e) {
            slots.release();
            throw e;
        }
    }

    private BridgeConnection connect() throws RemoteStorageException {
        try {
            return new BridgeConnection(socketPath, CLIENT_NAME, requestTimeoutMs, shm);
        } catch (BridgeConnection.BusyException busy) {
            // alive but at bridge.max.connections (someone else holds connections): no restart
            throw new RemoteStorageException("cannot connect to the bridge at " + socketPath + ": " + busy.getMessage(),
                    busy);
        } catch (IOException first) {
            // nobody answers: the bridge died or was never started; (re)start it, then try once more
            discardIdle();
            bridge.ensureRunning();
            try {
                return new BridgeConnection(socketPath, CLIENT_NAME, requestTimeoutMs, shm);
            } catch (IOException e) {
                throw new RemoteStorageException("cannot connect to the bridge at " + socketPath + ": " + e, e);
            }
        }
    }

    private void discardIdle() {
        BridgeConnection c;
        while ((c = idle.pollFirst()) != null) {
            c.dispose();
        }
    }

    void release(BridgeConnection c) {
        if (!c.broken && !closed) {
            c.markIdle();
            idle.offerFirst(c);
        } else {
            c.dispose();
        }
        slots.release();
    }

    private int nextRequestId() {
        int id = requestIds.incrementAndGet() & 0x7fffffff;
        return id == 0 ? requestIds.incrementAndGet() & 0x7fffffff : id;
    }

    static RemoteStorageException mapError(Map<String, Object> header, String what) {
        String code = String.valueOf(header.get("code"));
        String message = what + ": " + header.get("message");
        if ("RESOURCE_NOT_FOUND".equals(code)) {
            return new RemoteResourceNotFoundException(message);
        }
        return new RemoteStorageException(message + " [" + code + "]");
    }

    /** One unary call: REQUEST, then RESPONSE or ERROR. A lost connection fails the call; Kafka retries. */
    private Map<String, Object> call(String op, Map<String, Object> header, byte[] payload, String what)
            throws RemoteStorageException {
        counted(op, false);
        BridgeConnection c = borrow();
        try {
            int rid = nextRequestId();
            Map<String, Object> h = new LinkedHashMap<>();
            h.put("op", op);
            h.putAll(header);
            c.send(BridgeConnection.REQUEST, rid, Json.write(h), payload, 0, payload == null ? 0 : payload.length);
            BridgeConnection.Frame f = c.read();
            if (f.requestId != rid) {
                c.broken = true;
                throw new RemoteStorageException(what + ": bridge answered request " + f.requestId + ", not " + rid);
            }
            if (f.type == BridgeConnection.ERROR) {
                throw mapError(f.header, what);
            }
            if (f.type != BridgeConnection.RESPONSE) {
                c.broken = true;
                throw new RemoteStorageException(what + ": unexpected frame type " + f.type + " from the bridge");
            }
            return f.header;
        } catch (IOException | IllegalArgumentException e) {
            c.broken = true;
            counted(op, true);
            throw new RemoteStorageException(what + ": bridge connection failed: " + e, e);
        } finally {
            release(c);
        }
    }

    private InputStream stream(String op, Map<String, Object> header, String what) throws RemoteStorageException {
        counted(op, false);
        BridgeConnection c = borrow();
        BridgeConnection.Frame first;
        int rid = nextRequestId();
        Map<String, Object> h = new LinkedHashMap<>();
        try {
            h.put("op", op);
            h.putAll(header);
            if (c.hasRing()) {
                h.put("transport", BridgeConnection.CAP_SHM);
                if (c.hasArena()) {
                    h.put("arena", true); // pieces already decoded in the arena are read in place
                }
            }
            if ("fetch_log_segment".equals(op)) {
                // Kafka reads its fetch size and closes: the bridge answers that much, then END "more";
                // FrameInputStream asks for the rest only if the caller reads on
                h.put("stop_after", FIRST_ANSWER_BYTES);
            }
            c.send(BridgeConnection.REQUEST, rid, Json.write(h), null, 0, 0);
            first = c.read();
        } catch (IOException | IllegalArgumentException e) {
            c.broken = true;
            release(c);
            counted(op, true);
            throw new RemoteStorageException(what + ": bridge connection failed: " + e, e);
        }
        if (first.type == BridgeConnection.ERROR) {
            release(c);
            throw mapError(first.header, what);
        }
        return new FrameInputStream(this, c, rid, first, what, h);
    }

    // ------------------------------------------------------------------------------- encoding

    private Map<String, Object> base(RemoteLogSegmentMetadata m) {
        Map<String, Object> h = new LinkedHashMap<>();
        h.put("metadata", metadata(m));
        Map<String, String> logConfig = topicConfigs == null ? null : topicConfigs.get(m.topicIdPartition().topic());
        h.put("log_config", logConfig);
        return h;
    }

    static Map<String, Object> metadata(RemoteLogSegmentMetadata m) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("topic_id", m.topicIdPartition().topicId().toString());
        o.put("topic", m.topicIdPartition().topic());
        o.put("partition", m.topicIdPartition().partition());
        o.put("segment_id", m.remoteLogSegmentId().id().toString());
        o.put("start_offset", m.startOffset());
        o.put("end_offset", m.endOffset());
        o.put("max_timestamp_ms", m.maxTimestampMs());
        o.put("broker_id", m.brokerId());
        o.put("event_timestamp_ms", m.eventTimestampMs());
        o.put("segment_size_in_bytes", m.segmentSizeInBytes());
        List<Object> epochs = new ArrayList<>();
        m.segmentLeaderEpochs().forEach((epoch, offset) -> epochs.add(List.of(epoch.longValue(), offset)));
        o.put("segment_leader_epochs", epochs);
        o.put("custom_metadata", m.customMetadata().map(c -> Base64.getEncoder().encodeToString(c.value()))
                .orElse(null));
        o.put("state", m.state().name());
        Boolean txnIdxEmpty = KafkaApi.txnIdxEmpty(m);
        if (txnIdxEmpty != null) { // before Kafka 4.0 the metadata does not say (see KafkaApi)
            o.put("txn_idx_empty", txnIdxEmpty);
        }
        return o;
    }

    private static String describe(RemoteLogSegmentMetadata m) {
        return m.topicIdPartition() + " segment " + m.remoteLogSegmentId().id() + " [" + m.startOffset() + ".."
                + m.endOffset() + "]";
    }

    // ----------------------------------------------------------------------- RemoteStorageManager

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws RemoteStorageException {
        Map<String, Object> h = base(metadata);
        Map<String, Object> paths = new LinkedHashMap<>();
        paths.put("log_segment", data.logSegment().toAbsolutePath().toString());
        paths.put("offset_index", data.offsetIndex().toAbsolutePath().toString());
        paths.put("time_index", data.timeIndex().toAbsolutePath().toString());
        paths.put("transaction_index", data.transactionIndex().map(p -> p.toAbsolutePath().toString()).orElse(null));
        paths.put("producer_snapshot_index", data.producerSnapshotIndex().toAbsolutePath().toString());
        h.put("segment_data", paths);
        ByteBuffer epochs = data.leaderEpochIndex().duplicate();
        byte[] payload = new byte[epochs.remaining()];
        epochs.get(payload);
        Map<String, Object> answer = call("copy_log_segment_data", h, payload, "copy " + describe(metadata));
        Object custom = answer.get("custom_metadata");
        return custom == null ? Optional.empty()
                : Optional.of(new CustomMetadata(Base64.getDecoder().decode(String.valueOf(custom))));
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, null);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition, int endPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, endPosition);
    }

    private InputStream fetch(RemoteLogSegmentMetadata metadata, int start, Integer end) throws RemoteStorageException {
        Map<String, Object> h = base(metadata);
        h.put("start_position", start);
        h.put("end_position", end);
        return stream("fetch_log_segment", h, "fetch " + describe(metadata) + " from " + start);
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType)
            throws RemoteStorageException {
        Map<String, Object> h = base(metadata);
        h.put("index_type", indexType.name());
        return stream("fetch_index", h, "fetch " + indexType + " index of " + describe(metadata));
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
        call("delete_log_segment_data", base(metadata), null, "delete " + describe(metadata));
    }

    /** The bridge's health answer (status, pid, connections, in-flight requests). */
    public Map<String, Object> health() throws RemoteStorageException {
        return call("health", Map.of(), null, "health");
    }

    /** Forward a named operation (room for the topic policy classes, e.g. validate_create_topic). */
    public Map<String, Object> invoke(String op, Map<String, Object> header) throws RemoteStorageException {
        return call(op, header, null, op);
    }

    int bridgeRestarts() {
        return bridge.restarts();
    }

    boolean managesBridge() {
        return bridge.managed();
    }

    int inFlightRequests() {
        return poolSize - slots.availablePermits();
    }

    int openConnections() {
        return idle.size() + inFlightRequests();
    }

    /** What the broker's registry shows for one of the bridge's metrics now (the test driver reads it). */
    Double metricValue(String name, Map<String, String> tags) {
        BridgeMetrics m = metrics;
        return m == null ? null : m.valueOf(name, tags);
    }

    /** A request to the bridge (the metrics polls not counted), or a call whose connection failed. */
    private void counted(String op, boolean failed) {
        BridgeMetrics m = metrics;
        if (m != null && !"metrics".equals(op)) {
            if (failed) {
                m.requestFailed();
            } else {
                m.request();
            }
        }
    }

    @Override
    public void close() {
        closed = true;
        if (metrics != null) {
            metrics.close();
        }
        discardIdle();
        if (topicConfigs != null) {
            topicConfigs.close();
        }
        if (bridge != null) {
            bridge.stop(stopGraceMs);
        }
    }

    /**
     * The fetched bytes, read frame by frame as the caller reads. A fetch's first answer stops after
     * {@link #FIRST_ANSWER_BYTES} with END "more": a caller that reads on gets the rest through a follow-up
     * request from that position; one that closes there (Kafka) costs no CANCEL and no wait. Closing in the
     * middle of an answer cancels it.
     */
    static final class FrameInputStream extends InputStream {
        private final PortableBridgeRemoteStorageManager owner;
        private BridgeConnection conn;
        private int rid;
        private final String what;
        /** The request that opened the stream (its follow-ups differ in start_position and request id). */
        private final Map<String, Object> request;
        /** Segment position of the next byte the current answer delivers. */
        private long position;
        /** Payload bytes of the current piece still to read (in the connection, or in the held slot). */
        private int remaining;
        /** The current piece is in ring slot {@code slot} from {@code slotPos} (else in the socket). */
        private boolean holdsSlot;
        /**
         * The held slot is read to its end but not released yet: released when the next piece is wanted,
         * or with the next frame the connection sends (one write, no wake-up of the bridge of its own).
         */
        private boolean slotSpent;
        private int slot;
        private int slotPos;
        /** The held piece is in the bridge's arena at {@code arenaOffset} (else in ring slot {@code slot}). */
        private boolean inArena;
        private long arenaOffset;
        /** The answer ended with END "more": the rest is one follow-up request away. */
        private boolean paused;
        private boolean done;
        private final byte[] one = new byte[1];

        FrameInputStream(PortableBridgeRemoteStorageManager owner, BridgeConnection conn, int rid,
                         BridgeConnection.Frame first, String what, Map<String, Object> request)
                throws RemoteStorageException {
            this.owner = owner;
            this.conn = conn;
            this.rid = rid;
            this.what = what;
            this.request = request;
            Object start = request.get("start_position");
            this.position = start instanceof Number ? ((Number) start).longValue() : 0;
            try {
                accept(first);
            } catch (IOException e) {
                throw new RemoteStorageException(what + ": " + e.getMessage(), e);
            }
        }

        private void accept(BridgeConnection.Frame f) throws IOException {
            if (f.requestId != rid) {
                fail();
                throw new IOException(what + ": frame for request " + f.requestId + " while reading " + rid);
            }
            switch (f.type) {
                case BridgeConnection.DATA:
                    // the payload stays in the connection and is copied from its receive buffer
                    // straight into the caller's array as the caller reads
                    remaining = f.payloadLength;
                    break;
                case BridgeConnection.SHM_DATA:
                case BridgeConnection.ARENA_DATA: {
                    // a piece held in shared memory: ring slot (u32 slot, u32 length) or arena (u64 offset, u32
                    // length); both are released the same way, in order
                    boolean arena = f.type == BridgeConnection.ARENA_DATA;
                    int size = arena ? 12 : 8;
                    if (f.payloadLength != size) {
                        fail();
                        throw new IOException(what + ": malformed " + (arena ? "ARENA_DATA" : "SHM_DATA") + " frame");
                    }
                    ByteBuffer p = ByteBuffer.wrap(f.payload, f.payloadOffset, size);
                    long where = arena ? p.getLong() : p.getInt();
                    int len = p.getInt();
                    try {
                        if (arena) {
                            conn.checkArena(where, len);
                        } else {
                            conn.checkSlot((int) where, len);
                        }
                    } catch (IOException e) {
                        fail();
                        throw new IOException(what + ": " + e.getMessage(), e);
                    }
                    inArena = arena;
                    arenaOffset = where;
                    slot = (int) where;
                    slotPos = 0;
                    remaining = len;
                    holdsSlot = true;
                    slotSpent = len == 0;
                    break;
                }
                case BridgeConnection.END:
                    onEnd(f.header);
                    break;
                case BridgeConnection.ERROR:
                    finish();
                    throw new IOException(mapError(f.header, what));
                default:
                    fail();
                    throw new IOException(what + ": unexpected frame type " + f.type + " in a stream");
            }
        }

        private void onEnd(Map<String, Object> header) {
            remaining = 0;
            if (Boolean.TRUE.equals(header.get("more"))) {
                paused = true;
            } else {
                finish();
            }
        }

        /** Gives the spent slot back (the next piece is wanted); batched by the connection, see releaseLazily. */
        private void releaseSlot() throws IOException {
            holdsSlot = false;
            slotSpent = false;
            remaining = 0;
            conn.releaseLazily();
        }

        /** Hands the held slot back with the connection's next frame (no write of its own). */
        private void oweSlot() {
            if (holdsSlot) {
                holdsSlot = false;
                slotSpent = false;
                remaining = 0;
                conn.oweRelease();
            }
        }

        private void finish() {
            done = true;
            remaining = 0;
            if (conn != null) {
                oweSlot();
                owner.release(conn);
                conn = null;
            }
        }

        private void fail() {
            done = true;
            if (conn != null) {
                conn.broken = true;
                owner.release(conn);
                conn = null;
            }
        }

        /** Asks for the rest of the range from where the paused answer stopped (same connection). */
        private void resume() throws IOException {
            Map<String, Object> h = new LinkedHashMap<>(request);
            h.remove("stop_after"); // the caller reads on: stream the rest, with flow control
            h.put("start_position", position);
            rid = owner.nextRequestId();
            paused = false;
            oweSlot(); // released in the same write as the request
            conn.send(BridgeConnection.REQUEST, rid, Json.write(h), null, 0, 0);
        }

        private boolean fill() throws IOException {
            while (remaining == 0 && !done) {
                if (conn == null) {
                    throw new IOException(what + ": stream closed");
                }
                try {
                    if (paused) {
                        resume();
                    } else if (slotSpent) {
                        releaseSlot();
                    }
                } catch (IOException e) {
                    fail();
                    throw new IOException(what + ": bridge connection lost mid-stream", e);
                }
                readFrame();
            }
            return remaining > 0;
        }

        private void readFrame() throws IOException {
            BridgeConnection.Frame f;
            try {
                f = conn.read();
            } catch (IOException e) {
                // EOF, a reset (the bridge died with our frames unread) or a timeout: one kind of failure
                fail();
                throw new IOException(what + ": bridge connection lost mid-stream: " + e.getMessage(), e);
            }
            accept(f); // fails the stream itself on a bad or ERROR frame
        }

        @Override
        public int read() throws IOException {
            int n = read(one, 0, 1);
            return n < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (len == 0) {
                return 0;
            }
            if (!fill()) {
                return -1;
            }
            int n;
            try {
                if (holdsSlot) {
                    n = Math.min(len, remaining);
                    if (inArena) {
                        conn.copyFromArena(arenaOffset + slotPos, b, off, n);
                    } else {
                        conn.copyFromRing(slot, slotPos, b, off, n);
                    }
                    slotPos += n;
                    remaining -= n;
                    slotSpent = remaining == 0;
                    position += n;
                    return n;
                }
                n = conn.readPayload(b, off, Math.min(len, remaining));
            } catch (IOException e) {
                fail();
                throw new IOException(what + ": bridge connection lost mid-stream", e);
            }
            remaining -= n;
            position += n;
            return n;
        }

        @Override
        public int available() {
            if (conn == null || paused) {
                return 0;
            }
            return holdsSlot ? remaining : Math.min(remaining, conn.availablePayload());
        }

        @Override
        public void close() {
            if (done || conn == null) {
                done = true;
                return;
            }
            try {
                if (!paused && (!holdsSlot || remaining == 0)) {
                    // the caller read all it was sent: the answer's END may have come with the last piece
                    Map<String, Object> end = conn.bufferedEnd(rid);
                    if (end != null) {
                        paused = true; // complete or "more": either way nothing to cancel
                    }
                }
                if (paused) {
                    finish(); // the slot goes back with the connection's next request
                    return;
                }
                // in the middle of an answer: tell the bridge to stop and hand the connection back at once;
                // what it had already sent and its END are read by the next borrower (settle)
                oweSlot();
                conn.cancel(rid);
                finish();
            } catch (IOException | RuntimeException e) {
                fail();
            }
        }
    }
}
