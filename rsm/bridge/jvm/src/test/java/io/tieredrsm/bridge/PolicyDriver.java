package io.tieredrsm.bridge;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.server.policy.AlterConfigPolicy;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/**
 * Test driver: drives {@link BridgeTopicPolicy} as Kafka's controller does - one instance configured as the
 * create policy and one as the alter policy, with the broker's whole properties (rsm.config.* prefixed) -
 * one command per stdin line, one JSON answer per stdout line ({@code @@ {...}}). Used by
 * tests/broker/test_topic_policy_plugin.py (no broker needed).
 *
 * <pre>
 * configure PROPS_FILE       a broker's server.properties
 * create JSON                {"topic", "partitions", "replication", "configs"}: CreateTopicPolicy.validate
 * alter JSON                 {"type": "TOPIC"|"BROKER", "name", "configs" (null values: deleted)}
 * close
 * </pre>
 * Answers carry {@code "ok"} and, on a refusal, the exception's class, message and the call's milliseconds.
 */
public final class PolicyDriver {
    private PolicyDriver() {
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        BridgeTopicPolicy create = new BridgeTopicPolicy();
        BridgeTopicPolicy alter = new BridgeTopicPolicy();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ", 2);
            Map<String, Object> out = new LinkedHashMap<>();
            long started = System.nanoTime();
            try {
                switch (w[0]) {
                    case "configure": {
                        Properties p = new Properties();
                        try (InputStream s = Files.newInputStream(Paths.get(w[1]))) {
                            p.load(s);
                        }
                        Map<String, Object> m = new HashMap<>();
                        p.forEach((k, v) -> m.put((String) k, v));
                        create.configure(m);
                        alter.configure(m);
                        break;
                    }
                    case "create": {
                        Map<String, Object> r = (Map<String, Object>) Json.parse(w[1]);
                        Map<String, String> configs = new HashMap<>();
                        ((Map<String, Object>) r.getOrDefault("configs", Map.of()))
                                .forEach((k, v) -> configs.put(k, String.valueOf(v)));
                        Number partitions = (Number) r.getOrDefault("partitions", 1L);
                        Number replication = (Number) r.getOrDefault("replication", 1L);
                        create.validate(new CreateTopicPolicy.RequestMetadata((String) r.get("topic"),
                                partitions.intValue(), replication.shortValue(), null, configs));
                        break;
                    }
                    case "alter": {
                        Map<String, Object> r = (Map<String, Object>) Json.parse(w[1]);
                        Map<String, String> configs = new HashMap<>();
                        ((Map<String, Object>) r.getOrDefault("configs", Map.of()))
                                .forEach((k, v) -> configs.put(k, v == null ? null : String.valueOf(v)));
                        ConfigResource.Type type = ConfigResource.Type.valueOf((String) r.getOrDefault("type", "TOPIC"));
                        alter.validate(new AlterConfigPolicy.RequestMetadata(
                                new ConfigResource(type, (String) r.get("name")), configs));
                        break;
                    }
                    case "close":
                        create.close();
                        alter.close();
                        break;
                    default:
                        throw new IllegalArgumentException("unknown command " + w[0]);
                }
                out.put("ok", true);
            } catch (Exception e) {
                out.put("ok", false);
                out.put("exception", e.getClass().getSimpleName());
                out.put("message", String.valueOf(e.getMessage()));
            }
            out.put("ms", (System.nanoTime() - started) / 1_000_000);
            System.out.println("@@ " + Json.write(out));
            System.out.flush();
        }
        List.of(create, alter).forEach(BridgeTopicPolicy::close);
    }
}
