package io.github.kafkatieredrsm.spark;

import org.apache.spark.sql.connector.read.streaming.Offset;

/** A stream offset: the Kafka source's checkpoint JSON, exactly as the Python stream reader writes it. */
final class JsonOffset extends Offset {
  private final String json;

  JsonOffset(String json) {
    this.json = json;
  }

  @Override
  public String json() {
    return json;
  }
}
