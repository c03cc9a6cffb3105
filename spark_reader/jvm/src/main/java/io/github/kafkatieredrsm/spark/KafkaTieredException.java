package io.github.kafkatieredrsm.spark;

/**
 * An error the source's Python side reported (a bad option, a missing topic, data loss, corrupt data): one
 * line, as the Python Data Source gives it. It has no stack trace, so Spark's message for a failed task is
 * that line rather than frames of this shell, which decides nothing.
 */
public final class KafkaTieredException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  public KafkaTieredException(String message) {
    super(message);
  }

  @Override
  public synchronized Throwable fillInStackTrace() {
    return this;
  }
}
