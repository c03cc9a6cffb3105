"""Kafka's storage API as the RSM speaks it: segment metadata, the exceptions Kafka maps, the topic's LogConfig,
and the rules for names that become parts of object paths (`names`)."""
