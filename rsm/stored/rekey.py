"""Rewriting a segment's manifest without touching its pieces: sealing old manifests, re-keying.

Why: stores hold years of segments whose manifests are version 1, which nothing authenticates. Before an
operator sets `manifest.require.authenticated=true`, each of them is rewritten as a sealed version 2
manifest (`rsm.stored.manifest`), and that needs the manifest alone: the pieces stay exactly as they were written.
An encrypted segment keeps its data key and its version 1 associated data (`encryption.aad_version` = 1)
and gets an HMAC seal, which needs the keyring (as reading does); a plain one gets its recorded CRC-32Cs
bound to their pieces (computed from the recorded values, no data read) and a SHA-256 seal. The same
rewrite can re-wrap the data key under another key id: key rotation ("re-key").

The same rewrite serves `rsm migrate move`: the objects copied to another location keep their bytes (each
piece is bound to its segment id, never to where it is stored), and the manifest is rewritten to name their
new keys and sealed again.

The caller stores the result over the old manifest (one PUT). Readers see the old or the new one, and both
read the same pieces; one that cached the old manifest keeps using it until it rereads.
"""

from __future__ import annotations

import dataclasses

from rsm.config.keyring import Keyring
from rsm.stored.cipher import SegmentCipher
from rsm.stored.data_keys import unwrap_data_key
from rsm.stored.layout import INDEXES_SUFFIX, LOG_SUFFIX, Location, partition_dir
from rsm.stored.manifest import INDEX_NUMBERS, Encryption, Manifest
from rsm.stored.pieces import PieceKind, bind_crc32c, piece_tag


def rekey_manifest(
    raw: bytes,
    source: str,
    keyring: Keyring | None,
    key_id: str | None = None,
    *,
    location: Location | None = None,
) -> bytes:
    """The stored manifest ``raw`` (read from ``source``) rewritten as a sealed version 2 manifest.

    ``key_id``: re-wrap an encrypted segment's data key under this keyring key (default: keep its key).
    ``location``: the segment's objects were copied there (`rsm migrate move`): the manifest names their
    keys at that location instead (pieces are bound to the segment id, not to where they are stored).
    Raises ManifestError / RemoteStorageException naming ``source`` for a manifest that does not check
    (a version 2 one is verified before it is rewritten), ValueError for a key id on a plain segment.
    """
    manifest = Manifest.from_bytes(raw, source)
    if location is not None:
        seg = manifest.segment
        stem = partition_dir(location.prefix, seg.topic, seg.topic_id, seg.partition)
        stem += f"{seg.start_offset:020d}-{seg.segment_id}"
        moved = {"bucket": location.bucket, "prefix": location.prefix,
                 "log": stem + LOG_SUFFIX, "indexes": stem + INDEXES_SUFFIX}  # fmt: skip
        manifest = dataclasses.replace(manifest, location=moved)
    uid = manifest.segment_uuid
    if manifest.encryption is None:
        if key_id is not None:
            raise ValueError(f"{source} belongs to an unencrypted segment: there is no data key to re-key")
        log, indexes = manifest.log, manifest.indexes
        if manifest.version < 2:  # bind the plain CRCs (`from_bytes` refused a plain manifest without)
            crcs = manifest.log.crc32c or ()
            log = dataclasses.replace(
                log,
                crc32c=tuple(bind_crc32c(c, piece_tag(uid, PieceKind.LOG, i)) for i, c in enumerate(crcs)),
            )
            indexes = {
                t: dataclasses.replace(
                    e, crc32c=bind_crc32c(e.crc32c or 0, piece_tag(uid, PieceKind.INDEX, INDEX_NUMBERS[t]))
                )
                for t, e in indexes.items()
            }
        upgraded = dataclasses.replace(manifest, version=2, log=log, indexes=indexes, seal=None, signed=b"")
        return upgraded.to_bytes()
    data_key = unwrap_data_key(manifest, keyring)
    assert data_key is not None and keyring is not None
    cipher = SegmentCipher(data_key, uid, manifest.aad_version)
    manifest.check_seal(cipher)
    old = manifest.encryption
    new_id = old.key_id if key_id is None else key_id
    wrapped = old.wrapped_key if new_id == old.key_id else keyring.wrap(new_id, data_key, uid.bytes)
    encryption = Encryption(new_id, wrapped, old.algorithm, aad_version=manifest.aad_version)
    upgraded = dataclasses.replace(manifest, version=2, encryption=encryption, seal=None, signed=b"")
    return upgraded.to_bytes(cipher)
