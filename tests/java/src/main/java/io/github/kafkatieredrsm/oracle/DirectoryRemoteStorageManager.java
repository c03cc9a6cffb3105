package io.github.kafkatieredrsm.oracle;

import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.Optional;

/**
 * A test-only reference RemoteStorageManager: plain copies of each segment's files in a directory
 * ({@code rsm.config.dir}), and one line per call in {@code <dir>/operations.log}. It proves the
 * harness's tiered-storage broker settings against a real broker, independently of the project's RSM,
 * and shows what the broker hands an RSM (the very files, positions and index types).
 *
 * Layout: {@code <dir>/<topic>-<topicId>/<partition>/<20-digit start offset>-<segment uuid>.<suffix>}.
 */
public final class DirectoryRemoteStorageManager implements RemoteStorageManager {
    private Path root;

    @Override
    public void configure(Map<String, ?> configs) {
        Object dir = configs.get("dir");
        if (dir == null) {
            throw new IllegalArgumentException("DirectoryRemoteStorageManager needs rsm.config.dir");
        }
        root = Path.of(dir.toString());
        try {
            Files.createDirectories(root);
        } catch (IOException e) {
            throw new IllegalStateException("cannot create " + root, e);
        }
    }

    private Path base(RemoteLogSegmentMetadata m) {
        var tip = m.remoteLogSegmentId().topicIdPartition();
        return root.resolve(tip.topic() + "-" + tip.topicId()).resolve(Integer.toString(tip.partition()))
                .resolve(String.format("%020d-%s", m.startOffset(), m.remoteLogSegmentId().id()));
    }

    private Path file(RemoteLogSegmentMetadata m, String suffix) {
        Path b = base(m);
        return b.resolveSibling(b.getFileName() + suffix);
    }

    private synchronized void record(String line) {
        try {
            Files.writeString(root.resolve("operations.log"), line + "\n", StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            // best effort: the operations log is for tests to read
        }
    }

    @Override
    public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata m,
            LogSegmentData data) throws RemoteStorageException {
        try {
            Files.createDirectories(base(m).getParent());
            Files.copy(data.logSegment(), file(m, ".log"), StandardCopyOption.REPLACE_EXISTING);
            Files.copy(data.offsetIndex(), file(m, ".index"), StandardCopyOption.REPLACE_EXISTING);
            Files.copy(data.timeIndex(), file(m, ".timeindex"), StandardCopyOption.REPLACE_EXISTING);
            if (data.transactionIndex().isPresent()) {
                Files.copy(data.transactionIndex().get(), file(m, ".txnindex"), StandardCopyOption.REPLACE_EXISTING);
            }
            Files.copy(data.producerSnapshotIndex(), file(m, ".snapshot"), StandardCopyOption.REPLACE_EXISTING);
            ByteBuffer epochs = data.leaderEpochIndex().duplicate();
            byte[] bytes = new byte[epochs.remaining()];
            epochs.get(bytes);
            Files.write(file(m, ".leader-epoch-checkpoint"), bytes);
        } catch (IOException e) {
            throw new RemoteStorageException("copy of " + m.remoteLogSegmentId() + " failed", e);
        }
        record("copy " + m.startOffset() + " " + m.endOffset() + " " + data.logSegment().getFileName());
        return Optional.empty();
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata m, int startPosition) throws RemoteStorageException {
        return fetchLogSegment(m, startPosition, Integer.MAX_VALUE);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata m, int startPosition, int endPosition)
            throws RemoteStorageException {
        Path log = file(m, ".log");
        record("fetch " + m.startOffset() + " " + startPosition + " " + endPosition);
        try (RandomAccessFile f = new RandomAccessFile(log.toFile(), "r")) {
            long end = Math.min((long) endPosition, f.length() - 1); // end position is inclusive
            int length = (int) Math.max(0, end - startPosition + 1);
            byte[] out = new byte[length];
            f.seek(startPosition);
            f.readFully(out);
            return new ByteArrayInputStream(out);
        } catch (java.io.FileNotFoundException e) {
            throw new RemoteResourceNotFoundException("no segment " + log);
        } catch (IOException e) {
            throw new RemoteStorageException("fetch from " + log + " failed", e);
        }
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata m, IndexType indexType) throws RemoteStorageException {
        String suffix = switch (indexType) {
            case OFFSET -> ".index";
            case TIMESTAMP -> ".timeindex";
            case PRODUCER_SNAPSHOT -> ".snapshot";
            case TRANSACTION -> ".txnindex";
            case LEADER_EPOCH -> ".leader-epoch-checkpoint";
        };
        record("index " + m.startOffset() + " " + indexType);
        Path path = file(m, suffix);
        try {
            return new ByteArrayInputStream(Files.readAllBytes(path));
        } catch (java.nio.file.NoSuchFileException e) {
            throw new RemoteResourceNotFoundException("no " + indexType + " index " + path);
        } catch (IOException e) {
            throw new RemoteStorageException("reading " + path + " failed", e);
        }
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata m) throws RemoteStorageException {
        record("delete " + m.startOffset());
        for (String suffix : new String[] {".log", ".index", ".timeindex", ".txnindex", ".snapshot",
            ".leader-epoch-checkpoint"}) {
            try {
                Files.deleteIfExists(file(m, suffix));
            } catch (IOException e) {
                throw new RemoteStorageException("delete of " + file(m, suffix) + " failed", e);
            }
        }
    }

    @Override
    public void close() {
    }
}
