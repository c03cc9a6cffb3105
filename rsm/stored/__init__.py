"""The stored format: what a tiered segment is once it is in a store, independent of who writes or reads it.

Copy writes it, fetch, the catalog, migrate and the Spark reader read it; none of them owns it, so it lives
here and imports none of them (only `segment_format`, `rsm.api` and `rsm.config`):

- `layout`: the object keys of a segment (`.log`, `.indexes`, `.manifest` under one stem);
- `manifest`: the manifest document, its versions, canonical form and seal;
- `pieces`: what identifies a stored piece (kind, number, tag), its checksum and its check;
- `cipher`: AES-256-GCM of a segment's pieces and the HMAC seal of its manifest;
- `stages`: the per-piece transforms (compression, encryption) as composable stages;
- `data_keys`: unwrapping a segment's data key with the keyring;
- `rekey`: rewriting a manifest without touching its pieces (sealing, re-keying, moving).
"""
