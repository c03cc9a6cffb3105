"""AES-256-GCM for the pieces of one segment copy, and the HMAC seal of its manifest.

Encryption uses a data key drawn fresh for every copy of a segment (stored in the manifest only wrapped by
a keyring key). The 96-bit nonce is (piece kind, chunk number): unique per key because the key is unique per
copy. The associated data binds each ciphertext to the segment id, the piece kind and the number, behind a
prefix naming the manifest version (`rsm.stored.pieces.AAD_PREFIXES`), so pieces cannot be swapped,
reordered or moved to another segment without failing authentication. The same data key, through
HKDF-SHA256, keys the HMAC-SHA256 seal of a version 2 manifest, so whoever can decrypt a segment can check
its manifest, and nobody else can forge one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from rsm.stored.pieces import AAD_PREFIXES, CURRENT_VERSION, DATA_KEY_BYTES, PieceKind, TransformError

SEAL_KEY_INFO = b"kafka-tiered-rsm/manifest-seal/v2|"  # HKDF info (then the segment id) of the seal key


def new_data_key() -> bytes:
    return os.urandom(DATA_KEY_BYTES)


class SegmentCipher:
    """AES-256-GCM for the pieces of one segment copy, and the HMAC seal of its manifest.

    ``version``: the associated-data version of the copy's pieces (see the module): the manifest version
    it was copied with.
    """

    def __init__(self, data_key: bytes, segment_id: uuid.UUID, version: int = CURRENT_VERSION) -> None:
        if len(data_key) != DATA_KEY_BYTES:
            raise ValueError("a data key is 32 bytes")
        if version not in AAD_PREFIXES:
            raise ValueError(f"no piece format for manifest version {version}")
        self._aead = AESGCM(data_key)
        self._segment = segment_id.bytes
        self._prefix = AAD_PREFIXES[version]
        self._data_key = data_key
        self._seal_key: bytes | None = None  # derived when first needed: a fetch checks a seal once

    @staticmethod
    def _nonce(kind: PieceKind, number: int) -> bytes:
        return kind.value + b"\0\0\0" + number.to_bytes(8, "big")

    def _aad(self, kind: PieceKind, number: int) -> bytes:
        return self._prefix + self._segment + kind.value + number.to_bytes(8, "big")

    def seal_manifest(self, body: bytes) -> bytes:
        """HMAC-SHA256 of a manifest's canonical bytes under the key derived from the data key."""
        if self._seal_key is None:
            self._seal_key = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_KEY_INFO + self._segment
            ).derive(self._data_key)
        return hmac.new(self._seal_key, body, hashlib.sha256).digest()

    def manifest_seal_matches(self, body: bytes, seal: bytes) -> bool:
        """Whether ``seal`` is this segment's seal of ``body`` (compared in constant time)."""
        return hmac.compare_digest(self.seal_manifest(body), seal)

    def encrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        return self._aead.encrypt(self._nonce(kind, number), data, self._aad(kind, number))

    def decrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        try:
            return self._aead.decrypt(self._nonce(kind, number), data, self._aad(kind, number))
        except InvalidTag:
            raise TransformError(
                f"{kind.name.lower()} piece {number} does not authenticate (tampered, misplaced or wrong key)"
            ) from None
