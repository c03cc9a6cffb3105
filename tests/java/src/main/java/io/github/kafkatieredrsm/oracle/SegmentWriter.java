package io.github.kafkatieredrsm.oracle;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.common.RequestLocal;
import org.apache.kafka.server.common.TransactionVersion;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.LogAppendInfo;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogSegment;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.internals.log.VerificationGuard;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Random;
import java.util.stream.Stream;

/**
 * Writes a whole segment with Kafka's own code: magic 2 through {@link UnifiedLog#appendAsLeader} (offset
 * assignment, leader epochs, producer state, transaction index, producer snapshot, index building and
 * the final time index entry on roll, exactly as a broker does); legacy magic 0/1 message sets through
 * {@link LogSegment#append} (today's broker up-converts them, but old segments still exist on disk).
 * Alongside, expected.json lists every batch and record that was handed to Kafka, with the offsets Kafka
 * assigned, so readers can be checked against what was written rather than against another reader.
 */
final class SegmentWriter {
    private static final long BASE_TIMESTAMP = 1_700_000_000_000L;
    private static final String WORDS = "kafka tiered storage segment record batch offset index chunk "
            + "manifest bucket remote leader epoch producer sequence ";

    static final class Params {
        final Path out;
        final CompressionType codec;
        final int records;
        final int valueSize;
        final boolean transactional;
        final int indexIntervalBytes;
        final long seed;
        final byte magic;
        final long baseOffset;
        final boolean openTransaction;
        /** Records to write instead of generated ones (--contents FILE): [{key, value, headers}], base64. */
        final List<Map<String, Object>> contents;

        @SuppressWarnings("unchecked")
        Params(Map<String, String> o) throws OracleException {
            if (!o.containsKey("out")) {
                throw new OracleException("write-segment needs --out DIR");
            }
            out = Path.of(o.get("out"));
            try {
                codec = CompressionType.forName(o.getOrDefault("codec", "none"));
            } catch (IllegalArgumentException e) {
                throw new OracleException("unknown codec " + o.get("codec") + ": " + e.getMessage());
            }
            if (o.containsKey("contents")) {
                try {
                    contents = Oracle.MAPPER.readValue(Path.of(o.get("contents")).toFile(), List.class);
                } catch (IOException e) {
                    throw new OracleException("cannot read --contents " + o.get("contents") + ": " + e.getMessage());
                }
                records = contents.size();
            } else {
                contents = null;
                records = Integer.parseInt(o.getOrDefault("records", "500"));
            }
            valueSize = Integer.parseInt(o.getOrDefault("value-size", "100"));
            transactional = Boolean.parseBoolean(o.getOrDefault("transactional", "false"));
            indexIntervalBytes = Integer.parseInt(o.getOrDefault("index-interval-bytes", "4096"));
            seed = Long.parseLong(o.getOrDefault("seed", "0"));
            magic = Byte.parseByte(o.getOrDefault("magic", "2"));
            baseOffset = Long.parseLong(o.getOrDefault("base-offset", "0"));
            openTransaction = Boolean.parseBoolean(o.getOrDefault("open-transaction", "false"));
            if (records < 1) {
                throw new OracleException("--records must be >= 1");
            }
            if (magic < 0 || magic > 2) {
                throw new OracleException("--magic must be 0, 1 or 2");
            }
            if (openTransaction && !transactional) {
                throw new OracleException("--open-transaction needs --transactional true");
            }
            if (magic < 2 && transactional) {
                throw new OracleException("transactions need magic 2");
            }
            if (magic < 2 && codec == CompressionType.ZSTD) {
                throw new OracleException("zstd needs magic 2");
            }
        }
    }

    /** One batch handed to Kafka and what Kafka answered. */
    private static final class PlannedRecord {
        final long timestamp;
        final byte[] key;
        final byte[] value;
        final Header[] headers;

        PlannedRecord(long timestamp, byte[] key, byte[] value, Header[] headers) {
            this.timestamp = timestamp;
            this.key = key;
            this.value = value;
            this.headers = headers;
        }
    }

    private final Params p;
    private final Random rnd;
    private long clock;
    private final List<Map<String, Object>> expectedBatches = new ArrayList<>();
    private final List<Map<String, Object>> expectedRecords = new ArrayList<>();

    private SegmentWriter(Params p) {
        this.p = p;
        this.rnd = new Random(p.seed);
        this.clock = BASE_TIMESTAMP + p.seed * 1000L;
    }

