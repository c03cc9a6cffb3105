package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Micro-batches over what the RSM keeps tiering: every offset decision is {@code TieredStreamReader}'s
 * (the Python Data Source's stream reader), so the checkpoint holds the same offsets JSON on both paths.
 * Added here: {@code Trigger.AvailableNow} honouring {@code maxOffsetsPerTrigger}: this stream fixes the
 * end when the trigger starts (the latest offsets then) and walks to it in rate-limited micro-batches, as
 * Spark's Kafka source does. Spark's JVM interfaces for it are older than every PySpark line the reader
 * supports, so this holds on PySpark 4.1 too, where the Python Data Source runs such a backfill as one
 * micro-batch (its SupportsTriggerAvailableNow came with PySpark 4.2).
 */
final class KafkaTieredStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final CaseInsensitiveStringMap options;
  private final PartitionReaderFactory factory;
  private String availableNow;

  KafkaTieredStream(CaseInsensitiveStringMap options, PartitionReaderFactory factory) {
    this.options = options;
    this.factory = factory;
  }

  private JsonNode call(String op, ObjectNode h) {
    return PythonWorker.call(true, op, h).body;
  }

  @Override
  public Offset initialOffset() {
    return new JsonOffset(call("stream.initial", KafkaTieredTable.request(options)).path("offset").asText());
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    JsonNode max = call("stream.defaultLimit", KafkaTieredTable.request(options)).path("maxRows");
    return max.isNumber() ? ReadLimit.maxRows(max.asLong()) : ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNow = call("stream.latest", KafkaTieredTable.request(options)).path("offset").asText();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is used by this stream");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    ObjectNode h = KafkaTieredTable.request(options);
    if (start != null) {
      h.put("start", start.json());
    }
    if (limit instanceof ReadMaxRows m) {
      h.put("maxRows", m.maxRows());
    }
    if (availableNow != null) {
      h.put("cap", availableNow);
    }
    return new JsonOffset(call("stream.latest", h).path("offset").asText());
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    ObjectNode h = KafkaTieredTable.request(options);
    h.put("start", start == null ? "{}" : start.json());
    h.put("end", end.json());
    return KafkaTieredScan.partitions(PythonWorker.call(true, "stream.partitions", h));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return factory;
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new JsonOffset(json);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
