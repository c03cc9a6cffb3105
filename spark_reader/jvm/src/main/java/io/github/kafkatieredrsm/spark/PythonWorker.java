package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.ReadableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;

/**
 * One Python worker process ({@code python -m spark_reader.jvm_worker}) and the pool that reuses them.
 *
 * <p>Why a process per task slot: every decision and every byte decoded is Python's (the one implementation
 * of the source's rules, see spark_reader/jvm_worker.py); one process per concurrently running task
 * decodes on every core at once with no GIL between them, and the hand-off's flow control (two shared
 * memory slots, or the pipe: spark_reader/handoff.py) bounds what a task
 * holds. A worker is taken from the pool for one request (a planning call, or one split's stream) and given
 * back when the exchange ended cleanly; one abandoned mid-stream is killed instead, as its pipe still
 * holds rows nobody will read.
 *
 * <p>The interpreter is chosen on the driver as PySpark chooses it: {@code spark.pyspark.python} /
 * {@code PYSPARK_PYTHON} for executors (the reader factory carries it to them), with
 * {@code spark.pyspark.driver.python} / {@code PYSPARK_DRIVER_PYTHON} first for planning on the driver;
 * else {@code python3}. The environment is the executor's own ({@code spark.executorEnv.PYTHONPATH}
 * included).
 */