    static Map<String, Object> write(Params p) throws Exception {
        return new SegmentWriter(p).run();
    }

    private Map<String, Object> run() throws Exception {
        Files.createDirectories(p.out);
        String base = String.format("%020d", p.baseOffset);
        Path work = Files.createTempDirectory(p.out, ".oracle-work-");
        Map<String, Object> result = new LinkedHashMap<>();
        try {
            File logDir = work.resolve("oracle-0").toFile();
            if (!logDir.mkdirs()) {
                throw new IOException("cannot create " + logDir);
            }
            List<String> copied = new ArrayList<>();
            if (p.magic == RecordBatch.MAGIC_VALUE_V2) {
                writeWithUnifiedLog(logDir);
            } else {
                writeLegacy(logDir);
            }
            for (String suffix : new String[] {".log", ".index", ".timeindex", ".txnindex"}) {
                Path src = logDir.toPath().resolve(base + suffix);
                if (Files.exists(src)) {
                    Files.move(src, p.out.resolve(base + suffix), StandardCopyOption.REPLACE_EXISTING);
                    copied.add(base + suffix);
                }
            }
            try (Stream<Path> files = Files.list(logDir.toPath())) {
                for (Path f : (Iterable<Path>) files::iterator) {
                    String name = f.getFileName().toString();
                    if (name.endsWith(".snapshot") || name.equals("leader-epoch-checkpoint")) {
                        Files.move(f, p.out.resolve(name), StandardCopyOption.REPLACE_EXISTING);
                        copied.add(name);
                    }
                }
            }
            Map<String, Object> expected = new LinkedHashMap<>();
            expected.put("magic", (int) p.magic);
            expected.put("codec", p.codec.name);
            expected.put("transactional", p.transactional);
            expected.put("indexIntervalBytes", p.indexIntervalBytes);
            expected.put("seed", p.seed);
            expected.put("baseOffset", p.baseOffset);
            expected.put("openTransaction", p.openTransaction);
            expected.put("files", copied);
            expected.put("batches", expectedBatches);
            expected.put("records", expectedRecords);
            Path expectedPath = p.out.resolve("expected.json");
            Oracle.MAPPER.writerWithDefaultPrettyPrinter().writeValue(expectedPath.toFile(), expected);

            result.put("log", p.out.resolve(base + ".log").toString());
            result.put("expected", expectedPath.toString());
            result.put("files", copied);
            result.put("batches", expectedBatches.size());
            result.put("records", expectedRecords.size());
        } finally {
            deleteTree(work);
        }
        return result;
    }

    private Properties topicProps() {
        Properties props = new Properties();
        props.put(TopicConfig.SEGMENT_BYTES_CONFIG, Integer.toString(1 << 30));
        props.put(TopicConfig.INDEX_INTERVAL_BYTES_CONFIG, Integer.toString(p.indexIntervalBytes));
        props.put(TopicConfig.MESSAGE_TIMESTAMP_TYPE_CONFIG, "CreateTime");
        props.put(TopicConfig.COMPRESSION_TYPE_CONFIG, "producer");
        return props;
    }

    // ---------------------------------------------------------------- magic 2, through UnifiedLog

