"""Key-encryption keys by id, for envelope encryption of segments.

The keyring file is JSON mapping key ids to base64-encoded 256-bit keys: `{"k1": "<base64>", "k2": ...}`.
Every segment gets a fresh random data key; the data key is wrapped (AES-256-GCM) by the keyring key named
in the topic's `encryption.key.id` and stored, wrapped, in the segment's manifest together with the key
id. Rotation therefore means adding a key id and pointing the config at it: new segments use it while old
segments keep naming the id they were wrapped with, which must stay in the file.

The file is re-read when its modification time changes, so keys can be added without a restart. Key bytes
never appear in logs, exceptions or `repr`.

A key id `kms:<key ARN or alias/...>` names an AWS KMS key instead (`rsm.config.kms`): the keyring hands
those to its `KmsKeys`, so every user of a keyring (copy, fetch, re-key, the reader) takes both kinds, and a
store may hold segments of both. `keyring_for(config)` builds the keyring a configuration names.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.config.kms import KmsKeys, is_kms_key
from rsm.config.redact import looks_like_key_material, looks_secret

log = logging.getLogger(__name__)

KEY_BYTES = 32
WRAP_NONCE_BYTES = 12
WRAP_AAD_PREFIX = b"kafka-tiered-rsm/dek/v1|"


def generate_key() -> str:
    """A new random 256-bit key, base64-encoded as the keyring file stores it."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


_warned: set[tuple[str, int]] = set()


def exposed_mode(mode: int) -> str | None:
    """Who besides the owner may read or change a keyring file with this mode, or None."""
    who = [name for bits, name in ((0o070, "its group"), (0o007, "other users")) if mode & bits]
    return " and ".join(who) or None


def warn_if_exposed(path: Path, mode: int) -> None:
    """Warn loudly, once per file and mode in a process, that a keyring file is not owner-only."""
    who = exposed_mode(mode)
    if who is None or (str(path), mode) in _warned:
        return
    _warned.add((str(path), mode))
    log.warning(
        "keyring file %s is open to %s (mode %o): whoever can read it can decrypt every segment; "
        "make it owner-only: chmod 600 %s",
        path,
        who,
        mode & 0o777,
        path,
    )


