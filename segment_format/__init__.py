"""Kafka's on-disk formats, byte-compatible with Kafka itself: bytes in, bytes out, no storage I/O."""
