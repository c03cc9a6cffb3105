"""The stored format: what a tiered segment is once it is in a store, independent of who writes or reads it.

Copy writes it, fetch, the catalog, migrate and the Spark reader read it; none of them owns it, so it lives
here and imports none of them (only `segment_format`, `rsm.api` and `rsm.config`):

- `layout`: the object keys of a segment (`.log`, `.indexes`, `.manifest` under one stem);
- `manifest`: the manifest document, its versions, canonical form and seal;
- `pieces`: what identifies a stored piece (kind, number, tag), its checksum and its check;
- `cipher`: AES-256-GCM of a segment's pieces and the HMAC seal of its manifest;
- `stages`: the per-piece transforms (compression, encryption) as composable stages;
- `data_keys`: unwrapping a segment's data key with the keyring;
- `rekey`: rewriting a manifest without touching its pieces (sealing, re-keying, moving);

and the store's other documents, each a value type with its JSON (or bytes) and its checks, read and written
through a store by `rsm.store`, `rsm.store.overlays` and `rsm.policy.pending`:

- `custom_metadata`: the <= 128 bytes a copy hands Kafka, naming the segment's location;
- `forward`: the object a move leaves at a segment's old location;
- `location_record`: the location record's entries and markers; `log_start`: its log-start marks;
- `overlay` and `pending_overlay`: a topic's `unchecked.*` settings, by topic id and (before it exists) by name;
- `topic_encryption`: each topic's encryption memory;
- `home`: the catalog home's directory and the pointers a catalog move leaves.
"""
