package io.tieredrsm.bridge;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The topic's configuration ("LogConfig") for brokers that do not pass one to the RSM: read with an
 * Admin client's describeConfigs, cached per topic for a short TTL so reader threads do not pay a round
 * trip per fetch, and re-read after the TTL so changes are seen. Failures are cached briefly too, and
 * the call then goes on without a LogConfig (the RSM falls back to its broker-level defaults).
 */
final class TopicConfigCache implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(TopicConfigCache.class);
    private static final long FAILURE_TTL_MS = 5_000;

    private static final class Entry {
        final Map<String, String> configs;
        final long expiresAtMs;

        Entry(Map<String, String> configs, long expiresAtMs) {
            this.configs = configs;
            this.expiresAtMs = expiresAtMs;
        }
    }

    private final Properties adminProps;
    private final long ttlMs;
    private final long timeoutMs;
    private final Map<String, Entry> cache = new ConcurrentHashMap<>();
    private volatile Admin admin;

    TopicConfigCache(Properties adminProps, long ttlMs, long timeoutMs) {
        this.adminProps = adminProps;
        this.ttlMs = ttlMs;
        this.timeoutMs = timeoutMs;
    }

    private Admin admin() {
        Admin a = admin;
        if (a == null) {
            synchronized (this) {
                a = admin;
                if (a == null) {
                    // created lazily: configure() runs before the broker's listeners are up
                    a = Admin.create(adminProps);
                    admin = a;
                }
            }
        }
        return a;
    }

    /** The topic's configs (name -> value, sensitive values left out), or null when unknown. */
    Map<String, String> get(String topic) {
        long now = System.currentTimeMillis();
        Entry e = cache.get(topic);
        if (e != null && e.expiresAtMs > now) {
            return e.configs;
        }
        Map<String, String> configs = null;
        try {
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin().describeConfigs(List.of(res)).all().get(timeoutMs, TimeUnit.MILLISECONDS)
                    .get(res);
            configs = new TreeMap<>();
            for (ConfigEntry entry : config.entries()) {
                if (entry.value() != null && !entry.isSensitive()) {
                    configs.put(entry.name(), entry.value());
                }
            }
            cache.put(topic, new Entry(configs, now + ttlMs));
        } catch (Exception ex) {
            if (ex instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            LOG.warn("cannot read the configs of topic {} ({}); calling the RSM without a LogConfig", topic,
                    ex.toString());
            Map<String, String> stale = e == null ? null : e.configs;
            cache.put(topic, new Entry(stale, now + FAILURE_TTL_MS));
            return stale;
        }
        return configs;
    }

    @Override
    public void close() {
        Admin a = admin;
        if (a != null) {
            a.close();
        }
    }
}
