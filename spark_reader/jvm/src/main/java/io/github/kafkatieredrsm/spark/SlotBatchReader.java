package io.github.kafkatieredrsm.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.ReadableByteChannel;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.ForeignAllocation;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageMetadataResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One split's batches through its worker's shared-memory slots (spark_reader/handoff.py has the why and
 * the notices): a batch's vectors are loaded over the slot's own memory, so Spark's {@code ColumnVector}s
 * read the bytes the worker wrote, with no copy; a batch too big for a slot comes inline on the pipe.
 *
 * <p>A batch stays valid until Spark asks for the next one: only then is it acknowledged, and the worker
 * overwrites a slot only after the batch in it was acknowledged.
 */
final class SlotBatchReader implements AutoCloseable {
  private final PythonWorker worker;
  private final BufferAllocator allocator;
  private final ByteBuffer slots;
  private final ArrowBuf base;
  private VectorSchemaRoot root;
  private VectorLoader loader;
  private boolean held;

  SlotBatchReader(PythonWorker worker, BufferAllocator allocator) {
    this.worker = worker;
    this.allocator = allocator;
    this.slots = worker.slots();
    long address = MemoryUtil.getByteBufferAddress(slots);
    // the worker's mapping, seen through this task's allocator; the mapping is the worker's to free
    // (PythonWorker.destroy), and the allocation holds it so the collector cannot unmap it under us
    final ByteBuffer held = slots;
    this.base = allocator.wrapForeignAllocation(
        new ForeignAllocation(slots.capacity(), address) {
          private final ByteBuffer mapping = held;

          @Override
          protected void release0() {}
        });
  }

  /** The schema notice that starts the split. */
  void start() throws IOException {
    expect('S');
    byte[] message = new byte[worker.in.readInt()];
    worker.in.readFully(message);
    Schema schema = MessageSerializer.deserializeSchema(
        new ReadChannel(Channels.newChannel(new java.io.ByteArrayInputStream(message))));
    root = VectorSchemaRoot.create(schema, allocator);
    loader = new VectorLoader(root);
  }

  VectorSchemaRoot root() {
    return root;
  }

  /** Let go of the batch Spark is done with, then load the next one; false at the end of the split. */
  boolean loadNextBatch() throws IOException {
    if (held) {
      worker.out.write(1);
      worker.out.flush();
      held = false;
    }
    int kind = worker.in.readUnsignedByte();
    if (kind == 'E') {
      return false;
    }
    if (kind == 'B') {
      int slot = worker.in.readInt();
      int length = worker.in.readInt();
      loadFromSlot((long) slot * worker.slotBytes(), length);
    } else if (kind == 'I') {
      worker.in.readInt(); // the message's length: the message says it again
      try (ArrowRecordBatch batch = MessageSerializer.deserializeRecordBatch(
          new ReadChannel(worker.arrowInput()), allocator)) {
        loader.load(batch);
      }
    } else {
      throw new IOException("unexpected notice " + kind + " from the Python worker");
    }
    held = true;
    return true;
  }

  private void loadFromSlot(long offset, int length) throws IOException {
    ByteBuffer region = slots.duplicate();
    region.limit((int) offset + length).position((int) offset);
    ReadChannel channel = new ReadChannel(new BufferChannel(region.slice()));
    while (true) {
      MessageMetadataResult message = MessageSerializer.readMessage(channel);
      if (message == null) {
        throw new IOException("no record batch in the Python worker's slot");
      }
      if (message.headerType() == MessageHeader.RecordBatch) {
        ArrowBuf body = base.slice(offset + channel.bytesRead(), message.getMessageBodyLength());
        body.getReferenceManager().retain(); // deserializeRecordBatch gives the body's reference back
        try (ArrowRecordBatch batch = MessageSerializer.deserializeRecordBatch(message, body)) {
          loader.load(batch);
        }
        return;
      }
      // the slot's stream starts with its schema (no body): the next message is the batch
    }
  }

  @Override
  public void close() {
    try {
      if (root != null) {
        root.close();
      }
    } finally {
      base.close();
    }
  }

  private void expect(char kind) throws IOException {
    int got = worker.in.readUnsignedByte();
    if (got != kind) {
      throw new IOException("unexpected notice " + got + " from the Python worker (wanted " + kind + ")");
    }
  }

  /** Arrow's message reader over a slot's bytes (it reads only the small metadata; bodies are sliced). */
  private static final class BufferChannel implements ReadableByteChannel {
    private final ByteBuffer source;

    BufferChannel(ByteBuffer source) {
      this.source = source;
    }

    @Override
    public int read(ByteBuffer dst) {
      if (!source.hasRemaining()) {
        return -1;
      }
      int n = Math.min(dst.remaining(), source.remaining());
      dst.put(source.slice(source.position(), n));
      source.position(source.position() + n);
      return n;
    }

    @Override
    public boolean isOpen() {
      return true;
    }

    @Override
    public void close() {}
  }
}
