package io.tieredrsm.bridge;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Starts the Python bridge ({@code bridge.command ... --config F --socket S --parent-pid P}), watches it
 * and restarts it when it died, with exponential backoff between rapid restarts so a bridge that crashes
 * at start-up does not spin. A bridge already listening on the socket (run by the operator) is used as
 * it is.
 */
final class BridgeProcess {
    private static final Logger LOG = LoggerFactory.getLogger(BridgeProcess.class);

    private final List<String> command;
    private final Path configFile;
    private final Path socketPath;
    private final Path logFile;
    private final long startupTimeoutMs;
    private final long backoffMinMs;
    private final long backoffMaxMs;
    private final String clientName;

    private Process process;
    private long lastStartMs;
    private long backoffMs;
    private int restarts;
    private boolean stopped;

    BridgeProcess(List<String> command, Path configFile, Path socketPath, Path logFile, long startupTimeoutMs,
                  long backoffMinMs, long backoffMaxMs, String clientName) {
        this.command = command;
        this.configFile = configFile;
        this.socketPath = socketPath;
        this.logFile = logFile;
        this.startupTimeoutMs = startupTimeoutMs;
        this.backoffMinMs = backoffMinMs;
        this.backoffMaxMs = backoffMaxMs;
        this.backoffMs = backoffMinMs;
        this.clientName = clientName;
    }

    boolean managed() {
        return !command.isEmpty();
    }

    synchronized int restarts() {
        return restarts;
    }

    synchronized Long pid() {
        return process != null && process.isAlive() ? process.pid() : null;
    }

    /**
     * Makes sure a bridge answers on the socket: a live one (ours or the operator's) is kept; otherwise,
     * when a command is configured, a new one is started, unless the previous start was too recent.
     */
    synchronized void ensureRunning() throws RemoteStorageException {
        if (stopped) {
            throw new RemoteStorageException("the bridge RSM is closed");
        }
        if (probe()) {
            return;
        }
        if (!managed()) {
            throw new RemoteStorageException("no bridge answers on " + socketPath
                    + " and rsm.config.bridge.command is empty, so the plugin cannot start one");
        }
        if (process != null && process.isAlive()) {
            // started but not (yet/any more) answering: give it the start-up time, then replace it
            if (waitForSocket(process, startupTimeoutMs)) {
                return;
            }
            LOG.warn("bridge pid " + process.pid() + " does not answer on " + socketPath + "; killing it");
            process.destroyForcibly();
        }
        long now = System.currentTimeMillis();
        if (process != null) {
            long since = now - lastStartMs;
            if (since < backoffMs) {
                throw new RemoteStorageException("bridge died " + since + " ms after its last start; next start "
                        + "allowed in " + (backoffMs - since) + " ms (backoff)");
            }
            // grow the backoff only for restarts that come quickly after the previous one
            backoffMs = since < 4 * backoffMs ? Math.min(backoffMs * 2, backoffMaxMs) : backoffMinMs;
            restarts++;
            LOG.warn("bridge exited (code " + exitCode() + "); restart #" + restarts);
        }
        start();
    }

    private String exitCode() {
        try {
            return String.valueOf(process.exitValue());
        } catch (IllegalThreadStateException e) {
            return "killed";
        }
    }

    private void start() throws RemoteStorageException {
        List<String> cmd = new ArrayList<>(command);
        cmd.add("--config");
        cmd.add(configFile.toString());
        cmd.add("--socket");
        cmd.add(socketPath.toString());
        cmd.add("--parent-pid");
        cmd.add(String.valueOf(ProcessHandle.current().pid()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()))
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
        lastStartMs = System.currentTimeMillis();
        try {
            process = pb.start();
        } catch (IOException e) {
            throw new RemoteStorageException("cannot start the bridge with " + command + ": " + e.getMessage(), e);
        }
        LOG.info("started bridge pid " + process.pid() + ": " + String.join(" ", cmd));
        Process started = process;
        started.onExit().thenRunAsync(() -> restartAfterExit(started));
        if (!waitForSocket(process, startupTimeoutMs)) {
            if (!process.isAlive()) {
                throw new RemoteStorageException("bridge exited with code " + process.exitValue()
                        + " at start-up; see " + logFile);
            }
            throw new RemoteStorageException("bridge did not answer on " + socketPath + " within "
                    + startupTimeoutMs + " ms; see " + logFile);
        }
    }

    /** A bridge we started exited on its own: start a new one now rather than at the next call. */
    private void restartAfterExit(Process exited) {
        synchronized (this) {
            if (stopped || process != exited) {
                return;
            }
        }
        LOG.warn("bridge pid " + exited.pid() + " exited with code " + exited.exitValue() + "; restarting it");
        try {
            ensureRunning();
        } catch (RemoteStorageException e) {
            LOG.warn("bridge restart deferred to the next call: " + e.getMessage());
        }
    }

    private boolean waitForSocket(Process p, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        long sleep = 20;
        while (System.currentTimeMillis() < deadline) {
            if (probe()) {
                return true;
            }
            if (!p.isAlive()) {
                return false;
            }
            try {
                Thread.sleep(sleep);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
            sleep = Math.min(sleep * 2, 200);
        }
        return probe();
    }

    private boolean probe() {
        try (BridgeConnection c = new BridgeConnection(socketPath, clientName + "-probe", 5_000)) {
            return true;
        } catch (BridgeConnection.BusyException e) {
            return true; // it answered: alive, only serving bridge.max.connections already (never kill it for that)
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }

    /** Stops the bridge this plugin started (SIGTERM, then SIGKILL after the grace period). */
    synchronized void stop(long graceMs) {
        stopped = true;
        if (process == null) {
            return;
        }
        process.destroy();
        try {
            if (!process.waitFor(graceMs, TimeUnit.MILLISECONDS)) {
                LOG.warn("bridge did not stop within " + graceMs + " ms; killing it");
                process.destroyForcibly();
                process.waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
        LOG.info("bridge stopped");
        process = null;
    }
}
