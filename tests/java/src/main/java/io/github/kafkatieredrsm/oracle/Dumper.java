package io.github.kafkatieredrsm.oracle;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.message.AbortedTxn;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.utils.internals.BufferSupplier;
import org.apache.kafka.common.utils.internals.CloseableIterator;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.log.BatchMetadata;
import org.apache.kafka.storage.internals.log.EpochEntry;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.OffsetIndex;
import org.apache.kafka.storage.internals.log.OffsetPosition;
import org.apache.kafka.storage.internals.log.ProducerStateEntry;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.TimeIndex;
import org.apache.kafka.storage.internals.log.TimestampOffset;
import org.apache.kafka.storage.internals.log.TransactionIndex;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Reads any segment-related file with Kafka's own classes, one JSON object per batch or index entry. */
final class Dumper {
    private Dumper() {
    }

    static List<Map<String, Object>> dump(Path path) throws Exception {
        if (!Files.isRegularFile(path)) {
            throw new OracleException("no such file: " + path);
        }
        String name = path.getFileName().toString();
        if (name.equals(LeaderEpochCheckpointFile.newFile(path.getParent().toFile()).getName())) {
            return leaderEpochs(path);
        }
        if (name.endsWith(".log")) {
            return batches(path);
        }
        long base = baseOffset(path);
        if (name.endsWith(".index")) {
            return offsetIndex(path, base);
        }
        if (name.endsWith(".timeindex")) {
            return timeIndex(path, base);
        }
        if (name.endsWith(".txnindex")) {
            return txnIndex(path, base);
        }
        if (name.endsWith(".snapshot")) {
            return snapshot(path);
        }
        throw new OracleException("do not know how to dump " + path
                + " (.log, .index, .timeindex, .txnindex, .snapshot, leader-epoch-checkpoint)");
    }

    static long baseOffset(Path path) throws OracleException {
        String name = path.getFileName().toString();
        int dot = name.indexOf('.');
        try {
            return Long.parseLong(dot < 0 ? name : name.substring(0, dot));
        } catch (NumberFormatException e) {
            throw new OracleException("file name " + name + " does not start with a base offset");
        }
    }

