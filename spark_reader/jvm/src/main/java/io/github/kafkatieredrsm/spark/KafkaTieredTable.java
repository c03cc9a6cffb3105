package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The topics a query reads, as a table: batch and micro-batch reads through {@link KafkaTieredScan}. */
final class KafkaTieredTable implements SupportsRead {
  private final StructType schema;
  private final CaseInsensitiveStringMap options;

  KafkaTieredTable(StructType schema, CaseInsensitiveStringMap options) {
    this.schema = schema;
    this.options = options;
  }

  /**
   * A request carrying the query's options as the Python Data Source receives them (Spark lower-cases the
   * keys of both), so each option is parsed, checked and named in errors by the same Python code.
   */
  static ObjectNode request(CaseInsensitiveStringMap options) {
    ObjectNode h = PythonWorker.JSON.createObjectNode();
    ObjectNode o = h.putObject("options");
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (!"path".equals(e.getKey()) || e.getValue() != null) {
        o.put(e.getKey(), e.getValue());
      }
    }
    return h;
  }

  @Override
  public String name() {
    return "kafka-tiered (columnar)";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
    return new KafkaTieredScan.Builder(schema, options);
  }
}