final class PythonWorker implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, ConcurrentLinkedDeque<PythonWorker>> IDLE = new ConcurrentHashMap<>();
  private static final int MAX_IDLE = Math.max(2, Runtime.getRuntime().availableProcessors());
  /** Bytes per shared-memory slot (spark_reader/handoff.py); 0 keeps every batch on the pipe. */
  static final long SLOT_BYTES = slotBytes(System.getenv("KAFKA_TIERED_SLOT_BYTES"));
  private static final Path SHM = Paths.get("/dev/shm");

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(PythonWorker::closeAll, "kafka-tiered-workers"));
  }

  private final String python;
  private final Process process;
  final DataOutputStream out;
  private final PipeInput input;
  final DataInputStream in;
  private boolean broken;
  private boolean slotsTried;
  private MappedByteBuffer slots;

  private PythonWorker(String python) throws IOException {
    this.python = python;
    ProcessBuilder pb = new ProcessBuilder(python, "-m", "spark_reader.jvm_worker");
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    this.process = pb.start();
    this.out = new DataOutputStream(new BufferedOutputStream(process.getOutputStream(), 1 << 16));
    this.input = new PipeInput(process.getInputStream());
    this.in = new DataInputStream(input.stream());
  }

  private static long slotBytes(String setting) {
    try {
      return setting == null || setting.isEmpty() ? 16L << 20 : Long.parseLong(setting.trim());
    } catch (NumberFormatException e) {
      return 16L << 20;
    }
  }

  /**
   * This worker's two shared-memory slots, mapped on its first read (spark_reader/handoff.py says why):
   * a {@code /dev/shm} file this JVM creates, the worker maps and reserves, and this JVM unlinks at once,
   * so nothing is left behind whatever happens to either process. Null where that cannot be done (no
   * /dev/shm, a full tmpfs, slots turned off): the batches then come through the pipe.
   */
  MappedByteBuffer slots() {
    if (slotsTried) {
      return slots;
    }
    slotsTried = true;
    if (SLOT_BYTES <= 0 || !Files.isDirectory(SHM) || !Files.isWritable(SHM)) {
      return null;
    }
    Path file = null;
    try {
      file = Files.createTempFile(SHM, "kafka-tiered-", ".slots");
      MappedByteBuffer mapped;
      try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "rw")) {
        raf.setLength(2 * SLOT_BYTES);
        mapped = raf.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, 2 * SLOT_BYTES);
      }
      ObjectNode h = JSON.createObjectNode();
      h.put("op", "shm.map");
      h.put("path", file.toString());
      h.put("slotBytes", SLOT_BYTES);
      send(h, null);
      if (readReply().body.has("slotBytes")) {
        slots = mapped;
      }
    } catch (IOException | RuntimeException e) {
      // the pipe, as before: the worker said why on its stderr, or the file could not be made
    } finally {
      if (file != null) {
        try {
          Files.deleteIfExists(file);
        } catch (IOException ignored) {
          // tmpfs: nothing to do
        }
      }
    }
    return slots;
  }

  long slotBytes() {
    return SLOT_BYTES;
  }

  /**
   * Unmap the slots now rather than when the garbage collector finds the buffer: the mapping keeps the
   * unlinked file's reserved pages in /dev/shm, and off-heap pages do not prompt a collection, so killed
   * workers' slots would pile up there. Called when the worker is destroyed, after which nothing reads
   * its batches (Spark asked for the next one, or the task is over); vectors still over the slot are
   * only released, which touches no slot memory. Where sun.misc.Unsafe cannot do it, the collector will.
   */
  private void unmapSlots() {
    MappedByteBuffer mapped = slots;
    slots = null;
    if (mapped == null) {
      return;
    }
    try {
      Class<?> unsafe = Class.forName("sun.misc.Unsafe");
      java.lang.reflect.Field field = unsafe.getDeclaredField("theUnsafe");
      field.setAccessible(true);
      unsafe.getMethod("invokeCleaner", ByteBuffer.class).invoke(field.get(null), mapped);
    } catch (ReflectiveOperationException | RuntimeException e) {
      // left to the garbage collector
    }
  }

  /** The interpreter PySpark would run here ({@code driver}: the planning side). */
  static String pythonExec(boolean driver) {
    SparkEnv env = SparkEnv.get();
    SparkConf conf = env == null ? null : env.conf();
    List<String> candidates = new ArrayList<>();
    if (driver) {
      candidates.add(conf == null ? null : conf.get("spark.pyspark.driver.python", null));
      candidates.add(System.getenv("PYSPARK_DRIVER_PYTHON"));
    }
    candidates.add(conf == null ? null : conf.get("spark.pyspark.python", null));
    candidates.add(System.getenv("PYSPARK_PYTHON"));
    for (String c : candidates) {
      if (c != null && !c.isEmpty()) {
        return c;
      }
    }
    return "python3";
  }

  /** An idle worker for this interpreter, or a new one. */
  static PythonWorker acquire(String python) {
    PythonWorker w = IDLE.computeIfAbsent(python, k -> new ConcurrentLinkedDeque<>()).pollFirst();
    while (w != null && !w.process.isAlive()) {
      w.destroy();
      w = IDLE.get(python).pollFirst();
    }
    if (w != null) {
      return w;
    }
    try {
      return new PythonWorker(python);
    } catch (IOException e) {
      throw new IllegalStateException(
          "kafka-tiered: cannot start the Python worker '" + python + " -m spark_reader.jvm_worker' "
              + "(set spark.pyspark.python or PYSPARK_PYTHON to an interpreter with the package): "
              + e.getMessage(), e);
    }
  }

  /** Give the worker back after a clean exchange; kill it otherwise. */
  void release() {
    ConcurrentLinkedDeque<PythonWorker> idle = IDLE.computeIfAbsent(python, k -> new ConcurrentLinkedDeque<>());
    if (broken || !process.isAlive() || idle.size() >= MAX_IDLE) {
      destroy();
    } else {
      idle.addFirst(this);
    }
  }

  /** The error for a worker that stopped answering: its exit status (its stderr is in this JVM's log). */
  IllegalStateException died(String what, Exception cause) {
    String status = "";
    try {
      if (process.waitFor(2, TimeUnit.SECONDS)) {
        status = " (exit status " + process.exitValue() + ")";
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    destroy();
    return new IllegalStateException(
        "kafka-tiered: the Python worker '" + python + " -m spark_reader.jvm_worker' failed during " + what
            + status + ": " + cause + "; its stderr is in this JVM's log (can it import spark_reader? "
            + "PYTHONPATH, spark.pyspark.python)", cause);
  }

  void destroy() {
    broken = true;
    unmapSlots();
    try {
      out.close();
    } catch (IOException ignored) {
      // the process is going anyway
    }
    process.destroy();
    try {
      if (!process.waitFor(2, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    release();
  }

  static void closeAll() {
    for (ConcurrentLinkedDeque<PythonWorker> idle : IDLE.values()) {
      PythonWorker w;
      while ((w = idle.pollFirst()) != null) {
        w.destroy();
      }
    }
  }

  void send(ObjectNode header, byte[] blob) throws IOException {
    byte[] h = JSON.writeValueAsBytes(header);
    out.writeInt(h.length);
    out.write(h);
    out.writeInt(blob == null ? 0 : blob.length);
    if (blob != null) {
      out.write(blob);
    }
    out.flush();
  }

  /** A reply: the JSON body and the blobs. */
  static final class Reply {
    final JsonNode body;
    final List<byte[]> blobs;

    Reply(JsonNode body, List<byte[]> blobs) {
      this.body = body;
      this.blobs = blobs;
    }
  }

  private JsonNode readJson() throws IOException {
    byte[] b = new byte[in.readInt()];
    in.readFully(b);
    return JSON.readTree(new String(b, StandardCharsets.UTF_8));
  }

  /** The trailer after a read's Arrow stream: {rows, decompressed, ...} or the error. */
  JsonNode readTrailer() throws IOException {
    int status = in.readUnsignedByte();
    JsonNode body = readJson();
    failIfError(status, body);
    return body;
  }

  void expectStreamStart() throws IOException {
    int status = in.readUnsignedByte();
    if (status != 0) {
      throw new IOException("unexpected reply " + status + " from the Python worker");
    }
  }

  /**
   * The worker's stdout as a channel for Arrow's stream reader ({@link PipeInput}: a batch's body is read
   * straight into Arrow's buffer); closing it does not close the pipe.
   */
  ReadableByteChannel arrowInput() {
    return new ReadableByteChannel() {
      private boolean open = true;

      @Override
      public int read(ByteBuffer dst) throws IOException {
        return input.read(dst);
      }

      @Override
      public boolean isOpen() {
        return open;
      }

      @Override
      public void close() {
        open = false;
      }
    };
  }

  /** A request-reply exchange's reply; the source's own error becomes one line (the exchange is over). */
  private Reply readReply() throws IOException {
    int status = in.readUnsignedByte();
    JsonNode body = readJson();
    int n = in.readInt();
    List<byte[]> blobs = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      byte[] b = new byte[in.readInt()];
      in.readFully(b);
      blobs.add(b);
    }
    failIfError(status, body);
    return new Reply(body, blobs);
  }

  /** A reply or trailer with an error status: the source's own one line (the exchange itself is over). */
  private static void failIfError(int status, JsonNode body) {
    if (status != 0) {
      throw new KafkaTieredException(body.path("error").asText("the Python worker failed"));
    }
  }

  /** One request-reply exchange on a pooled worker: the source's own error becomes one line. */
  static Reply call(boolean driver, String op, ObjectNode header) {
    header.put("op", op);
    PythonWorker w = acquire(pythonExec(driver));
    try {
      w.send(header, null);
      Reply reply = w.readReply();
      w.release();
      return reply;
    } catch (KafkaTieredException e) {
      w.release(); // the exchange ended cleanly: the worker can serve the next one
      throw e;
    } catch (IOException e) {
      throw w.died(op, e);
    }
  }
}