    static List<Map<String, Object>> batches(Path path) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        try (FileRecords records = FileRecords.open(path.toFile(), false)) {
            for (FileChannelRecordBatch batch : records.batches()) {
                out.add(batch(batch));
            }
        }
        return out;
    }

    static Map<String, Object> batch(FileChannelRecordBatch batch) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("baseOffset", batch.baseOffset());
        m.put("lastOffset", batch.lastOffset());
        m.put("count", batch.countOrNull());
        m.put("position", batch.position());
        m.put("size", batch.sizeInBytes());
        m.put("magic", (int) batch.magic());
        m.put("compressCodec", batch.compressionType().name);
        m.put("crc", batch.checksum());
        boolean valid = batch.isValid();
        m.put("isValid", valid);
        m.put("timestampType", batch.timestampType().name);
        m.put("maxTimestamp", batch.maxTimestamp());
        m.put("createTime", batch.maxTimestamp());
        m.put("producerId", batch.producerId());
        m.put("producerEpoch", (int) batch.producerEpoch());
        m.put("baseSequence", batch.baseSequence());
        m.put("lastSequence", batch.lastSequence());
        m.put("partitionLeaderEpoch", batch.partitionLeaderEpoch());
        m.put("isTransactional", batch.isTransactional());
        m.put("isControl", batch.isControlBatch());
        m.put("deleteHorizonMs", batch.deleteHorizonMs().isPresent() ? batch.deleteHorizonMs().getAsLong() : null);
        List<Map<String, Object>> recs = new ArrayList<>();
        try (CloseableIterator<Record> it = batch.streamingIterator(BufferSupplier.NO_CACHING)) {
            while (it.hasNext()) {
                recs.add(record(it.next(), batch.isControlBatch()));
            }
        } catch (RuntimeException e) {
            m.put("recordsError", e.toString());
        }
        m.put("records", recs);
        return m;
    }

    static Map<String, Object> record(Record r, boolean control) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("offset", r.offset());
        m.put("timestamp", r.timestamp());
        m.put("sequence", r.sequence());
        m.put("sizeInBytes", r.sizeInBytes());
        m.put("key", r.hasKey() ? SegmentWriter.b64(r.key()) : null);
        m.put("value", r.hasValue() ? SegmentWriter.b64(r.value()) : null);
        List<Map<String, Object>> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            Map<String, Object> hm = new LinkedHashMap<>();
            hm.put("key", h.key());
            hm.put("value", h.value() == null ? null : Base64.getEncoder().encodeToString(h.value()));
            headers.add(hm);
        }
        m.put("headers", headers);
        if (control && r.hasKey()) {
            ControlRecordType type = ControlRecordType.parse(r.key());
            m.put("controlType", type.name());
            if (type == ControlRecordType.COMMIT || type == ControlRecordType.ABORT) {
                m.put("coordinatorEpoch", EndTransactionMarker.deserialize(r).coordinatorEpoch());
            }
        }
        return m;
    }

    static List<Map<String, Object>> offsetIndex(Path path, long base) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        File file = path.toFile();
        OffsetIndex index = new OffsetIndex(file, base, (int) Math.max(file.length(), 8), false);
        try {
            for (int i = 0; i < index.entries(); i++) {
                OffsetPosition e = index.entry(i);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("offset", e.offset());
                m.put("relativeOffset", e.offset() - base);
                m.put("position", e.position());
                out.add(m);
            }
        } finally {
            index.close();
        }
        return out;
    }

    static List<Map<String, Object>> timeIndex(Path path, long base) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        File file = path.toFile();
        TimeIndex index = new TimeIndex(file, base, (int) Math.max(file.length(), 12), false);
        try {
            for (int i = 0; i < index.entries(); i++) {
                TimestampOffset e = index.entry(i);
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("timestamp", e.timestamp());
                m.put("offset", e.offset());
                m.put("relativeOffset", e.offset() - base);
                out.add(m);
            }
        } finally {
            index.close();
        }
        return out;
    }

    static List<Map<String, Object>> txnIndex(Path path, long base) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        try (TransactionIndex index = new TransactionIndex(base, path.toFile())) {
            for (AbortedTxn t : index.allAbortedTxns()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("producerId", t.producerId());
                m.put("firstOffset", t.firstOffset());
                m.put("lastOffset", t.lastOffset());
                m.put("lastStableOffset", t.lastStableOffset());
                out.add(m);
            }
        }
        return out;
    }

    static List<Map<String, Object>> snapshot(Path path) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        for (ProducerStateEntry e : ProducerStateManager.readSnapshot(path.toFile())) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("producerId", e.producerId());
            m.put("producerEpoch", (int) e.producerEpoch());
            m.put("coordinatorEpoch", e.coordinatorEpoch());
            m.put("lastTimestamp", e.lastTimestamp());
            m.put("currentTxnFirstOffset",
                    e.currentTxnFirstOffset().isPresent() ? e.currentTxnFirstOffset().getAsLong() : -1L);
            List<Map<String, Object>> batches = new ArrayList<>();
            for (BatchMetadata b : e.batchMetadata()) {
                Map<String, Object> bm = new LinkedHashMap<>();
                bm.put("firstSeq", b.firstSeq());
                bm.put("lastSeq", b.lastSeq());
                bm.put("firstOffset", b.firstOffset());
                bm.put("lastOffset", b.lastOffset());
                bm.put("offsetDelta", b.offsetDelta());
                bm.put("timestamp", b.timestamp());
                batches.add(bm);
            }
            m.put("batches", batches);
            if (!batches.isEmpty()) {
                Map<String, Object> last = batches.get(batches.size() - 1);
                m.put("lastSequence", last.get("lastSeq"));
                m.put("lastOffset", last.get("lastOffset"));
                m.put("offsetDelta", last.get("offsetDelta"));
            }
            out.add(m);
        }
        return out;
    }

    static List<Map<String, Object>> leaderEpochs(Path path) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        // Read straight from the given file: LeaderEpochCheckpointFile names its file after the directory.
        Path dir = Files.createTempDirectory("oracle-epochs-");
        try {
            Files.copy(path, LeaderEpochCheckpointFile.newFile(dir.toFile()).toPath());
            LeaderEpochCheckpointFile file = new LeaderEpochCheckpointFile(
                    LeaderEpochCheckpointFile.newFile(dir.toFile()), new LogDirFailureChannel(1));
            for (EpochEntry e : file.read()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("epoch", e.epoch());
                m.put("startOffset", e.startOffset());
                out.add(m);
            }
        } finally {
            SegmentWriter.deleteTree(dir);
        }
        return out;
    }

    static String utf8(byte[] bytes) {
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
