package io.github.kafkatieredrsm.oracle;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile;
import org.apache.kafka.storage.internals.epoch.LeaderEpochFileCache;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogSegment;
import org.apache.kafka.storage.internals.log.ProducerStateManager;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;

/**
 * Rebuilds a segment's companion files from its .log alone, the way a broker does after an unclean
 * shutdown: {@link LogSegment#recover} (offset and time indexes for the given index.interval.bytes, the
 * transaction index from the producer state, the leader-epoch cache), then the producer snapshot at the
 * segment's next offset. The result is Kafka's own answer for "which index bytes belong to this .log".
 */
final class IndexRebuilder {
    private IndexRebuilder() {
    }

    static Map<String, Object> rebuild(Map<String, String> opts) throws Exception {
        if (!opts.containsKey("log") || !opts.containsKey("out")) {
            throw new OracleException("rebuild-indexes needs --log FILE.log --out DIR");
        }
        Path log = Path.of(opts.get("log"));
        Path out = Path.of(opts.get("out"));
        int interval = Integer.parseInt(opts.getOrDefault("index-interval-bytes", "4096"));
        if (!Files.isRegularFile(log)) {
            throw new OracleException("no such file: " + log);
        }
        long base = Dumper.baseOffset(log);
        Files.createDirectories(out);
        Path work = Files.createTempDirectory(out, ".oracle-rebuild-");
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "oracle-rebuild-");
        scheduler.startup();
        Map<String, Object> result = new LinkedHashMap<>();
        try {
            File dir = work.resolve("oracle-0").toFile();
            if (!dir.mkdirs()) {
                throw new OracleException("cannot create " + dir);
            }
            String name = String.format("%020d", base);
            Files.copy(log, dir.toPath().resolve(name + ".log"));
            Properties props = new Properties();
            props.put(TopicConfig.INDEX_INTERVAL_BYTES_CONFIG, Integer.toString(interval));
            props.put(TopicConfig.SEGMENT_BYTES_CONFIG, Integer.toString(1 << 30));
            TopicPartition tp = new TopicPartition("oracle", 0);
            ProducerStateManager producers = new ProducerStateManager(tp, dir, 60_000,
                    new ProducerStateManagerConfig(86_400_000, false), Time.SYSTEM);
            LeaderEpochFileCache epochs = new LeaderEpochFileCache(tp,
                    new LeaderEpochCheckpointFile(LeaderEpochCheckpointFile.newFile(dir), new LogDirFailureChannel(1)),
                    scheduler);
            LogSegment segment = LogSegment.open(dir, base, new LogConfig(props), Time.SYSTEM, true, 0, false, "");
            int truncated;
            long next;
            try {
                truncated = segment.recover(producers, epochs);
                next = segment.readNextOffset();
                segment.flush();
            } finally {
                segment.close();
            }
            producers.updateMapEndOffset(next);
            producers.takeSnapshot();
            List<String> files = new ArrayList<>();
            try (Stream<Path> listing = Files.list(dir.toPath())) {
                for (Path f : (Iterable<Path>) listing.sorted()::iterator) {
                    String fileName = f.getFileName().toString();
                    if (fileName.endsWith(".log")) {
                        continue;
                    }
                    Files.move(f, out.resolve(fileName), StandardCopyOption.REPLACE_EXISTING);
                    files.add(fileName);
                }
            }
            result.put("truncatedBytes", truncated);
            result.put("nextOffset", next);
            result.put("files", files);
        } finally {
            scheduler.shutdown();
            SegmentWriter.deleteTree(work);
        }
        return result;
    }
}
