package io.github.kafkatieredrsm.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * What the Python workers report after each split, as the scan's SQL metrics (Spark's UI, the plan's
 * metrics): records sections decompressed (a count() decompresses none) and the largest resident set of a
 * worker (the bounded-memory promise, checked where it runs).
 */
final class WorkerMetrics {
  static final String DECOMPRESSED = "decompressedSections";
  static final String MAX_RSS = "pythonWorkerMaxRssKiB";

  private WorkerMetrics() {}

  /** Records sections (Kafka batches' payloads) the workers decompressed. */
  public static final class Decompressed extends CustomSumMetric {
    @Override
    public String name() {
      return DECOMPRESSED;
    }

    @Override
    public String description() {
      return "record batch payloads decompressed";
    }
  }

  /** The largest peak RSS of a Python worker, KiB. */
  public static final class MaxRss implements CustomMetric {
    @Override
    public String name() {
      return MAX_RSS;
    }

    @Override
    public String description() {
      return "peak RSS of a Python worker (KiB)";
    }

    @Override
    public String aggregateTaskMetrics(long[] values) {
      long max = 0;
      for (long v : values) {
        max = Math.max(max, v);
      }
      return Long.toString(max);
    }
  }

  static CustomMetric[] supported() {
    return new CustomMetric[] {new Decompressed(), new MaxRss()};
  }

  static CustomTaskMetric value(String name, long v) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return v;
      }
    };
  }
}
