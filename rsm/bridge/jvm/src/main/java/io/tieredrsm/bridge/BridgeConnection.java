package io.tieredrsm.bridge;

import java.io.EOFException;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * One handshaken connection to the bridge (protocol v1, see PROTOCOL.md). It carries one request at a
 * time; the pool in {@link PortableBridgeRemoteStorageManager} hands it to one Kafka thread after another.
 */
final class BridgeConnection implements AutoCloseable {
    static final byte HELLO = 1;
    static final byte REQUEST = 2;
    static final byte RESPONSE = 3;
    static final byte DATA = 4;
    static final byte END = 5;
    static final byte ERROR = 6;
    static final byte CANCEL = 7;
    /** Capability "shm": server -> client, payload u32 slot, u32 length (the bytes are in that slot). */
    static final byte SHM_DATA = 8;
    /** Capability "shm": client -> server, payload u32 count (the oldest held slots are free again). */
    static final byte SHM_RELEASE = 9;
    /** Capability "shm" with an arena: server -> client, payload u64 offset, u32 length (bytes in the arena). */
    static final byte ARENA_DATA = 10;
    static final String CAP_SHM = "shm";

    static final int PREFIX_SIZE = 13;
    static final int MAX_FRAME_BYTES = 16 * 1024 * 1024 + 4 * 1024 * 1024;
    static final String MAGIC = "rsm-bridge";
    static final int PROTOCOL_VERSION = 1;

    /**
     * A decoded frame. For DATA frames {@code payload} is null: the {@code payloadLength} bytes are still
     * in the connection, read with {@link #readPayload} (straight from the receive buffer into the
     * caller's array); other frames carry their payload in {@code payload}.
     */
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

    /**
     * Closes connections whose answer is late, so a hung bridge cannot block a Kafka thread forever.
     * One periodic scan of the open connections' deadlines instead of a timer per read: a fetch reads
     * many frames, and scheduling and cancelling a task for each cost more than the read itself.
     */
    private static final Set<BridgeConnection> OPEN = ConcurrentHashMap.newKeySet();
    private static final ScheduledThreadPoolExecutor WATCHDOG = watchdog();