class Keyring:
    """Key-encryption keys loaded from a JSON file (or given directly, for tests and tools)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        keys: dict[str, bytes] | None = None,
        kms: KmsKeys | None = None,
    ) -> None:
        """`kms`: what answers `kms:` key ids (None: they are refused as unknown)."""
        self.kms = kms
        self._path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._keys: dict[str, bytes] = dict(keys or {})
        for key_id, key in self._keys.items():
            if len(key) != KEY_BYTES:
                raise ConfigException(f"keyring key {key_id!r} must be {KEY_BYTES} bytes")
        if self._path is not None:
            self._reload(force=True)

    @property
    def path(self) -> Path | None:
        return self._path

    def key_ids(self) -> list[str]:
        self._reload()
        with self._lock:
            return sorted(self._keys)

    def __contains__(self, key_id: object) -> bool:
        if isinstance(key_id, str) and is_kms_key(key_id):
            return self.kms is not None  # KMS itself says whether the key exists, at first use
        self._reload()
        with self._lock:
            return key_id in self._keys

    def __repr__(self) -> str:
        return f"Keyring(path={str(self._path)!r}, key_ids={sorted(self._keys)!r})"

    def _reload(self, force: bool = False) -> None:
        if self._path is None:
            return
        try:
            st = self._path.stat()
            mtime = st.st_mtime
            warn_if_exposed(self._path, st.st_mode)
        except OSError as exc:
            if force:
                raise ConfigException(f"cannot read keyring file {self._path}: {exc.strerror}") from None
            return  # keep the keys already loaded if the file is briefly missing (being replaced)
        if not force and mtime == self._mtime:
            return
        try:
            document = json.loads(self._path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            # never include the file content: it holds the keys
            raise ConfigException(
                f"keyring file {self._path} is not valid JSON ({type(exc).__name__})"
            ) from None
        if not isinstance(document, dict):
            raise ConfigException(
                f"keyring file {self._path} must hold a JSON object of key id -> base64 key"
            )
        keys: dict[str, bytes] = {}
        for number, (key_id, encoded) in enumerate(document.items(), start=1):
            keys[key_id] = self._entry(number, key_id, encoded)
        with self._lock:
            self._keys, self._mtime = keys, mtime
        log.info("keyring %s loaded: key ids %s", self._path, sorted(keys))

    def _entry(self, number: int, key_id: str, encoded: object) -> bytes:
        """The key of one `"id": "<base64 key>"` entry (the `number`-th of the file); ConfigException naming
        the entry, never showing key material: neither a key, nor an id that looks like one (an entry whose
        id and key were swapped holds the key as its id, and the message would print it)."""
        where = f"keyring file {self._path}: entry {number}"
        if looks_secret(key_id):
            swapped = looks_like_key_material(key_id)
            raise ConfigException(
                f"{where} has its id and key swapped: its id is base64 of {KEY_BYTES} bytes, key material "
                '(neither is shown); write {"<key id>": "<base64 key>"}'
                if swapped
                else f'{where}: its id looks like a secret (not shown); an id names a key, e.g. "k1"'
            )
        if not isinstance(encoded, str):
            raise ConfigException(
                f"{where}: the key of id {key_id!r} must be a base64 string, got {type(encoded).__name__}"
            )
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigException(f"{where}: the key of id {key_id!r} is not base64 (not shown)") from None
        if len(key) != KEY_BYTES:
            raise ConfigException(
                f"{where}: the key of id {key_id!r} is {len(key)} bytes, expected {KEY_BYTES}"
            )
        return key

    def _key(self, key_id: str) -> bytes:
        self._reload()
        with self._lock:
            key = self._keys.get(key_id)
        if key is None and self._path is None and not self._keys:
            raise RemoteStorageException(
                f"key id {key_id!r} is a keyring key id, but no keyring is configured (encryption.keyring.path)"
            )
        if key is None:
            raise RemoteStorageException(
                f"key id {key_id!r} is not in the keyring {self._path or '(in memory)'}; "
                f"known ids: {sorted(self._keys)}"
            )
        return key

    def _kms(self, key_id: str) -> KmsKeys:
        if self.kms is None:
            raise RemoteStorageException(f"key id {key_id!r} names a KMS key, but this keyring has no KMS")
        return self.kms

    def new_data_key(self, key_id: str, context: bytes) -> tuple[bytes, bytes]:
        """A fresh 256-bit data key and its form wrapped by `key_id` (made by KMS for a `kms:` id)."""
        if is_kms_key(key_id):
            return self._kms(key_id).generate(key_id, context)
        data_key = os.urandom(KEY_BYTES)
        return data_key, self.wrap(key_id, data_key, context)

    def wrap(self, key_id: str, data_key: bytes, context: bytes) -> bytes:
        """Encrypt a data key under key `key_id`; `context` (the segment id) is bound as associated data."""
        if is_kms_key(key_id):
            return self._kms(key_id).wrap(key_id, data_key, context)
        nonce = os.urandom(WRAP_NONCE_BYTES)
        aad = WRAP_AAD_PREFIX + key_id.encode() + b"|" + context
        return nonce + AESGCM(self._key(key_id)).encrypt(nonce, data_key, aad)

    def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """Recover a data key; fails if the key id, the context or the wrapped bytes do not match."""
        if is_kms_key(key_id):
            return self._kms(key_id).unwrap(key_id, wrapped, context)
        aad = WRAP_AAD_PREFIX + key_id.encode() + b"|" + context
        try:
            return AESGCM(self._key(key_id)).decrypt(
                wrapped[:WRAP_NONCE_BYTES], wrapped[WRAP_NONCE_BYTES:], aad
            )
        except InvalidTag:
            raise RemoteStorageException(
                f"the data key wrapped under key id {key_id!r} does not authenticate (wrong key or tampered)"
            ) from None


def keyring_for(config: Any) -> Keyring:
    """The keyring an `RsmConfig` names: its keyring file's keys (`encryption.keyring.path`, if any) and
    KMS keys (`encryption.kms.*`; no request is made until a `kms:` key id is used)."""
    path = config.get("encryption.keyring.path")
    return Keyring(str(path) if path else None, kms=KmsKeys.from_config(config))
