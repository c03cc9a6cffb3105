package io.github.kafkatieredrsm.oracle;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Test oracle: Kafka's own classes write and read segment files so the Python format code can be
 * compared with genuine Kafka bytes.
 *
 * <pre>
 *   java -cp oracle.jar:kafka-libs/* io.github.kafkatieredrsm.oracle.Oracle write-segment --out DIR [--codec gzip ...]
 *   java ... Oracle dump-many FILE...  ({file: dump})
 *   java ... Oracle dump FILE      (.log, .index, .timeindex, .txnindex, .snapshot, leader-epoch-checkpoint)
 *   java ... Oracle rebuild-indexes --log FILE.log --out DIR [--index-interval-bytes N]
 *   java ... Oracle check FILE.log (every batch ensureValid(), every record iterated)
 *   java ... Oracle serve          (persistent: JSON-array requests on stdin, one JSON line out each)
 * </pre>
 *
 * The result is one JSON document on stdout. Errors: exit code 2 and a line "ORACLE-ERROR: message" on
 * stderr (Kafka's own message for corrupt data); exit code 1 for unexpected failures (stack trace).
 */
public final class Oracle {
    static final ObjectMapper MAPPER = new ObjectMapper().disable(SerializationFeature.FAIL_ON_EMPTY_BEANS);

    private Oracle() {
    }

    public static void main(String[] args) {
        // Keep stdout for the JSON answer only: anything Kafka or log4j prints goes to stderr.
        PrintStream answer = System.out;
        System.setOut(System.err);
        int rc;
        try {
            if (args.length < 1) {
                throw new OracleException("usage: Oracle write-segment|dump|dump-many|rebuild-indexes|check|serve ...");
            }
            if (args[0].equals("serve")) {
                serve(answer);
                rc = 0;
            } else {
                Object result = run(args[0], args);
                MAPPER.writeValue(answer, result);
                answer.println();
                answer.flush();
                rc = 0;
            }
        } catch (OracleException e) {
            System.err.println("ORACLE-ERROR: " + e.getMessage());
            rc = 2;
        } catch (Throwable t) {
            t.printStackTrace(System.err);
            System.err.println("ORACLE-ERROR: " + t);
            rc = 1;
        }
        System.err.flush();
        // Kafka's scheduler threads must not keep the JVM alive.
        Runtime.getRuntime().halt(rc);
    }

    /**
     * Persistent mode: one request per stdin line (a JSON array: command then arguments), one response
     * per stdout line: {"ok": true, "result": ...} or {"ok": false, "error": message, "internal": bool}.
     * Ends at end of input. Saves the JVM start (about half a second) per call.
     */
    private static void serve(PrintStream answer) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> response = new LinkedHashMap<>();
            try {
                String[] request = MAPPER.readValue(line, String[].class);
                if (request.length == 0) {
                    throw new OracleException("empty request");
                }
                response.put("ok", true);
                response.put("result", run(request[0], request));
            } catch (OracleException e) {
                response.clear();
                response.put("ok", false);
                response.put("error", e.getMessage());
                response.put("internal", false);
            } catch (Throwable t) {
                t.printStackTrace(System.err);
                response.clear();
                response.put("ok", false);
                response.put("error", t.toString());
                response.put("internal", true);
            }
            answer.println(MAPPER.writeValueAsString(response));
            answer.flush();
        }
    }

    private static Object run(String command, String[] args) throws Exception {
        Map<String, String> opts = options(args);
        switch (command) {
            case "write-segment":
                return SegmentWriter.write(new SegmentWriter.Params(opts));
            case "dump":
                return Dumper.dump(Path.of(positional(args, "dump")));
            case "dump-many": {
                // One JVM for many files: {path: dump} (a failure names its file).
                Map<String, Object> out = new LinkedHashMap<>();
                for (int i = 1; i < args.length; i++) {
                    try {
                        out.put(args[i], Dumper.dump(Path.of(args[i])));
                    } catch (OracleException e) {
                        throw new OracleException(args[i] + ": " + e.getMessage(), e);
                    }
                }
                return out;
            }
            case "rebuild-indexes":
                return IndexRebuilder.rebuild(opts);
            case "check":
                return Checker.check(Path.of(positional(args, "check")));
            default:
                throw new OracleException("unknown command " + command + " (write-segment, dump, dump-many, rebuild-indexes, check)");
        }
    }

    private static String positional(String[] args, String command) throws OracleException {
        if (args.length != 2) {
            throw new OracleException(command + " takes exactly one file path");
        }
        return args[1];
    }

    private static Map<String, String> options(String[] args) throws OracleException {
        Map<String, String> opts = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                continue;
            }
            if (i + 1 >= args.length) {
                throw new OracleException("option " + args[i] + " needs a value");
            }
            opts.put(args[i].substring(2), args[++i]);
        }
        return opts;
    }
}
