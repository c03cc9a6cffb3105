package io.github.kafkatieredrsm.spark;

import java.io.FileInputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.ReadableByteChannel;

/**
 * A worker's stdout, read with one copy: the pipe's {@code FileChannel}, so an Arrow batch's body goes from
 * the kernel straight into the {@code ArrowBuf} Arrow's reader allocated for it.
 *
 * <p>Why: the process's {@code InputStream} copies every byte twice more (the JNI read into a malloc'd
 * buffer, then into a Java array) before Arrow copies it again into direct memory; the columnar scan
 * moves every value through here (~100 MB per million rows), and profiling the benchmark's
 * {@code sum(crc32(value))} put those copies in the executor threads beside Spark's own per-row work.
 * Small reads (the protocol's headers, Arrow's message metadata) are served from a 64 KiB buffer; a read
 * at least that big with nothing buffered goes straight into the caller's buffer.
 *
 * <p>The channel is the one behind {@code Process.getInputStream()} (a {@code FileInputStream} inside
 * the JDK's buffered pipe stream, reached by reflection: Spark's launcher opens {@code java.io}); where
 * that is not possible, the stream itself, as before. Everything read from the worker goes through one
 * {@code PipeInput}, so nothing is buffered twice.
 */
final class PipeInput implements ReadableByteChannel {
  private static final int BUFFER = 1 << 16;

  private final ReadableByteChannel source;
  private final ByteBuffer buffer = ByteBuffer.allocateDirect(BUFFER);

  PipeInput(InputStream processOutput) {
    source = channelOf(processOutput);
    buffer.limit(0); // nothing buffered: position..limit is what is left to read
  }

  private static ReadableByteChannel channelOf(InputStream stream) {
    try {
      Field in = FilterInputStream.class.getDeclaredField("in");
      in.setAccessible(true);
      if (stream instanceof FilterInputStream && in.get(stream) instanceof FileInputStream file) {
        return file.getChannel();
      }
    } catch (ReflectiveOperationException | RuntimeException ignored) {
      // not this JDK's layout, or java.io not opened: read through the stream
    }
    return Channels.newChannel(stream);
  }

  /** A blocking stream over the same bytes, for the protocol's framing ({@code DataInputStream}). */
  InputStream stream() {
    return Channels.newInputStream(this);
  }

  @Override
  public int read(ByteBuffer dst) throws IOException {
    if (!dst.hasRemaining()) {
      return 0;
    }
    if (!buffer.hasRemaining()) {
      if (dst.remaining() >= BUFFER) {
        return source.read(dst);
      }
      buffer.clear();
      int n = source.read(buffer);
      buffer.flip();
      if (n <= 0) {
        return n;
      }
    }
    int n = Math.min(dst.remaining(), buffer.remaining());
    ByteBuffer part = buffer.slice();
    part.limit(n);
    dst.put(part);
    buffer.position(buffer.position() + n);
    return n;
  }

  @Override
  public boolean isOpen() {
    return source.isOpen();
  }

  @Override
  public void close() throws IOException {
    source.close();
  }
}
