"""A tiered-storage RemoteStorageManager for Apache Kafka, in Python."""
