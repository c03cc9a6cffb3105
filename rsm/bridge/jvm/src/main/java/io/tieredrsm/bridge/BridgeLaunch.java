package io.tieredrsm.bridge;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * How a bridge process is found or started, from the plugin's settings: its socket, the command that runs it,
 * the settings file it reads and its log.
 *
 * <p>The RSM and the topic policy both start (or find) the same bridge from the same {@code rsm.config.*}
 * settings; this one value resolves them, so the two cannot drift apart (a different default socket or config
 * file would start a second bridge beside the broker's).
 *
 * @param brokerId    the broker's {@code broker.id} (or {@code node.id}), naming the default socket directory
 * @param socketPath  {@code bridge.socket.path}, default {@code <java.io.tmpdir>/rsm-bridge-<broker.id>/bridge.sock}
 * @param command     {@code bridge.command} split on white space; empty for an external bridge ({@code none})
 * @param configFile  {@code bridge.config.file}, default {@code bridge-<broker.id>.properties} beside the socket
 * @param logFile     {@code bridge.log.file}, default {@code bridge.log} beside the socket
 */
record BridgeLaunch(String brokerId, Path socketPath, List<String> command, Path configFile, Path logFile,
        long startupTimeoutMs, long restartBackoffMs, long restartBackoffMaxMs) {

    /** Keys the broker adds to the rsm.config.* settings; they are not the user's RSM settings. */
    static final Set<String> BROKER_KEYS = Set.of("broker.id", "node.id", "log.dir", "log.dirs", "cluster.id");

    /** The socket these settings name (no directory made, no file written). */
    static Path socketPath(Map<String, String> all) {
        String socket = all.get("bridge.socket.path");
        return socket != null && !socket.isBlank() ? Paths.get(socket)
                : Paths.get(System.getProperty("java.io.tmpdir"), "rsm-bridge-" + brokerId(all), "bridge.sock");
    }

    static String brokerId(Map<String, String> all) {
        return all.getOrDefault("broker.id", all.getOrDefault("node.id", "0"));
    }

    /**
     * The launch these settings describe: the socket's directory is made owner-only, and the settings file
     * written when the plugin starts the bridge itself and none was given.
     */
    static BridgeLaunch resolve(Map<String, String> all) {
        String brokerId = brokerId(all);
        Path socketPath = socketPath(all);
        Path dir = socketPath.toAbsolutePath().getParent();
        try {
            if (!Files.isDirectory(dir)) {
                Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(
                        PosixFilePermissions.fromString("rwx------")));
            }
        } catch (IOException e) {
            throw new IllegalStateException("cannot create the bridge socket directory " + dir + ": " + e, e);
        }
        String commandText = all.getOrDefault("bridge.command", "rsm bridge serve").trim();
        List<String> command = commandText.isEmpty() || commandText.equals("none") ? List.of()
                : List.copyOf(Arrays.asList(commandText.split("\\s+")));
        Path configFile;
        String given = all.get("bridge.config.file");
        if (given != null && !given.isBlank()) {
            configFile = Paths.get(given);
        } else {
            configFile = dir.resolve("bridge-" + brokerId + ".properties");
            if (!command.isEmpty()) {
                writeBridgeConfig(configFile, all);
            }
        }
        Path logFile = Paths.get(all.getOrDefault("bridge.log.file", dir.resolve("bridge.log").toString()));
        return new BridgeLaunch(brokerId, socketPath, command, configFile, logFile,
                Long.parseLong(all.getOrDefault("bridge.startup.timeout.ms", "60000")),
                Long.parseLong(all.getOrDefault("bridge.restart.backoff.ms", "200")),
                Long.parseLong(all.getOrDefault("bridge.restart.backoff.max.ms", "30000")));
    }

    /** The process handle that starts (or finds) this bridge for a client of this name. */
    BridgeProcess process(String clientName) {
        return new BridgeProcess(command, configFile, socketPath, logFile, startupTimeoutMs, restartBackoffMs,
                restartBackoffMaxMs, clientName);
    }

    /** The command as logged: the external bridge's marker when the plugin starts none. */
    String describeCommand() {
        return command.isEmpty() ? "(external bridge)" : command.toString();
    }

    /** The bridge gets the same rsm.config.* settings the broker gave us, in an owner-only file. */
    static void writeBridgeConfig(Path file, Map<String, String> all) {
        StringBuilder sb = new StringBuilder("# written by the rsm bridge plugin; do not edit\n");
        all.forEach((k, v) -> {
            if (!BROKER_KEYS.contains(k)) {
                sb.append("rsm.config.").append(escape(k)).append('=').append(escape(v)).append('\n');
            }
        });
        try {
            Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
            Files.deleteIfExists(tmp);
            Files.createFile(tmp, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            try (Writer w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8, StandardOpenOption.WRITE)) {
                w.write(sb.toString());
            }
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new IllegalStateException("cannot write the bridge config " + file + ": " + e, e);
        }
    }

    private static String escape(String s) {
        StringBuilder sb = new StringBuilder();
        for (char c : s.toCharArray()) {
            switch (c) {
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '=': case ':': case '#': case '!': sb.append('\\').append(c); break;
                default: sb.append(c);
            }
        }
        return sb.toString();
    }
}
