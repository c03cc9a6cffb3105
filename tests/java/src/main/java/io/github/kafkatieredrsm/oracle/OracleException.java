package io.github.kafkatieredrsm.oracle;

/** An expected failure (bad input, corrupt file): reported as "ORACLE-ERROR: message", exit code 2. */
public final class OracleException extends Exception {
    private static final long serialVersionUID = 1L;

    public OracleException(String message) {
        super(message);
    }

    public OracleException(String message, Throwable cause) {
        super(message, cause);
    }
}
