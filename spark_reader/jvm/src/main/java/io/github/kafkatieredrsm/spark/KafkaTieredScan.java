package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import java.util.OptionalLong;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The columnar scan: planning is the Python planner's ({@code FilteringBatchReader}), rows are Arrow
 * batches from the Python workers ({@link ArrowPartitionReader}). Spark pushes filters (the Python side
 * says which it applies exactly: {@code spark_reader.filters}) and the columns it needs: a query without
 * {@code value} never copies a value, and one needing no column ({@code count()}) gets counts from batch
 * headers, decompressing nothing ({@code spark_reader.counting}). The planner packs its splits into
 * tasks as Spark packs files ({@link #packing()}, {@code spark_reader.packing}).
 */
final class KafkaTieredScan implements Scan, Batch, SupportsReportStatistics {
  /** Set once this scan serves a stream (toMicroBatchStream): then it has no batch plan to report. */
  private volatile boolean streaming;

  private final StructType readSchema;
  private final CaseInsensitiveStringMap options;
  private final ArrayNode filters;
  private final String pushed;
  private InputPartition[] planned;
  private long estimatedRows = -1;
  private long estimatedBytes = -1;

  private KafkaTieredScan(
      StructType readSchema, CaseInsensitiveStringMap options, ArrayNode filters, String pushed) {
    this.readSchema = readSchema;
    this.options = options;
    this.filters = filters;
    this.pushed = pushed;
  }

  /** Filters and required columns from Spark's optimizer, then the scan. */
  static final class Builder
      implements ScanBuilder, SupportsPushDownFilters, SupportsPushDownRequiredColumns {
    private final StructType schema;
    private final CaseInsensitiveStringMap options;
    private StructType required;
    private Filter[] accepted = new Filter[0];
    private ArrayNode acceptedJson = PythonWorker.JSON.createArrayNode();

    Builder(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.options = options;
      this.required = schema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> sendable = new ArrayList<>();
      ArrayNode specs = PythonWorker.JSON.createArrayNode();
      for (Filter f : filters) {
        ObjectNode spec = toJson(f);
        if (spec != null) {
          sendable.add(f);
          specs.add(spec);
        }
      }
      Set<Filter> taken = new HashSet<>();
      acceptedJson = PythonWorker.JSON.createArrayNode();
      if (!sendable.isEmpty()) {
        ObjectNode h = KafkaTieredTable.request(options);
        h.set("filters", specs);
        for (JsonNode i : PythonWorker.call(true, "push", h).body.path("accepted")) {
          taken.add(sendable.get(i.asInt()));
          acceptedJson.add(specs.get(i.asInt()));
        }
      }
      accepted = taken.toArray(new Filter[0]);
      return Arrays.stream(filters).filter(f -> !taken.contains(f)).toArray(Filter[]::new);
    }

    @Override
    public Filter[] pushedFilters() {
      return accepted;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      Set<String> names = new HashSet<>(Arrays.asList(requiredSchema.fieldNames()));
      List<StructField> kept = new ArrayList<>();
      for (StructField f : schema.fields()) {
        if (names.contains(f.name())) {
          kept.add(f);
        }
      }
      required = new StructType(kept.toArray(new StructField[0]));
    }

    @Override
    public Scan build() {
      return new KafkaTieredScan(required, options, acceptedJson, Arrays.toString(accepted));
    }
  }

  /** A filter as the Python side's pushFilters takes it, or null for a kind or value it cannot take. */
  static ObjectNode toJson(Filter f) {
    String kind;
    String attribute;
    Object[] values;
    if (f instanceof EqualTo e) {
      kind = "EqualTo"; attribute = e.attribute(); values = new Object[] {e.value()};
    } else if (f instanceof GreaterThan e) {
      kind = "GreaterThan"; attribute = e.attribute(); values = new Object[] {e.value()};
    } else if (f instanceof GreaterThanOrEqual e) {
      kind = "GreaterThanOrEqual"; attribute = e.attribute(); values = new Object[] {e.value()};
    } else if (f instanceof LessThan e) {
      kind = "LessThan"; attribute = e.attribute(); values = new Object[] {e.value()};
    } else if (f instanceof LessThanOrEqual e) {
      kind = "LessThanOrEqual"; attribute = e.attribute(); values = new Object[] {e.value()};
    } else if (f instanceof In e) {
      kind = "In"; attribute = e.attribute(); values = e.values();
    } else {
      return null;
    }
    ObjectNode spec = PythonWorker.JSON.createObjectNode();
    spec.put("kind", kind);
    spec.put("attribute", attribute);
    ArrayNode out = PythonWorker.JSON.createArrayNode();
    boolean micros = false;
    for (Object v : values) {
      if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
        out.add(((Number) v).longValue());
      } else if (v instanceof Timestamp || v instanceof Instant) {
        Instant i = v instanceof Timestamp t ? t.toInstant() : (Instant) v;
        out.add(Math.addExact(Math.multiplyExact(i.getEpochSecond(), 1_000_000L), i.getNano() / 1000));
        micros = true;
      } else {
        return null;
      }
    }
    if (micros) {
      spec.put("micros", true);
    }
    if ("In".equals(kind)) {
      spec.set("value", out);
    } else {
      spec.set("value", out.get(0));
    }
    return spec;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return "KafkaTieredColumnarScan(pushedFilters=" + pushed + ", columns=" + Arrays.toString(readSchema.fieldNames())
        + (readSchema.fields().length == 0 ? ", countFromHeaders" : "") + ")";
  }

  @Override
  public org.apache.spark.sql.connector.metric.CustomMetric[] supportedCustomMetrics() {
    return WorkerMetrics.supported();
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    streaming = true;
    return new KafkaTieredStream(options, factory());
  }

  @Override
  public synchronized InputPartition[] planInputPartitions() {
    if (planned == null) {
      ObjectNode h = KafkaTieredTable.request(options);
      h.set("filters", filters);
      h.set("packing", packing());
      PythonWorker.Reply reply = PythonWorker.call(true, "plan", h);
      planned = partitions(reply);
      estimatedRows = reply.body.path("estimates").path("rows").asLong(-1);
      estimatedBytes = reply.body.path("estimates").path("bytes").asLong(-1);
    }
    return planned;
  }

  /**
   * Spark's file-packing settings, for the planner to pack splits into tasks as Spark packs files
   * (spark_reader/packing.py says why): maxPartitionBytes, openCostInBytes, and minPartitionNum or the
   * default parallelism.
   */
  static ObjectNode packing() {
    SQLConf conf = SQLConf.get();
    SparkSession session = SparkSession.active();
    long minPartitions = conf.filesMinPartitionNum().isDefined()
        ? ((Number) conf.filesMinPartitionNum().get()).longValue()
        : session.sparkContext().defaultParallelism();
    ObjectNode p = PythonWorker.JSON.createObjectNode();
    p.put("maxBytes", conf.filesMaxPartitionBytes());
    p.put("openCost", conf.filesOpenCostInBytes());
    p.put("minPartitions", minPartitions);
    return p;
  }

  /** The plan's offsets and segment bytes (upper bounds: compaction, filters and control records only
   * lower them), planned once for the optimizer and the scan. */
  @Override
  public synchronized Statistics estimateStatistics() {
    // A stream's relation asks too, each micro-batch: its offsets are the micro-batch's, not a batch
    // plan's (which would refuse startingOffsets=latest and plan the whole topic). Unknown, as Spark's
    // own Kafka stream answers.
    if (!streaming) {
      planInputPartitions();
    }
    long rows = streaming ? -1 : estimatedRows;
    long bytes = streaming ? -1 : estimatedBytes;
    return new Statistics() {
      @Override
      public OptionalLong sizeInBytes() {
        return bytes < 0 ? OptionalLong.empty() : OptionalLong.of(bytes);
      }

      @Override
      public OptionalLong numRows() {
        return rows < 0 ? OptionalLong.empty() : OptionalLong.of(rows);
      }
    };
  }

  static InputPartition[] partitions(PythonWorker.Reply reply) {
    JsonNode names = reply.body.path("descriptions");
    InputPartition[] out = new InputPartition[reply.blobs.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = new TieredInputPartition(reply.blobs.get(i), names.path(i).asText());
    }
    return out;
  }

  ArrowPartitionReader.Factory factory() {
    return new ArrowPartitionReader.Factory(readSchema.fieldNames(), PythonWorker.pythonExec(false));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return factory();
  }
}
