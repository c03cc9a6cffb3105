package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One split's rows: the Arrow IPC stream a Python worker writes, as {@code ColumnarBatch}es of column
 * vectors over the very buffers Arrow read (no row conversion, no copy; {@link DirectArrowColumnVector}
 * has why they are not Spark's {@code ArrowColumnVector}).
 *
 * <p>The batches come through the worker's shared-memory slots where it has them ({@link SlotBatchReader}:
 * the vectors are the slot's memory), else as an Arrow IPC stream on its pipe.
 *
 * <p>Memory: one batch at a time. Each batch is loaded into the same vectors, releasing the previous
 * batch's buffers (or handing its slot back to the worker), which Spark is done with by then (a batch is
 * valid until the next {@code next()}); the worker waits meanwhile. {@code close()} frees the last one.
 * A split read to its end gives its worker back; one closed early (a {@code limit}) kills it.
 *
 * <p>With no column asked for ({@code count()}), the worker sends no rows but their number, and the
 * reader hands Spark column-less batches of that many rows.
 */
final class ArrowPartitionReader implements PartitionReader<ColumnarBatch> {
  private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);
  private static final int COUNT_BATCH = 1 << 24;

  private final PythonWorker worker;
  private final BufferAllocator allocator;
  private final ArrowStreamReader reader; // the batches through the pipe, or
  private final SlotBatchReader slotReader; // through the worker's shared-memory slots
  private final boolean countOnly;
  private DirectArrowColumnVector[] columns;
  private ColumnarBatch current;
  private boolean ended;
  private long countLeft = -1;
  private long decompressed;
  private long maxRssKiB;

  /** Serializable: sent to executors; each task opens one reader on a worker of its executor. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final String[] columns;
    private final String python;

    /** {@code python}: the executors' interpreter, chosen on the driver as PySpark chooses it. */
    Factory(String[] columns, String python) {
      this.columns = columns;
      this.python = python;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("the kafka-tiered scan reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new ArrowPartitionReader((TieredInputPartition) partition, columns, python);
    }
  }

  ArrowPartitionReader(TieredInputPartition partition, String[] names, String python) {
    countOnly = names.length == 0;
    worker = PythonWorker.acquire(python);
    boolean slots = !countOnly && worker.slots() != null;
    ObjectNode h = PythonWorker.JSON.createObjectNode();
    h.put("op", "read");
    h.put("count", countOnly);
    h.put("slots", slots);
    ArrayNode cols = h.putArray("columns");
    for (String n : names) {
      cols.add(n);
    }
    allocator = ROOT.newChildAllocator("kafka-tiered " + partition, 0, Long.MAX_VALUE);
    SlotBatchReader opened = null;
    try {
      worker.send(h, partition.pickled);
      worker.expectStreamStart();
      if (slots) {
        opened = new SlotBatchReader(worker, allocator);
        opened.start();
      }
    } catch (IOException | RuntimeException e) {
      // the worker goes first (so it is never left running), then what this reader holds, in order
      RuntimeException failure = worker.died("reading " + partition, e);
      try {
        if (opened != null) {
          opened.close();
        }
        allocator.close();
      } catch (RuntimeException cleanup) {
        failure.addSuppressed(cleanup);
      }
      throw failure;
    }
    slotReader = opened;
    reader = slots ? null : new ArrowStreamReader(worker.arrowInput(), allocator);
  }

  private boolean loadNextBatch() throws IOException {
    return slotReader != null ? slotReader.loadNextBatch() : reader.loadNextBatch();
  }

  private VectorSchemaRoot root() throws IOException {
    return slotReader != null ? slotReader.root() : reader.getVectorSchemaRoot();
  }

  @Override
  public boolean next() throws IOException {
    if (countOnly) {
      return nextCount();
    }
    if (ended) {
      return false;
    }
    if (loadNextBatch()) {
      VectorSchemaRoot root = root();
      if (columns == null) {
        List<FieldVector> vectors = root.getFieldVectors();
        columns = new DirectArrowColumnVector[vectors.size()];
        for (int i = 0; i < columns.length; i++) {
          columns[i] = DirectArrowColumnVector.of(vectors.get(i));
        }
      }
      for (DirectArrowColumnVector column : columns) {
        column.reload(); // the batch just loaded has buffers of its own
      }
      current = new ColumnarBatch(columns, root.getRowCount());
      return true;
    }
    finish();
    return false;
  }

  private boolean nextCount() throws IOException {
    if (countLeft < 0) {
      while (loadNextBatch()) {
        // a count sends no batch; the stream is only its schema and end marker
      }
      countLeft = finish();
    }
    if (countLeft == 0) {
      return false;
    }
    int n = (int) Math.min(countLeft, COUNT_BATCH);
    countLeft -= n;
    current = new ColumnarBatch(new ColumnVector[0], n);
    return true;
  }

  /** The trailer: rows sent (or the source's error, thrown as its one line); the worker goes back. */
  private long finish() throws IOException {
    ended = true;
    try {
      com.fasterxml.jackson.databind.JsonNode trailer = worker.readTrailer();
      decompressed = trailer.path("decompressed").asLong();
      maxRssKiB = trailer.path("maxRssKiB").asLong();
      worker.release();
      return trailer.path("rows").asLong();
    } catch (KafkaTieredException e) {
      worker.release(); // the exchange ended cleanly: the worker can serve the next task
      throw e;
    } catch (IOException | RuntimeException e) {
      worker.destroy();
      throw e;
    }
  }

  @Override
  public org.apache.spark.sql.connector.metric.CustomTaskMetric[] currentMetricsValues() {
    return new org.apache.spark.sql.connector.metric.CustomTaskMetric[] {
      WorkerMetrics.value(WorkerMetrics.DECOMPRESSED, decompressed),
      WorkerMetrics.value(WorkerMetrics.MAX_RSS, maxRssKiB)
    };
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    if (!ended) {
      ended = true;
      worker.destroy(); // abandoned mid-stream: its pipe still holds rows nobody will read
    }
    try {
      if (slotReader != null) {
        slotReader.close();
      } else {
        reader.close();
      }
    } finally {
      allocator.close();
    }
  }
}
