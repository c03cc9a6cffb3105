"""Kafka's storage API as the RSM speaks it: segment metadata, the exceptions Kafka maps, the topic's LogConfig."""