    private void writeWithUnifiedLog(File logDir) throws Exception {
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "oracle-scheduler-");
        scheduler.startup();
        UnifiedLog log = null;
        try {
            log = UnifiedLog.create(logDir, new LogConfig(topicProps()), 0L, 0L, scheduler,
                    new BrokerTopicStats(), Time.SYSTEM, 60_000,
                    new ProducerStateManagerConfig(86_400_000, false), 600_000,
                    new LogDirFailureChannel(1), true, Optional.empty());
            if (p.baseOffset != 0) {
                log.truncateFullyAndStartAt(p.baseOffset, Optional.of(p.baseOffset));
            }
            appendAll(log);
            // Rolling closes the segment the way a broker does before it can be tiered: final time
            // index entry, indexes trimmed, producer snapshot at the new segment's base offset.
            log.roll();
            log.flush(true);
            log.close();
            log = null;
        } finally {
            if (log != null) {
                log.closeQuietly();
            }
            scheduler.shutdown();
        }
    }

    /** Producers: one idempotent, one plain (no id), and with transactions three transactional ones. */
    private static final class Producer {
        final long id;
        final short epoch;
        final boolean transactional;
        int sequence;
        boolean inTxn;
        int txnBatches;

        Producer(long id, short epoch, boolean transactional) {
            this.id = id;
            this.epoch = epoch;
            this.transactional = transactional;
        }
    }

    private void appendAll(UnifiedLog log) throws Exception {
        Producer plain = new Producer(RecordBatch.NO_PRODUCER_ID, RecordBatch.NO_PRODUCER_EPOCH, false);
        Producer idempotent = new Producer(1000L, (short) 0, false);
        List<Producer> txn = new ArrayList<>();
        if (p.transactional) {
            for (int i = 0; i < 3; i++) {
                txn.add(new Producer(2000L + i, (short) (i + 1), true));
            }
        }
        int written = 0;
        int leaderEpoch = 0;
        while (written < p.records) {
            if (leaderEpoch == 0 && written >= p.records / 2 && p.records > 1) {
                leaderEpoch = 3; // a leader change half way: batches carry both epochs
            }
            Producer producer;
            double pick = rnd.nextDouble();
            if (!txn.isEmpty() && pick < 0.6) {
                producer = txn.get(rnd.nextInt(txn.size()));
            } else {
                producer = pick < 0.8 ? idempotent : plain;
            }
            int n = Math.min(1 + rnd.nextInt(12), p.records - written);
            List<PlannedRecord> planned = planRecords(n, true);
            MemoryRecords records = buildBatch(producer, planned);
            LogAppendInfo info = log.appendAsLeader(records, leaderEpoch);
            recordExpected(info.firstOffset(), producer, planned, leaderEpoch, records);
            producer.sequence += n;
            written += n;
            if (producer.transactional) {
                producer.inTxn = true;
                producer.txnBatches++;
                if (producer.txnBatches >= 1 + rnd.nextInt(3)) {
                    endTxn(log, producer, rnd.nextDouble() < 0.4 ? ControlRecordType.ABORT
                            : ControlRecordType.COMMIT, leaderEpoch);
                }
            }
        }
        Producer left = null;
        if (p.openTransaction) {
            // Leave one transaction open at the end: a last batch no marker follows.
            left = txn.get(0);
            List<PlannedRecord> planned = planRecords(2, true);
            MemoryRecords records = buildBatch(left, planned);
            LogAppendInfo info = log.appendAsLeader(records, leaderEpoch);
            recordExpected(info.firstOffset(), left, planned, leaderEpoch, records);
            left.sequence += planned.size();
            left.inTxn = true;
        }
        for (Producer producer : txn) {
            if (producer.inTxn && producer != left) {
                endTxn(log, producer, ControlRecordType.COMMIT, leaderEpoch);
            }
        }
        for (Map<String, Object> r : expectedRecords) {
            if (r.remove("pending") != null) {
                r.put("ongoing", true); // in the transaction left open
            }
        }
    }

    private void endTxn(UnifiedLog log, Producer producer, ControlRecordType type, int leaderEpoch)
            throws IOException {
        int coordinatorEpoch = 7;
        long timestamp = tick();
        MemoryRecords marker = MemoryRecords.withEndTransactionMarker(0L, timestamp, leaderEpoch,
                producer.id, producer.epoch, new EndTransactionMarker(type, coordinatorEpoch));
        // Transaction version 1: the marker keeps the producer's epoch (version 2 bumps it per transaction).
        LogAppendInfo info = log.appendAsLeader(marker, leaderEpoch, AppendOrigin.COORDINATOR,
                RequestLocal.noCaching(), VerificationGuard.SENTINEL, TransactionVersion.TV_1.featureLevel());
        Map<String, Object> batch = new LinkedHashMap<>();
        batch.put("baseOffset", info.firstOffset());
        batch.put("lastOffset", info.lastOffset());
        batch.put("count", 1);
        batch.put("magic", 2);
        batch.put("compressCodec", "none");
        batch.put("producerId", producer.id);
        batch.put("producerEpoch", (int) producer.epoch);
        batch.put("baseSequence", RecordBatch.NO_SEQUENCE);
        batch.put("partitionLeaderEpoch", leaderEpoch);
        batch.put("isTransactional", true);
        batch.put("isControl", true);
        batch.put("maxTimestamp", timestamp);
        batch.put("controlType", type.name());
        batch.put("coordinatorEpoch", coordinatorEpoch);
        expectedBatches.add(batch);
        Map<String, Object> rec = new LinkedHashMap<>();
        rec.put("offset", info.firstOffset());
        rec.put("timestamp", timestamp);
        rec.put("key", b64(type.recordKey()));
        rec.put("value", b64(new EndTransactionMarker(type, coordinatorEpoch).serializeValue()));
        rec.put("headers", List.of());
        rec.put("controlType", type.name());
        rec.put("producerId", producer.id);
        rec.put("isTransactional", true);
        rec.put("isControl", true);
        rec.put("aborted", false);
        expectedRecords.add(rec);
        if (type == ControlRecordType.ABORT) {
            // Every data record of this producer's open transaction is aborted.
            for (Map<String, Object> r : expectedRecords) {
                if (Long.valueOf(producer.id).equals(r.get("producerId")) && Boolean.TRUE.equals(r.get("pending"))) {
                    r.put("aborted", true);
                }
            }
        }
        for (Map<String, Object> r : expectedRecords) {
            if (Long.valueOf(producer.id).equals(r.get("producerId"))) {
                r.remove("pending");
            }
        }
        producer.inTxn = false;
        producer.txnBatches = 0;
    }

    private MemoryRecords buildBatch(Producer producer, List<PlannedRecord> planned) {
        ByteBuffer buffer = ByteBuffer.allocate(64 + planned.size() * (p.valueSize + 128));
        Compression compression = Compression.of(p.codec).build();
        int baseSequence = producer.id == RecordBatch.NO_PRODUCER_ID ? RecordBatch.NO_SEQUENCE : producer.sequence;
        MemoryRecordsBuilder builder = MemoryRecords.builder(buffer, RecordBatch.MAGIC_VALUE_V2, compression,
                TimestampType.CREATE_TIME, 0L, RecordBatch.NO_TIMESTAMP, producer.id, producer.epoch,
                baseSequence, producer.transactional, RecordBatch.NO_PARTITION_LEADER_EPOCH);
        for (PlannedRecord r : planned) {
            builder.append(r.timestamp, r.key, r.value, r.headers);
        }
        return builder.build();
    }

    private void recordExpected(long firstOffset, Producer producer, List<PlannedRecord> planned, int leaderEpoch,
            MemoryRecords built) {
        RecordBatch builtBatch = built.batches().iterator().next();
        long maxTimestamp = RecordBatch.NO_TIMESTAMP;
        for (PlannedRecord r : planned) {
            maxTimestamp = Math.max(maxTimestamp, r.timestamp);
        }
        Map<String, Object> batch = new LinkedHashMap<>();
        batch.put("baseOffset", firstOffset);
        batch.put("lastOffset", firstOffset + planned.size() - 1);
        batch.put("count", planned.size());
        batch.put("magic", (int) p.magic);
        batch.put("compressCodec", p.codec.name);
        batch.put("producerId", producer.id);
        batch.put("producerEpoch", (int) producer.epoch);
        batch.put("baseSequence", builtBatch.baseSequence());
        batch.put("partitionLeaderEpoch", p.magic >= 2 ? leaderEpoch : RecordBatch.NO_PARTITION_LEADER_EPOCH);
        batch.put("isTransactional", producer.transactional);
        batch.put("isControl", false);
        batch.put("maxTimestamp", maxTimestamp);
        expectedBatches.add(batch);
        for (int i = 0; i < planned.size(); i++) {
            PlannedRecord r = planned.get(i);
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("offset", firstOffset + i);
            rec.put("timestamp", r.timestamp);
            rec.put("key", r.key == null ? null : Base64.getEncoder().encodeToString(r.key));
            rec.put("value", r.value == null ? null : Base64.getEncoder().encodeToString(r.value));
            List<Map<String, Object>> headers = new ArrayList<>();
            for (Header h : r.headers) {
                Map<String, Object> hm = new LinkedHashMap<>();
                hm.put("key", h.key());
                hm.put("value", h.value() == null ? null : Base64.getEncoder().encodeToString(h.value()));
                headers.add(hm);
            }
            rec.put("headers", headers);
            rec.put("producerId", producer.id);
            rec.put("isTransactional", producer.transactional);
            rec.put("isControl", false);
            rec.put("aborted", false);
            if (producer.transactional) {
                rec.put("pending", true);
            }
            expectedRecords.add(rec);
        }
    }

    // ---------------------------------------------------------------- magic 0 and 1, through LogSegment

    private void writeLegacy(File logDir) throws Exception {
        LogSegment segment = LogSegment.open(logDir, p.baseOffset, new LogConfig(topicProps()), Time.SYSTEM,
                false, 0, false, "");
        try {
            long next = p.baseOffset;
            int written = 0;
            Producer none = new Producer(RecordBatch.NO_PRODUCER_ID, RecordBatch.NO_PRODUCER_EPOCH, false);
            while (written < p.records) {
                int n = Math.min(1 + rnd.nextInt(12), p.records - written);
                List<PlannedRecord> planned = planRecords(n, false);
                ByteBuffer buffer = ByteBuffer.allocate(64 + n * (p.valueSize + 128));
                TimestampType tsType = p.magic == 0 ? TimestampType.NO_TIMESTAMP_TYPE : TimestampType.CREATE_TIME;
                MemoryRecordsBuilder builder = MemoryRecords.builder(buffer, p.magic,
                        Compression.of(p.codec).build(), tsType, next);
                for (PlannedRecord r : planned) {
                    builder.append(r.timestamp, r.key, r.value);
                }
                MemoryRecords records = builder.build();
                long last = next + n - 1;
                segment.append(last, records);
                if (p.codec == CompressionType.NONE) {
                    // Uncompressed legacy messages are each their own (shallow) entry.
                    for (int i = 0; i < n; i++) {
                        recordExpected(next + i, none, List.of(planned.get(i)), -1, records);
                    }
                } else {
                    recordExpected(next, none, planned, -1, records);
                }
                next = last + 1;
                written += n;
            }
            segment.onBecomeInactiveSegment();
            segment.flush();
        } finally {
            segment.close();
        }
    }

    // ---------------------------------------------------------------- content

    private long tick() {
        // Mostly increasing, sometimes going back a little: time index entries only when it grows.
        clock += rnd.nextInt(40) - 8;
        return clock;
    }

    private int nextContent;

    private static byte[] unb64(Object value) {
        return value == null ? null : Base64.getDecoder().decode((String) value);
    }

    @SuppressWarnings("unchecked")
    private List<PlannedRecord> planRecords(int n, boolean withHeaders) {
        List<PlannedRecord> out = new ArrayList<>();
        if (p.contents != null) {
            // the caller's records in order (headers whatever withHeaders says); timestamps still tick
            for (int i = 0; i < n && nextContent < p.contents.size(); i++) {
                Map<String, Object> c = p.contents.get(nextContent++);
                List<Map<String, Object>> hs = (List<Map<String, Object>>) c.getOrDefault("headers", List.of());
                Header[] headers = new Header[hs.size()];
                for (int h = 0; h < hs.size(); h++) {
                    headers[h] = new RecordHeader((String) hs.get(h).get("key"), unb64(hs.get(h).get("value")));
                }
                out.add(new PlannedRecord(tick(), unb64(c.get("key")), unb64(c.get("value")), headers));
            }
            return out;
        }
        for (int i = 0; i < n; i++) {
            long timestamp = p.magic == 0 ? RecordBatch.NO_TIMESTAMP : tick();
            byte[] key = rnd.nextInt(5) == 0 ? null : ("key-" + rnd.nextInt(1000)).getBytes(StandardCharsets.UTF_8);
            byte[] value = rnd.nextInt(25) == 0 ? null : text(p.valueSize);
            Header[] headers = new Header[0];
            if (withHeaders) {
                int count = rnd.nextInt(3);
                headers = new Header[count];
                for (int h = 0; h < count; h++) {
                    byte[] hv = rnd.nextInt(6) == 0 ? null : ("v" + rnd.nextInt(100000)).getBytes(StandardCharsets.UTF_8);
                    headers[h] = new RecordHeader("h" + h + (h == 1 ? "-ünï" : ""), hv);
                }
            }
            out.add(new PlannedRecord(timestamp, key, value, headers));
        }
        return out;
    }

    private byte[] text(int size) {
        byte[] words = WORDS.getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[size];
        int pos = rnd.nextInt(words.length);
        for (int i = 0; i < size; i++) {
            if (rnd.nextInt(16) == 0) {
                out[i] = (byte) rnd.nextInt(256); // some entropy so codecs cannot collapse everything
                pos = rnd.nextInt(words.length);
            } else {
                out[i] = words[pos];
                pos = (pos + 1) % words.length;
            }
        }
        return out;
    }

    static String b64(ByteBuffer buffer) {
        if (buffer == null) {
            return null;
        }
        ByteBuffer dup = buffer.duplicate();
        byte[] bytes = new byte[dup.remaining()];
        dup.get(bytes);
        return Base64.getEncoder().encodeToString(bytes);
    }

    static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path path : (Iterable<Path>) walk.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(path);
            }
        }
    }
}
