package io.github.kafkatieredrsm.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One split as the Python planner made it: pickled bytes the JVM carries to an executor unread. */
final class TieredInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final byte[] pickled;
  final String description;

  TieredInputPartition(byte[] pickled, String description) {
    this.pickled = pickled;
    this.description = description;
  }

  @Override
  public String toString() {
    return description;
  }
}
