package io.github.kafkatieredrsm.oracle;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.record.internal.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.utils.internals.AbstractIterator;
import org.apache.kafka.common.utils.internals.BufferSupplier;
import org.apache.kafka.common.utils.internals.CloseableIterator;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;

/**
 * Kafka's own validation of a .log file: the batch iterator (sizes, headers), every batch's
 * ensureValid() (CRC, size), every record iterated (decompression, record count, legacy inner CRCs)
 * and offsets strictly increasing, the checks a broker makes when it recovers a segment.
 */
final class Checker {
    private Checker() {
    }

    static Map<String, Object> check(Path path) throws Exception {
        if (!Files.isRegularFile(path)) {
            throw new OracleException("no such file: " + path);
        }
        long batches = 0;
        long records = 0;
        long firstOffset = -1;
        long lastOffset = -1;
        int validBytes = 0;
        TreeSet<Integer> magics = new TreeSet<>();
        TreeSet<String> codecs = new TreeSet<>();
        try (FileRecords file = FileRecords.open(path.toFile(), false)) {
            AbstractIterator<FileChannelRecordBatch> it = file.batchIterator();
            while (true) {
                FileChannelRecordBatch batch;
                try {
                    if (!it.hasNext()) {
                        break;
                    }
                    batch = it.next();
                } catch (KafkaException e) {
                    throw new OracleException(path + ": at byte position " + validBytes + ": " + e.getMessage(), e);
                }
                String where = path + ": batch at byte position " + batch.position() + " (baseOffset "
                        + batch.baseOffset() + ")";
                try {
                    batch.ensureValid();
                } catch (KafkaException e) {
                    throw new OracleException(where + ": " + e.getMessage(), e);
                }
                if (batch.baseOffset() <= lastOffset) {
                    throw new OracleException(where + ": offset " + batch.baseOffset()
                            + " is not above the previous batch's last offset " + lastOffset);
                }
                long count = 0;
                long previous = -1;
                try (CloseableIterator<Record> recs = batch.streamingIterator(BufferSupplier.NO_CACHING)) {
                    while (recs.hasNext()) {
                        Record r = recs.next();
                        r.ensureValid();
                        if (r.offset() <= previous) {
                            throw new OracleException(where + ": record offset " + r.offset()
                                    + " is not above " + previous);
                        }
                        previous = r.offset();
                        count++;
                    }
                } catch (KafkaException e) {
                    throw new OracleException(where + ": " + e.getMessage(), e);
                }
                if (batch.countOrNull() != null && batch.countOrNull() != count) {
                    throw new OracleException(where + ": header says " + batch.countOrNull()
                            + " records, iterated " + count);
                }
                if (firstOffset < 0) {
                    firstOffset = batch.baseOffset();
                }
                lastOffset = batch.lastOffset();
                batches++;
                records += count;
                validBytes = batch.position() + batch.sizeInBytes();
                magics.add((int) batch.magic());
                codecs.add(batch.compressionType().name);
            }
            if (validBytes != file.sizeInBytes()) {
                throw new OracleException(path + ": " + (file.sizeInBytes() - validBytes)
                        + " trailing bytes at byte position " + validBytes + " are not a complete batch");
            }
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("batches", batches);
        m.put("records", records);
        m.put("firstOffset", firstOffset);
        m.put("lastOffset", lastOffset);
        m.put("sizeInBytes", validBytes);
        m.put("magics", magics);
        m.put("codecs", codecs);
        return m;
    }
}
