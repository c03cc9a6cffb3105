package io.tieredrsm.bridge;

import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The policy classes' way to the bridge: found (or started) from the broker's {@code rsm.config.bridge.*}
 * settings exactly as {@link PortableBridgeRemoteStorageManager} finds it (same socket, same command, same
 * generated config file), shared by the create and alter policies of one broker (Kafka makes one instance
 * of each), with calls bounded by {@code bridge.policy.timeout.ms}.
 *
 * <p>The broker's controller calls a policy on its one event thread, so a call never waits for a bridge to
 * start: when no bridge answers the call is refused at once (a {@link PolicyViolationException} saying so,
 * never a silent pass) and, for a bridge the plugin manages, a restart begins in the background; the next
 * request after it is up is answered again.
 */
final class PolicyBridge {
    private static final Logger LOG = LoggerFactory.getLogger(PolicyBridge.class);
    static final String CLIENT_NAME = PortableBridgeRemoteStorageManager.CLIENT_NAME + "-policy";
    private static final Map<Path, PolicyBridge> SHARED = new HashMap<>();

    private final Path socketPath;
    private final BridgeProcess process;
    private final long timeoutMs;
    private final ConcurrentLinkedDeque<BridgeConnection> idle = new ConcurrentLinkedDeque<>();
    private final AtomicInteger requestIds = new AtomicInteger();
    private final AtomicBoolean restarting = new AtomicBoolean();
    private final ExecutorService restarter = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "rsm-policy-bridge-start");
        t.setDaemon(true);
        return t;
    });
    private int refs;
    private volatile boolean closed;

    private PolicyBridge(Path socketPath, BridgeProcess process, long timeoutMs) {
        this.socketPath = socketPath;
        this.process = process;
        this.timeoutMs = timeoutMs;
    }

    /**
     * The shared client for these settings ({@code rsm.config.*} keys, prefix stripped); {@link #release}
     * it when done. The first one starts a bridge the plugin manages, in the background.
     */
    static synchronized PolicyBridge acquire(Map<String, String> rsm) {
        Path socketPath = BridgeLaunch.socketPath(rsm);
        PolicyBridge shared = SHARED.get(socketPath);
        if (shared == null) {
            shared = create(rsm);
            SHARED.put(socketPath, shared);
            shared.startInBackground();
        }
        shared.refs++;
        return shared;
    }

    /** The bridge the RSM uses (the same launch: socket, command, config file and log file). */
    private static PolicyBridge create(Map<String, String> rsm) {
        BridgeLaunch launch = BridgeLaunch.resolve(rsm);
        BridgeProcess process = launch.process(CLIENT_NAME);
        long timeoutMs = Long.parseLong(rsm.getOrDefault("bridge.policy.timeout.ms", "5000"));
        LOG.info("topic policy asks the bridge on {} (command {}, timeout {} ms)", launch.socketPath(),
                launch.describeCommand(), timeoutMs);
        return new PolicyBridge(launch.socketPath(), process, timeoutMs);
    }

    void release() {
        synchronized (PolicyBridge.class) {
            if (--refs > 0) {
                return;
            }
            SHARED.remove(socketPath);
        }
        closed = true;
        restarter.shutdownNow();
        BridgeConnection c;
        while ((c = idle.pollFirst()) != null) {
            c.dispose();
        }
        process.stop(15_000); // only a bridge this client started; one the RSM or the operator runs stays
    }

    /** Starts (or finds) the bridge without blocking the caller; one attempt at a time. */
    private void startInBackground() {
        if (!process.managed() || closed || !restarting.compareAndSet(false, true)) {
            return;
        }
        try {
            restarter.execute(() -> {
                try {
                    process.ensureRunning();
                } catch (RemoteStorageException | RuntimeException e) {
                    LOG.warn("the bridge for the topic policy is not available yet: {}", e.getMessage());
                } finally {
                    restarting.set(false);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            restarting.set(false);
        }
    }

    /**
     * One request: the answer's header, or a PolicyViolationException - the policy's own (code
     * POLICY_VIOLATION), or a refusal saying why the policy could not be asked.
     */
    Map<String, Object> call(String op, Map<String, Object> header, String what) throws PolicyViolationException {
        BridgeConnection c = borrow(what);
        boolean reuse = false;
        try {
            int rid = requestIds.incrementAndGet() & 0x7fffffff;
            Map<String, Object> h = new LinkedHashMap<>();
            h.put("op", op);
            h.putAll(header);
            c.send(BridgeConnection.REQUEST, rid, Json.write(h), null, 0, 0);
            BridgeConnection.Frame f = c.read();
            if (f.requestId != rid) {
                throw new IOException("the bridge answered request " + f.requestId + ", not " + rid);
            }
            if (f.type == BridgeConnection.ERROR) {
                reuse = true;
                String code = String.valueOf(f.header.get("code"));
                String message = String.valueOf(f.header.get("message"));
                if ("POLICY_VIOLATION".equals(code)) {
                    throw new PolicyViolationException(message);
                }
                if ("UNSUPPORTED_OPERATION".equals(code)) {
                    throw new PolicyViolationException(what + " refused: the bridge on " + socketPath
                            + " does not answer the topic policy (" + message + "; an older rsm, or an RSM class"
                            + " without a topic policy?)");
                }
                throw new PolicyViolationException(what + " refused: the topic policy could not be checked: "
                        + message + " [" + code + "]");
            }
            if (f.type != BridgeConnection.RESPONSE) {
                throw new IOException("unexpected frame type " + f.type + " from the bridge");
            }
            reuse = true;
            return f.header;
        } catch (IOException | IllegalArgumentException e) {
            startInBackground();
            throw new PolicyViolationException(what + " refused: the RSM bridge that checks the topic policy "
                    + "stopped answering on " + socketPath + " (" + e.getMessage() + ")" + restartNote(), e);
        } finally {
            if (reuse && !closed && !c.broken) {
                c.markIdle();
                idle.offerFirst(c);
            } else {
                c.dispose();
            }
        }
    }

    private BridgeConnection borrow(String what) throws PolicyViolationException {
        if (closed) {
            throw new PolicyViolationException(what + " refused: the topic policy is closed (broker shutting down)");
        }
        BridgeConnection c;
        while ((c = idle.pollFirst()) != null) {
            if (c.settle() && !c.retireDue() && !c.isStale()) {
                return c;
            }
            c.dispose();
        }
        try {
            return new BridgeConnection(socketPath, CLIENT_NAME, timeoutMs, false);
        } catch (IOException e) {
            startInBackground();
            throw new PolicyViolationException(what + " refused: the RSM bridge that checks the topic policy does "
                    + "not answer on " + socketPath + " (" + e.getMessage() + ")" + restartNote(), e);
        }
    }

    private String restartNote() {
        return process.managed() ? "; it is being restarted: retry in a few seconds"
                : "; rsm.config.bridge.command is empty, so start it (rsm bridge serve) and retry";
    }
}