    private static ScheduledThreadPoolExecutor watchdog() {
        ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "rsm-bridge-watchdog");
            t.setDaemon(true);
            return t;
        });
        ex.scheduleWithFixedDelay(BridgeConnection::expireLate, 100, 100, TimeUnit.MILLISECONDS);
        return ex;
    }

    private static void expireLate() {
        long now = System.nanoTime();
        for (BridgeConnection c : OPEN) {
            long deadline = c.deadlineNanos;
            if (deadline != 0 && now - deadline > 0) {
                c.timedOut = true;
                c.close();
            }
        }
    }

    /**
     * The bridge refused the connection because it serves {@code bridge.max.connections} already: it is
     * alive (a probe counts it as answering), the call may be retried later.
     */
    static final class BusyException extends IOException {
        BusyException(String message) {
            super(message);
        }
    }

    /** Receive buffer size: a read system call fills it with as much of the stream as has arrived. */
    static final int RECEIVE_BUFFER_BYTES = 64 * 1024;

    private final SocketChannel channel;
    private final long timeoutMs;
    private volatile boolean timedOut;
    /** System.nanoTime() by which the blocked read must make progress; 0 while not reading. */
    private volatile long deadlineNanos;
    /** Bytes received and not yet consumed, between position and limit (direct: one copy from the kernel). */
    private final ByteBuffer in = ByteBuffer.allocateDirect(RECEIVE_BUFFER_BYTES).flip();
    /** Payload bytes of the current DATA frame not read yet (skipped before the next frame is read). */
    private int pendingPayload;
    final Map<String, Object> serverHello;
    volatile boolean broken;
    /**
     * A pooled connection idle this long is dropped rather than reused: half the bridge's idle timeout
     * (its HELLO's {@code idle_timeout_ms}), so the bridge never closes one just as a call picks it up.
     * 0: never.
     */
    private final long retireAfterNanos;
    /** System.nanoTime() when the connection went back to the pool. */
    private long idleSinceNanos;
    /** The bridge's shared-memory ring (read-only mapping), or null: fetch answers come as DATA frames. */
    private volatile MappedByteBuffer ring;
    /** The bridge's chunk arena (read-only mapping), or null: pieces come through ring slots only. */
    private volatile MappedByteBuffer arena;
    private int ringSlots;
    private int ringSlotBytes;
    /** Request id of a stream cancelled without waiting for its END (0: none): read before the next use. */
    private int owedEnd;
    /** Slots read to their end whose SHM_RELEASE goes out with the next frame sent. */
    private int owedReleases;
    /** A cancelled stream's bytes still arriving in DATA frames are skipped, up to this many. */
    static final int MAX_DRAIN_BYTES = 8 * 1024 * 1024;

    BridgeConnection(Path socketPath, String clientName) throws IOException {
        this(socketPath, clientName, 30_000);
    }

    BridgeConnection(Path socketPath, String clientName, long timeoutMs) throws IOException {
        this(socketPath, clientName, timeoutMs, false);
    }

    /** With {@code shm}, offers the "shm" capability and maps the ring the bridge creates for it. */
    BridgeConnection(Path socketPath, String clientName, long timeoutMs, boolean shm) throws IOException {
        this.timeoutMs = timeoutMs;
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            ch.connect(UnixDomainSocketAddress.of(socketPath));
            this.channel = ch;
            OPEN.add(this);
            Map<String, Object> h = new java.util.LinkedHashMap<>();
            h.put("magic", MAGIC);
            h.put("versions", List.of(PROTOCOL_VERSION));
            h.put("client", clientName);
            if (shm) {
                h.put("capabilities", List.of(CAP_SHM));
            }
            send(HELLO, 0, Json.write(h), null, 0, 0);
            Frame hello = read();
            if (hello.type == ERROR) {
                String refusal = "bridge refused the handshake: " + hello.header.get("code") + ": "
                        + hello.header.get("message");
                throw "BUSY".equals(hello.header.get("code")) ? new BusyException(refusal) : new IOException(refusal);
            }
            if (hello.type != HELLO || !MAGIC.equals(hello.header.get("magic"))) {
                throw new IOException("bridge answered the handshake with frame type " + hello.type);
            }
            this.serverHello = hello.header;
            Object idleMs = hello.header.get("idle_timeout_ms");
            this.retireAfterNanos = idleMs instanceof Number ? ((Number) idleMs).longValue() * 500_000L : 0;
            if (shm && hello.header.get("shm") instanceof Map
                    && hello.header.get("capabilities") instanceof List
                    && ((List<?>) hello.header.get("capabilities")).contains(CAP_SHM)) {
                mapRing((Map<?, ?>) hello.header.get("shm"));
                if (ring != null && hello.header.get("arena") instanceof Map) {
                    mapArena((Map<?, ?>) hello.header.get("arena"));
                }
                // "mapped" (or not): the bridge removes the file's name when this first frame arrives
                send(SHM_RELEASE, 0, null, new byte[4], 0, 4);
            }
        } catch (IOException | RuntimeException e) {
            OPEN.remove(this);
            unmapRing();
            ch.close();
            throw e;
        }
    }

    private void mapRing(Map<?, ?> desc) {
        try {
            Path path = Path.of(String.valueOf(desc.get("path")));
            int slots = ((Number) desc.get("slots")).intValue();
            int slotBytes = ((Number) desc.get("slot_bytes")).intValue();
            long size = (long) slots * slotBytes;
            if (slots < 1 || slotBytes < 1 || size > Integer.MAX_VALUE) {
                throw new IOException("bad ring shape " + slots + " x " + slotBytes);
            }
            try (FileChannel fc = FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
                if (fc.size() < size) {
                    throw new IOException("ring file " + path + " is smaller than " + size + " bytes");
                }
                this.ring = fc.map(FileChannel.MapMode.READ_ONLY, 0, size);
            }
            this.ringSlots = slots;
            this.ringSlotBytes = slotBytes;
        } catch (IOException | RuntimeException e) {
            // not fatal: this connection's fetches use socket DATA frames
            this.ring = null;
        }
    }

    private void mapArena(Map<?, ?> desc) {
        try {
            Path path = Path.of(String.valueOf(desc.get("path")));
            long size = ((Number) desc.get("bytes")).longValue();
            if (size < 1 || size > Integer.MAX_VALUE) {
                throw new IOException("bad arena size " + size);
            }
            try (FileChannel fc = FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
                if (fc.size() < size) {
                    throw new IOException("arena file " + path + " is smaller than " + size + " bytes");
                }
                this.arena = fc.map(FileChannel.MapMode.READ_ONLY, 0, size);
            }
        } catch (IOException | RuntimeException e) {
            // not fatal: every piece then comes through the ring
            this.arena = null;
        }
    }

    /** True when the bridge may announce pieces in its chunk arena (ARENA_DATA) on this connection. */
    boolean hasArena() {
        return arena != null;
    }

    /** Validates an ARENA_DATA announcement (offset, length). */
    void checkArena(long offset, int length) throws IOException {
        MappedByteBuffer a = arena;
        if (a == null || offset < 0 || length < 0 || offset + length > a.capacity()) {
            throw new IOException("ARENA_DATA frame (offset " + offset + ", length " + length + ") outside the arena");
        }
    }

    /** Copies {@code len} bytes at {@code offset} of the arena into {@code b} (bounds checked by checkArena). */
    void copyFromArena(long offset, byte[] b, int off, int len) throws IOException {
        MappedByteBuffer a = arena;
        if (a == null) {
            throw new IOException("chunk arena closed");
        }
        a.get((int) offset, b, off, len);
    }

    /** True when fetch answers on this connection may come through the shared-memory ring. */
    boolean hasRing() {
        return ring != null;
    }

    /**
     * Copies {@code len} bytes at {@code pos} in slot {@code slot} of the ring into {@code b}. The caller
     * checked the bounds with {@link #checkSlot}.
     */
    void copyFromRing(int slot, int pos, byte[] b, int off, int len) throws IOException {
        MappedByteBuffer r = ring;
        if (r == null) {
            throw new IOException("shared-memory ring closed");
        }
        r.get(slot * ringSlotBytes + pos, b, off, len);
    }

    /** Validates an SHM_DATA announcement (slot, length). */
    void checkSlot(int slot, int length) throws IOException {
        if (ring == null || slot < 0 || slot >= ringSlots || length < 0 || length > ringSlotBytes) {
            throw new IOException("SHM_DATA frame (slot " + slot + ", length " + length + ") outside the ring");
        }
    }

    /**
     * Returns the oldest held slot with the next frame this connection sends (in the same write): a reader
     * that is done with its slot does not wake the bridge just to say so.
     */
    void oweRelease() {
        owedReleases++;
    }

    /**
     * Returns the oldest held slot when it helps: with the next frame sent, or before this connection
     * waits for the bridge (see {@link #need}), or now once half the ring is owed (the bridge keeps at least
     * half a ring of read-ahead). A reader taking pieces that have already arrived writes once per half ring,
     * not once per piece.
     */
    void releaseLazily() throws IOException {
        owedReleases++;
        if (owedReleases >= Math.max(1, ringSlots / 2)) {
            flushReleases();
        }
    }

    private void flushReleases() throws IOException {
        ByteBuffer b = releases();
        while (b != null && b.hasRemaining()) {
            channel.write(b);
        }
    }

    /** The owed SHM_RELEASE frame (null when none is owed); the debt is paid once it is written. */
    private ByteBuffer releases() {
        if (owedReleases == 0) {
            return null;
        }
        ByteBuffer b = ByteBuffer.allocate(PREFIX_SIZE + 4);
        b.putInt(9 + 4).put(SHM_RELEASE).putInt(0).putInt(0).putInt(owedReleases).flip();
        owedReleases = 0;
        return b;
    }

    /**
     * Consumes the next frame when it is an END of {@code requestId} already in the receive buffer (no
     * system call) and returns its header; otherwise leaves everything as it is and returns null.
     */
    Map<String, Object> bufferedEnd(int requestId) throws IOException {
        if (pendingPayload > 0 || in.remaining() < PREFIX_SIZE) {
            return null;
        }
        int at = in.position();
        int length = in.getInt(at);
        if (in.get(at + 4) != END || in.getInt(at + 5) != requestId || length < 9 || in.remaining() < 4 + length) {
            return null;
        }
        return read().header;
    }

    /**
     * Cancels stream {@code requestId}; owed slot releases go in the same write, so the bridge (waiting for
     * them at the fetch-size mark) wakes once. The stream's END is not waited for here: {@link #settle}
     * reads it before the connection's next use, by which time it has usually arrived.
     */
    void cancel(int requestId) throws IOException {
        owedEnd = requestId;
        send(CANCEL, requestId, null, null, 0, 0);
    }

    private void unmapRing() {
        MappedByteBuffer r = ring;
        ring = null;
        unmap(r);
        MappedByteBuffer a = arena;
        arena = null;
        unmap(a);
    }

    private static void unmap(MappedByteBuffer r) {
        if (r == null) {
            return;
        }
        // free the mapping now rather than at some later GC (sun.misc.Unsafe.invokeCleaner, jdk.unsupported)
        try {
            Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
            java.lang.reflect.Field f = unsafeClass.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            Object unsafe = f.get(null);
            unsafeClass.getMethod("invokeCleaner", ByteBuffer.class).invoke(unsafe, r);
        } catch (ReflectiveOperationException | RuntimeException ignored) {
            // the GC unmaps it eventually
        }
    }

    /** The pool took the connection back: its idle time starts now. */
    void markIdle() {
        idleSinceNanos = System.nanoTime();
    }

    /** True when the connection has been idle in the pool long enough that the bridge may close it soon. */
    boolean retireDue() {
        return retireAfterNanos > 0 && System.nanoTime() - idleSinceNanos > retireAfterNanos;
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
        ByteBuffer owed = type == SHM_RELEASE ? null : releases(); // owed releases ride along
        List<ByteBuffer> list = new java.util.ArrayList<>(3);
        if (owed != null) {
            list.add(owed);
        }
        list.add(p);
        if (payload != null && len > 0) {
            list.add(ByteBuffer.wrap(payload, off, len));
        }
        ByteBuffer[] bufs = list.toArray(new ByteBuffer[0]);
        long remaining = p.remaining() + (long) len + (owed == null ? 0 : owed.remaining());
        while (remaining > 0) {
            remaining -= channel.write(bufs);
        }
    }

    /** Reads one frame; fails (and closes the connection) when the bridge stalls beyond the timeout. */
    Frame read() throws IOException {
        try {
            return readFrame();
        } catch (IOException e) {
            if (timedOut) {
                throw new IOException("no answer from the bridge within " + timeoutMs + " ms", e);
            }
            throw e;
        }
    }

    private Frame readFrame() throws IOException {
        while (pendingPayload > 0) { // the rest of a DATA frame nobody read (a cancelled stream)
            need(1);
            int n = Math.min(pendingPayload, in.remaining());
            in.position(in.position() + n);
            pendingPayload -= n;
        }
        need(PREFIX_SIZE);
        int length = in.getInt();
        byte type = in.get();
        int requestId = in.getInt();
        int headerLength = in.getInt();
        if (length < 9 || length > MAX_FRAME_BYTES || headerLength < 0 || headerLength > length - 9) {
            throw new IOException("malformed frame from the bridge (length " + length + ", header "
                    + headerLength + ")");
        }
        int payloadLength = length - 9 - headerLength;
        Map<String, Object> header = Map.of();
        if (headerLength > 0) {
            byte[] h = new byte[headerLength];
            readFully(h, 0, headerLength);
            header = Json.parseObject(new String(h, StandardCharsets.UTF_8));
        }
        if (type == DATA) {
            pendingPayload = payloadLength;
            return new Frame(type, requestId, header, null, 0, payloadLength);
        }
        byte[] payload = new byte[payloadLength];
        readFully(payload, 0, payloadLength);
        return new Frame(type, requestId, header, payload, 0, payloadLength);
    }

    /**
     * Up to {@code len} bytes of the current DATA frame's payload into {@code b}; blocks only when none
     * has arrived yet. Returns 0 when the frame is consumed.
     */
    int readPayload(byte[] b, int off, int len) throws IOException {
        int want = Math.min(len, pendingPayload);
        if (want <= 0) {
            return 0;
        }
        if (!in.hasRemaining() && want >= in.capacity()) {
            // a large read (Kafka reads its whole fetch into one buffer): one system call straight
            // towards the caller's array instead of several through the receive buffer
            int n = readDirect(ByteBuffer.wrap(b, off, want));
            pendingPayload -= n;
            return n;
        }
        need(1);
        int n = Math.min(want, in.remaining());
        in.get(b, off, n);
        pendingPayload -= n;
        return n;
    }

    /** Payload bytes of the current DATA frame readable without blocking. */
    int availablePayload() {
        return Math.min(pendingPayload, in.remaining());
    }

    private void readFully(byte[] b, int off, int len) throws IOException {
        while (len > 0) {
            need(1);
            int n = Math.min(len, in.remaining());
            in.get(b, off, n);
            off += n;
            len -= n;
        }
    }

    private int readDirect(ByteBuffer dst) throws IOException {
        flushReleases(); // about to wait for the bridge, as in need()
        try {
            if (timeoutMs > 0) {
                deadlineNanos = System.nanoTime() + timeoutMs * 1_000_000L;
            }
            int n = channel.read(dst);
            if (n < 0) {
                throw new EOFException("bridge closed the connection");
            }
            return n;
        } finally {
            deadlineNanos = 0;
        }
    }

    /** Ensures at least {@code n} (at most the buffer size) unread bytes are buffered. */
    private void need(int n) throws IOException {
        if (in.remaining() >= n) {
            return;
        }
        // about to wait for the bridge: give back the slots already read first, or it may be waiting for them
        flushReleases();
        in.compact();
        try {
            if (timeoutMs > 0) {
                deadlineNanos = System.nanoTime() + timeoutMs * 1_000_000L;
            }
            while (in.position() < n) {
                if (channel.read(in) < 0) {
                    throw new EOFException("bridge closed the connection");
                }
            }
        } finally {
            deadlineNanos = 0;
            in.flip();
        }
    }

    /**
     * Reads what is left of a stream cancelled by {@link #cancel}: slots it was sent are given back unread,
     * DATA frames skipped, up to its END (or ERROR). Returns false when the connection is unusable (broken,
     * or more than {@link #MAX_DRAIN_BYTES} still to skip: cheaper to drop it).
     */
    boolean settle() {
        int rid = owedEnd;
        if (rid == 0) {
            return !broken;
        }
        try {
            long drained = 0;
            while (true) {
                Frame f = read();
                if (f.requestId != rid) {
                    return false;
                }
                if (f.type == SHM_DATA || f.type == ARENA_DATA) {
                    oweRelease(); // sent before our CANCEL arrived: given back unread (before any wait, see need)
                } else if (f.type == DATA) {
                    drained += f.payloadLength;
                    if (drained > MAX_DRAIN_BYTES) {
                        return false;
                    }
                } else if (f.type == END || f.type == ERROR) {
                    owedEnd = 0;
                    return !broken;
                } else {
                    return false;
                }
            }
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }

    /**
     * True when the bridge closed this idle connection (it died or restarted): checked before a pooled
     * connection is reused, so a call does not fail only because it picked a connection to a dead bridge.
     */
    boolean isStale() {
        if (broken || !channel.isOpen() || in.hasRemaining() || pendingPayload > 0) {
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
        OPEN.remove(this);
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    /**
     * Unmaps the ring once no reader can use it any more: called by the pool when it drops the
     * connection (not by the watchdog's close, which may race with a reader copying from a slot).
     */
    void dispose() {
        close();
        unmapRing();
    }
}
