package io.tieredrsm.bridge;

import java.io.EOFException;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * One handshaken connection to the bridge (protocol v1, see PROTOCOL.md). It carries one request at a
 * time; the pool in {@link BridgeRemoteStorageManager} hands it to one Kafka thread after another.
 */
final class BridgeConnection implements AutoCloseable {
    static final byte HELLO = 1;
    static final byte REQUEST = 2;
    static final byte RESPONSE = 3;
    static final byte DATA = 4;
    static final byte END = 5;
    static final byte ERROR = 6;
    static final byte CANCEL = 7;

    static final int PREFIX_SIZE = 13;
    static final int MAX_FRAME_BYTES = 16 * 1024 * 1024 + 4 * 1024 * 1024;
    static final String MAGIC = "rsm-bridge";
    static final int PROTOCOL_VERSION = 1;

    /** A decoded frame; {@code payload} is only valid until the next read on the connection. */
    static final class Frame {
        final byte type;
        final int requestId;
        final Map<String, Object> header;
        final byte[] payload;
        final int payloadOffset;
        final int payloadLength;

        Frame(byte type, int requestId, Map<String, Object> header, byte[] payload, int off, int len) {
            this.type = type;
            this.requestId = requestId;
            this.header = header;
            this.payload = payload;
            this.payloadOffset = off;
            this.payloadLength = len;
        }
    }

    /** Closes connections whose answer is late, so a hung bridge cannot block a Kafka thread forever. */
    private static final ScheduledThreadPoolExecutor WATCHDOG = watchdog();

    private static ScheduledThreadPoolExecutor watchdog() {
        ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "rsm-bridge-watchdog");
            t.setDaemon(true);
            return t;
        });
        ex.setRemoveOnCancelPolicy(true);
        return ex;
    }

    private final SocketChannel channel;
    private final long timeoutMs;
    private volatile boolean timedOut;
    private final ByteBuffer prefix = ByteBuffer.allocate(PREFIX_SIZE);
    private byte[] body = new byte[64 * 1024];
    final Map<String, Object> serverHello;
    volatile boolean broken;

    BridgeConnection(Path socketPath, String clientName) throws IOException {
        this(socketPath, clientName, 30_000);
    }

    BridgeConnection(Path socketPath, String clientName, long timeoutMs) throws IOException {
        this.timeoutMs = timeoutMs;
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            ch.connect(UnixDomainSocketAddress.of(socketPath));
            this.channel = ch;
            send(HELLO, 0, Json.write(Map.of("magic", MAGIC, "versions", List.of(PROTOCOL_VERSION),
                    "client", clientName)), null, 0, 0);
            Frame hello = read();
            if (hello.type == ERROR) {
                throw new IOException("bridge refused the handshake: " + hello.header.get("code") + ": "
                        + hello.header.get("message"));
            }
            if (hello.type != HELLO || !MAGIC.equals(hello.header.get("magic"))) {
                throw new IOException("bridge answered the handshake with frame type " + hello.type);
            }
            this.serverHello = hello.header;
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    long serverPid() {
        Object pid = serverHello.get("pid");
        return pid instanceof Number ? ((Number) pid).longValue() : -1;
    }

    void send(byte type, int requestId, String header, byte[] payload, int off, int len) throws IOException {
        byte[] headerBytes = header == null ? new byte[0] : header.getBytes(StandardCharsets.UTF_8);
        long length = 9L + headerBytes.length + len;
        if (length > MAX_FRAME_BYTES) {
            throw new IOException("frame of " + length + " bytes is too large");
        }
        ByteBuffer p = ByteBuffer.allocate(PREFIX_SIZE + headerBytes.length);
        p.putInt((int) length).put(type).putInt(requestId).putInt(headerBytes.length).put(headerBytes);
        p.flip();
        ByteBuffer[] bufs = payload == null || len == 0
                ? new ByteBuffer[]{p} : new ByteBuffer[]{p, ByteBuffer.wrap(payload, off, len)};
        long remaining = p.remaining() + (long) len;
        while (remaining > 0) {
            remaining -= channel.write(bufs);
        }
    }

    /** Reads one frame; fails (and closes the connection) when none arrives within the timeout. */
    Frame read() throws IOException {
        if (timeoutMs <= 0) {
            return readFrame();
        }
        ScheduledFuture<?> alarm = WATCHDOG.schedule(() -> {
            timedOut = true;
            close();
        }, timeoutMs, TimeUnit.MILLISECONDS);
        try {
            return readFrame();
        } catch (IOException e) {
            if (timedOut) {
                throw new IOException("no answer from the bridge within " + timeoutMs + " ms", e);
            }
            throw e;
        } finally {
            alarm.cancel(false);
        }
    }

    private Frame readFrame() throws IOException {
        prefix.clear();
        readFully(prefix);
        prefix.flip();
        int length = prefix.getInt();
        byte type = prefix.get();
        int requestId = prefix.getInt();
        int headerLength = prefix.getInt();
        if (length < 9 || length > MAX_FRAME_BYTES || headerLength < 0 || headerLength > length - 9) {
            throw new IOException("malformed frame from the bridge (length " + length + ", header "
                    + headerLength + ")");
        }
        int bodyLength = length - 9;
        if (body.length < bodyLength) {
            body = new byte[Math.max(bodyLength, body.length * 2)];
        }
        readFully(ByteBuffer.wrap(body, 0, bodyLength));
        Map<String, Object> header = headerLength == 0 ? Map.of()
                : Json.parseObject(new String(body, 0, headerLength, StandardCharsets.UTF_8));
        return new Frame(type, requestId, header, body, headerLength, bodyLength - headerLength);
    }

    private void readFully(ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            if (channel.read(buf) < 0) {
                throw new EOFException("bridge closed the connection");
            }
        }
    }

    /**
     * True when the bridge closed this idle connection (it died or restarted): checked before a pooled
     * connection is reused, so a call does not fail only because it picked a connection to a dead bridge.
     */
    boolean isStale() {
        if (broken || !channel.isOpen()) {
            return true;
        }
        try {
            channel.configureBlocking(false);
            try {
                ByteBuffer probe = ByteBuffer.allocate(1);
                int n = channel.read(probe);
                return n != 0; // -1: closed by the bridge; >0: unexpected bytes on an idle connection
            } finally {
                channel.configureBlocking(true);
            }
        } catch (IOException e) {
            return true;
        }
    }

    @Override
    public void close() {
        broken = true;
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }
}
