"""A segment's data key and cipher from its manifest and the keyring: what reading or rewriting one needs.

The data key is stored in the manifest only wrapped by the keyring key it names, bound to the segment id;
unwrapping it is the first step of decrypting the segment and of checking a version 2 manifest's seal.
"""

from __future__ import annotations

from rsm.api.errors import RemoteStorageException
from rsm.config.keyring import Keyring
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import Manifest


def unwrap_data_key(manifest: Manifest, keyring: Keyring | None) -> bytes | None:
    """An encrypted segment's data key, unwrapped with the keyring key its manifest names (else None).

    RemoteStorageException naming the manifest when the keyring lacks the key or the wrapped key does not
    authenticate. The manifest's seal is not checked here (`cipher_for` does).
    """
    if manifest.encryption is None:
        return None
    if keyring is None:
        raise RemoteStorageException(
            f"segment {manifest.segment.segment_id} is encrypted under key id {manifest.encryption.key_id!r} "
            "but no keyring is configured (encryption.keyring.path)"
        )
    try:
        return keyring.unwrap(
            manifest.encryption.key_id, manifest.encryption.wrapped_key, manifest.segment_uuid.bytes
        )
    except RemoteStorageException as exc:
        raise RemoteStorageException(f"{manifest.source}: {exc}") from None


def cipher_for(manifest: Manifest, keyring: Keyring | None) -> SegmentCipher | None:
    """The segment's cipher: its data key unwrapped with the keyring key the manifest names.

    A version 2 manifest's seal is checked with it before anything else of the manifest is trusted
    (ManifestError naming the manifest): the data key is what authenticates an encrypted segment.
    """
    data_key = unwrap_data_key(manifest, keyring)
    if data_key is None:
        return None
    cipher = SegmentCipher(data_key, manifest.segment_uuid, manifest.aad_version)
    manifest.check_seal(cipher)
    return cipher
