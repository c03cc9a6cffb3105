package io.github.kafkatieredrsm.spark;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("kafka-tiered")} when this jar is on the class path: the columnar scan.
 *
 * <p>Spark 4.3 resolves a format's short name through {@code DataSource.lookupDataSource}: the JVM's
 * {@code DataSourceRegister} services first, and a Python data source registered under the name only when
 * no JVM class answers it. So with the jar on the class path this provider wins and without it the Python
 * Data Source of the same name serves the query, with the same options and rows.
 *
 * <p>{@code spark.kafkaTiered.columnar.enabled=false} (a session setting, read per query) hands the query
 * to that Python Data Source from here ({@link PythonDataSourceV2}, as Spark would without the jar): the
 * way back to the fallback without restarting the session, and how one session compares both paths.
 */
public final class KafkaTieredProvider implements TableProvider, DataSourceRegister {
  static final String NAME = "kafka-tiered";
  /** The Python Data Source's name when the jar holds {@code kafka-tiered} (spark_reader/fallback.py). */
  static final String FALLBACK = "kafka-tiered-python";
  static final String ENABLED = "spark.kafkaTiered.columnar.enabled";

  @Override
  public String shortName() {
    return NAME;
  }

  static boolean columnar() {
    SparkSession s = SparkSession.active();
    return !"false".equalsIgnoreCase(s.conf().get(ENABLED, "true"));
  }

  private PythonDataSourceV2 delegate;

  /** The Python Data Source's provider, one per lookup (Spark asks the same provider for schema and table). */
  private synchronized TableProvider python() {
    if (delegate == null) {
      delegate = new PythonDataSourceV2();
      boolean registered = SparkSession.active().sessionState().dataSourceManager().dataSourceExists(NAME);
      delegate.setShortName(registered ? NAME : FALLBACK);
    }
    return delegate;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    if (!columnar()) {
      return python().inferSchema(options);
    }
    ObjectNode h = KafkaTieredTable.request(options);
    String json = PythonWorker.call(true, "schema", h).body.path("schema").asText();
    return (StructType) DataType.fromJson(json);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    if (!columnar()) {
      return python().getTable(schema, partitioning, properties);
    }
    return new KafkaTieredTable(schema, new CaseInsensitiveStringMap(properties));
  }
}
