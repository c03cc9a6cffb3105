package io.tieredrsm.bridge;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.server.policy.AlterConfigPolicy;
import org.apache.kafka.server.policy.CreateTopicPolicy;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's {@code CreateTopicPolicy} and {@code AlterConfigPolicy}, answered by the Python topic management
 * policy in the bridge (bridge ops {@code validate_create_topic}, {@code validate_alter_config}; see
 * PROTOCOL.md). One class for both broker settings:
 *
 * <pre>
 * create.topic.policy.class.name=io.tieredrsm.bridge.BridgeTopicPolicy
 * alter.config.policy.class.name=io.tieredrsm.bridge.BridgeTopicPolicy
 * </pre>
 *
 * The broker loads policies from its own classpath (put the plugin jar in Kafka's {@code libs/}), not from
 * {@code remote.log.storage.manager.class.path}, and configures them with all of its settings; the
 * {@code rsm.config.bridge.*} ones find or start the bridge as the RSM plugin does ({@link PolicyBridge}).
 * Further settings ({@code rsm.config.} prefix):
 * <ul>
 *   <li>{@code bridge.policy.timeout.ms} (5000): longest wait for the bridge's answer (a new connection's
 *       handshake waits as long again); a late answer refuses the request</li>
 *   <li>{@code bridge.policy.scope} ({@code tiered}): which requests the bridge is asked about: {@code tiered}
 *       - those that create or leave a topic with {@code remote.storage.enable=true} or set an
 *       {@code unchecked.*} key (other topics pass without asking, so a bridge that is down does not stop
 *       the cluster's other topics); {@code all} - every topic request. Kafka's internal topics
 *       ({@code __*}) are never asked about.</li>
 *   <li>{@code bridge.admin.bootstrap.servers} (and {@code bridge.admin.*}): an alteration's topic id and
 *       current configs are read with an Admin client (within {@code bridge.policy.admin.timeout.ms}, 2000),
 *       since Kafka hands the policy only the keys that change; without it those are unknown to the policy</li>
 * </ul>
 * A request the bridge cannot answer (down, late, an error) is refused with a message saying so: never a
 * silent pass.
 */
public class BridgeTopicPolicy implements CreateTopicPolicy, AlterConfigPolicy {
    private static final Logger LOG = LoggerFactory.getLogger(BridgeTopicPolicy.class);
    private static final String PREFIX = "rsm.config.";
    /** Broker settings the policy may see: Kafka's topic defaults, never a secret (as rsm.policy.api). */
    private static final List<String> SHOWN = List.of("num.partitions", "default.replication.factor",
            "min.insync.replicas", "node.id", "broker.id");
    private static final List<String> SECRET_MARKERS = List.of("password", "secret", "token", "credential", "jaas",
            "keystore", "truststore", ".key");

    private PolicyBridge bridge;
    private Map<String, String> brokerConfigs = Map.of();
    private boolean allTopics;
    private Properties adminProps;
    private long adminTimeoutMs = 2000;
    private volatile Admin admin;

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, String> all = new TreeMap<>();
        configs.forEach((k, v) -> {
            if (v != null) {
                all.put(k, String.valueOf(v));
            }
        });
        // the broker passes its own settings (rsm.config.* among them); a test may pass them stripped
        boolean prefixed = all.keySet().stream().anyMatch(k -> k.startsWith(PREFIX));
        Map<String, String> rsm = new TreeMap<>();
        all.forEach((k, v) -> {
            if (!prefixed) {
                rsm.put(k, v);
            } else if (k.startsWith(PREFIX)) {
                rsm.put(k.substring(PREFIX.length()), v);
            }
        });
        for (String k : List.of("broker.id", "node.id")) {
            if (all.containsKey(k)) {
                rsm.putIfAbsent(k, all.get(k)); // names the generated bridge config, as for the RSM
            }
        }
        Map<String, String> shown = new TreeMap<>();
        all.forEach((k, v) -> {
            String lower = k.toLowerCase(Locale.ROOT);
            if ((k.startsWith("log.") || SHOWN.contains(k)) && SECRET_MARKERS.stream().noneMatch(lower::contains)) {
                shown.put(k, v);
            }
        });
        brokerConfigs = shown;
        String scope = rsm.getOrDefault("bridge.policy.scope", "tiered").trim().toLowerCase(Locale.ROOT);
        if (!scope.equals("tiered") && !scope.equals("all")) {
            throw new IllegalArgumentException("rsm.config.bridge.policy.scope=" + scope + ": expected tiered or all");
        }
        allTopics = scope.equals("all");
        adminTimeoutMs = Long.parseLong(rsm.getOrDefault("bridge.policy.admin.timeout.ms", "2000"));
        Properties props = new Properties();
        rsm.forEach((k, v) -> {
            if (k.startsWith("bridge.admin.")) {
                props.put(k.substring("bridge.admin.".length()), v);
            }
        });
        if (props.containsKey("bootstrap.servers")) {
            props.putIfAbsent("client.id", "rsm-topic-policy-" + rsm.getOrDefault("node.id", rsm.getOrDefault("broker.id", "0")));
            adminProps = props;
        }
        bridge = PolicyBridge.acquire(rsm);
        LOG.info("rsm topic policy configured: scope {}, topic state from {}", scope,
                adminProps == null ? "(none)" : adminProps.get("bootstrap.servers"));
    }

    // ---------------------------------------------------------------------------------- create

    @Override
    public void validate(CreateTopicPolicy.RequestMetadata request) throws PolicyViolationException {
        String topic = request.topic();
        Map<String, String> configs = request.configs() == null ? Map.of() : request.configs();
        if (!concerns(topic, configs)) {
            return;
        }
        Map<String, Object> h = new LinkedHashMap<>();
        h.put("topic", topic);
        h.put("principal", null);
        h.put("num_partitions", request.numPartitions());
        h.put("replication_factor", request.replicationFactor() == null ? null : request.replicationFactor().intValue());
        h.put("replicas_assignments", request.replicasAssignments());
        h.put("configs", new TreeMap<>(configs));
        h.put("broker_configs", brokerConfigs);
        bridge.call("validate_create_topic", h, "creation of topic " + topic);
    }

    // ----------------------------------------------------------------------------------- alter

    @Override
    public void validate(AlterConfigPolicy.RequestMetadata request) throws PolicyViolationException {
        ConfigResource resource = request.resource();
        if (resource.type() != ConfigResource.Type.TOPIC) {
            return; // broker and other configs are not the topic policy's business
        }
        String topic = resource.name();
        Map<String, String> altered = request.configs() == null ? Map.of() : request.configs();
        TopicLookup current = lookup(topic);
        Map<String, String> after = new HashMap<>(current.configs == null ? Map.of() : current.configs);
        altered.forEach((k, v) -> {
            if (v == null) {
                after.remove(k);
            } else {
                after.put(k, v);
            }
        });
        // unknown current configs: ask whenever the change itself is about tiered storage
        Map<String, String> judged = new HashMap<>(after);
        altered.forEach((k, v) -> judged.putIfAbsent(k, v == null ? "" : v));
        if (!concerns(topic, judged)) {
            return;
        }
        Map<String, Object> h = new LinkedHashMap<>();
        h.put("resource_type", "TOPIC");
        h.put("resource_name", topic);
        h.put("principal", null);
        h.put("configs", new TreeMap<>(altered)); // null values: keys removed
        h.put("current_configs", current.configs);
        h.put("topic_id", current.topicId);
        h.put("exists", current.exists); // false: KRaft asks this policy for a topic being created too
        h.put("broker_configs", brokerConfigs);
        bridge.call("validate_alter_config", h, "change of topic " + topic + "'s configs");
    }

    /** Whether the bridge is asked about this topic (see bridge.policy.scope). */
    private boolean concerns(String topic, Map<String, String> configs) {
        if (topic.startsWith("__")) {
            return false; // Kafka's internal topics: never held back by the bridge
        }
        if (allTopics) {
            return true;
        }
        return "true".equalsIgnoreCase(String.valueOf(configs.get("remote.storage.enable")).trim())
                || configs.keySet().stream().anyMatch(k -> k.startsWith("unchecked."));
    }

    private static final class TopicLookup {
        final String topicId;
        final Map<String, String> configs;
        /** Whether the topic exists; null when not known (no Admin client, or it did not answer). */
        final Boolean exists;

        TopicLookup(String topicId, Map<String, String> configs, Boolean exists) {
            this.topicId = topicId;
            this.configs = configs;
            this.exists = exists;
        }
    }

    /** The topic's id and explicitly set configs, when an Admin client is configured and answers in time. */
    private TopicLookup lookup(String topic) {
        if (adminProps == null) {
            return new TopicLookup(null, null, null);
        }
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try {
            Admin a = admin();
            KafkaFuture<TopicDescription> described = a.describeTopics(List.of(topic)).topicNameValues().get(topic);
            KafkaFuture<Map<ConfigResource, Config>> configs = a.describeConfigs(List.of(res)).all();
            Map<String, String> found = new TreeMap<>();
            String id = null;
            try {
                id = described.get(adminTimeoutMs, TimeUnit.MILLISECONDS).topicId().toString();
                for (ConfigEntry e : configs.get(adminTimeoutMs, TimeUnit.MILLISECONDS).get(res).entries()) {
                    if (e.value() != null && !e.isSensitive()) {
                        found.put(e.name(), e.value());
                    }
                }
            } catch (java.util.concurrent.ExecutionException e) {
                if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                    return new TopicLookup(null, null, false); // being created (KRaft asks this policy then too)
                }
                throw e;
            }
            return new TopicLookup(id, found, true);
        } catch (Exception e) {
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            LOG.warn("cannot read topic {}'s id and configs ({}); the policy judges the change without them", topic,
                    e.toString());
            return new TopicLookup(null, null, null);
        }
    }

    private Admin admin() {
        Admin a = admin;
        if (a == null) {
            synchronized (this) {
                a = admin;
                if (a == null) {
                    a = Admin.create(adminProps); // lazily: configure() runs before the broker listens
                    admin = a;
                }
            }
        }
        return a;
    }

    @Override
    public void close() {
        Admin a = admin;
        if (a != null) {
            a.close(java.time.Duration.ofSeconds(5));
        }
        if (bridge != null) {
            bridge.release();
            bridge = null;
        }
    }
}
