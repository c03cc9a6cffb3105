package io.github.kafkatieredrsm.spark;

import java.util.Map;
import org.apache.spark.SparkThrowable;

/**
 * An error the source's Python side reported (a bad option, a missing topic, data loss, corrupt data): one
 * line, as the Python Data Source gives it. It has no stack trace, so Spark's message for a failed task is
 * that line rather than frames of this shell, which decides nothing.
 *
 * <p>It is a {@link SparkThrowable} under Spark's own condition for a Python data source's failure
 * ({@code PYTHON_DATA_SOURCE_ERROR}, SQLSTATE 38000): Spark hands a failed task's exception to the user as
 * it is only when it carries a condition that is not internal; anything else arrives wrapped in "Job
 * aborted due to stage failure" with the driver's frames. So the user's code catches this line.
 */
public final class KafkaTieredException extends IllegalArgumentException implements SparkThrowable {
  private static final long serialVersionUID = 1L;
  private static final String CONDITION = "PYTHON_DATA_SOURCE_ERROR";
  private static final String PREFIX = "kafka-tiered: ";

  public KafkaTieredException(String message) {
    super(message);
  }

  @Override
  public String getCondition() {
    return CONDITION;
  }

  @Override
  @SuppressWarnings("deprecation")
  public String getErrorClass() {
    return CONDITION;
  }

  @Override
  public Map<String, String> getMessageParameters() {
    String line = String.valueOf(getMessage());
    String msg = line.startsWith(PREFIX) ? line.substring(PREFIX.length()) : line;
    return Map.of("action", "read", "type", "kafka-tiered", "msg", msg);
  }

  @Override
  public synchronized Throwable fillInStackTrace() {
    return this;
  }
}
