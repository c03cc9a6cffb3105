"""Manifests and stored pieces that were edited, truncated or rewritten are refused,
naming the object at fault, and never answered with wrong bytes."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import Segment, make_segment, read_all, write_keyring

from rsm import (
    CustomMetadata,
    IndexType,
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException
from rsm.api.metadata import uuid_from_base64
from rsm.config.keyring import Keyring
from rsm.config.settings import RsmConfig
from rsm.fetch.reader import SegmentReader, cipher_for, list_manifests
from rsm.store.layout import SegmentKeys
from rsm.store.objects import ObjectStore
from rsm.stored import custom_metadata as cm
from rsm.stored.cipher import SegmentCipher
from rsm.stored.data_keys import unwrap_data_key
from rsm.stored.manifest import INDEX_NUMBERS, Manifest, ManifestError
from rsm.stored.pieces import Codec, PieceKind, TransformError
from rsm.stored.rekey import rekey_manifest
from rsm.stored.stages import decode_piece, decode_piece_into, encode_piece

DATA = b"kafka tiered storage " * 300


@pytest.mark.parametrize("encrypted", [False, True])
@pytest.mark.parametrize("delta", [-1, 1, 4096])
def test_a_piece_must_decode_to_exactly_the_recorded_length(encrypted: bool, delta: int) -> None:
    """The decompressor pads to the length asked for: a recorded size larger than the piece must fail,
    not answer zero bytes (encrypted pieces carry no CRC to catch it)."""
    cipher = SegmentCipher(b"\x07" * 32, uuid.uuid4()) if encrypted else None
    stored, codec = encode_piece(DATA, kind=PieceKind.LOG, number=2, compress=True, level=3, cipher=cipher)
    assert codec is Codec.ZSTD
    size = len(DATA) + delta
    with pytest.raises(TransformError, match=rf"log piece 2 .*\bthe {size} bytes recorded"):
        decode_piece(stored, kind=PieceKind.LOG, number=2, codec=codec, size=size, cipher=cipher, crc=None)
    with pytest.raises(TransformError, match=rf"log piece 2 .*\bthe {size} bytes recorded"):
        decode_piece_into(
            stored,
            memoryview(bytearray(size)),
            kind=PieceKind.LOG,
            number=2,
            codec=codec,
            cipher=cipher,
            crc=None,
        )
    good = decode_piece(
        stored, kind=PieceKind.LOG, number=2, codec=codec, size=len(DATA), cipher=cipher, crc=None
    )
    assert bytes(good) == DATA


# -- a store written by the release that wrote manifest version 1 (tests/data/manifest_v1_store) ----------

V1_STORE = Path(__file__).resolve().parents[1] / "data" / "manifest_v1_store"
TEST_ONLY_KEY = b"kafka-tiered-rsm-TEST-ONLY-key-1"  # the fixture's test key (see its README)


@dataclass(frozen=True)
class StoredSegment:
    """A tiered segment as a test sees it: Kafka's metadata, topic config and the originals' SHA-256."""

    name: str
    metadata: RemoteLogSegmentMetadata
    log_config: LogConfig
    sha256: dict[str, str]


def v1_store(tmp_path: Path) -> tuple[dict[str, str], dict[str, StoredSegment]]:
    """A private copy of the v1 fixture store (tests edit it), its RSM configs and its segments."""
    root = tmp_path / "store"
    shutil.copytree(V1_STORE / "store", root)
    keyring = tmp_path / "test-only-kek.json"
    keyring.write_text(json.dumps({"test-only-k1": base64.b64encode(TEST_ONLY_KEY).decode()}))
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": "fixture-bucket",
        "encryption.keyring.path": str(keyring),
    }
    segments = {}
    for doc in json.loads((V1_STORE / "segments.json").read_text())["segments"]:
        tip = TopicIdPartition(uuid_from_base64(doc["topic_id"]), doc["topic"], doc["partition"])
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, uuid_from_base64(doc["segment_id"])),
            doc["start_offset"],
            doc["end_offset"],
            doc["max_timestamp_ms"],
            doc["broker_id"],
            doc["event_timestamp_ms"],
            doc["segment_size_in_bytes"],
            {int(k): v for k, v in doc["segment_leader_epochs"].items()},
            CustomMetadata(base64.b64decode(doc["custom_metadata"])),
        )
        segments[doc["name"]] = StoredSegment(
            doc["name"], metadata, LogConfig(doc["log_config"]), doc["sha256"]
        )
    return configs, segments


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_reads_back(rsm: RemoteStorageManager, seg: StoredSegment) -> None:
    """Every byte of the segment and each of its indexes, as the originals were."""
    md, lc = seg.metadata, seg.log_config
    whole = read_all(rsm.fetch_log_segment(md, 0, None, lc))
    assert sha256(whole) == seg.sha256["log"], seg.name
    assert read_all(rsm.fetch_log_segment(md, 4000, 8300, lc)) == whole[4000:8301]
    for index_type in IndexType:
        if index_type.name in seg.sha256:
            assert sha256(read_all(rsm.fetch_index(md, index_type, lc))) == seg.sha256[index_type.name]
        else:
            with pytest.raises(RemoteResourceNotFoundException):
                rsm.fetch_index(md, index_type, lc)


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
def test_a_store_written_by_the_v1_release_still_reads(tmp_path: Path, arena: bool) -> None:
    configs, segments = v1_store(tmp_path)
    assert set(segments) == {"plain", "secure"}
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        if arena:  # decoded straight into buffers of exactly the chunk's size, as the bridge's arena does
            rsm.set_chunk_allocator(bytearray)
        for seg in segments.values():
            check_reads_back(rsm, seg)
    # and from the manifests alone (the Spark reader, the migration tool)
    store = ObjectStore.from_config(RsmConfig(configs))
    keyring = Keyring(keys={"test-only-k1": TEST_ONLY_KEY})
    keys = list_manifests(store, "fixture-bucket")
    assert len(keys) == 2
    for key in keys:
        reader = SegmentReader.open(store, "fixture-bucket", key, keyring)
        assert reader.manifest.version == 1
        assert (
            sha256(reader.read_range(0, reader.size)) == segments[reader.manifest.segment.topic].sha256["log"]
        )


# -- segments copied by this code (manifest version 2) ---------------------------------------------------


def documented_canonical(doc: dict[str, Any]) -> bytes:
    """The canonical bytes a seal covers, as rsm/stored/manifest.py documents them for other tools."""
    body = {k: v for k, v in doc.items() if k != "seal"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


@dataclass
class Copied:
    """One segment copied into a file store: what a test needs to read it back and to edit its objects."""

    configs: dict[str, str]
    seg: StoredSegment
    raw: bytes
    indexes: dict[str, bytes]
    objects: dict[str, Path]  # ".log", ".indexes", ".manifest" -> file
    made: Segment  # the files copied, and Kafka's metadata before the copy

    def edit_manifest(self, change: Callable[[dict[str, Any]], object], reseal: bool = False) -> None:
        """Change the manifest's JSON; ``reseal``: recompute an unkeyed seal, as anyone can (a forger who
        knows the format rewrites consistently)."""
        path = self.objects[".manifest"]
        doc = json.loads(path.read_bytes())
        change(doc)
        if reseal and isinstance(doc.get("seal"), dict) and doc["seal"]["algorithm"] == "SHA-256":
            doc["seal"]["value"] = base64.b64encode(
                hashlib.sha256(documented_canonical(doc)).digest()
            ).decode()
        path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())

    def read_everything(self, **extra: str) -> tuple[bytes, dict[str, bytes]]:
        """The whole segment and every index through a fresh RSM (no caches)."""
        with RemoteStorageManager() as rsm:
            rsm.configure({**self.configs, **extra})
            md, lc = self.seg.metadata, self.seg.log_config
            log = read_all(rsm.fetch_log_segment(md, 0, None, lc))
            indexes = {t: read_all(rsm.fetch_index(md, IndexType(t), lc)) for t in self.indexes}
        return log, indexes


def copy_segment(
    tmp_path: Path, *, encrypted: bool, compressible: bool = True, name: str = "t", seed: int = 0
) -> Copied:
    """A segment of several 4 KiB chunks copied by this code, zstd on (chunks of random values stay plain)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "store"
    keyring = tmp_path / "kek.json"  # shared by the segments copied into one store
    if not keyring.exists():
        write_keyring(keyring, ("k1",))
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "chunk.size": "4096",
        "encryption.keyring.path": str(keyring),
    }
    lc = LogConfig(
        {"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k1"}
        if encrypted
        else {}
    )
    made = make_segment(tmp_path / f"seg-{name}", TopicIdPartition(uuid.uuid4(), name, 0), batches=30,
                        compressible=compressible, seed=seed)  # fmt: skip
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        md = dataclasses.replace(
            made.metadata, custom_metadata=rsm.copy_log_segment_data(made.metadata, made.data, lc)
        )
        keys = SegmentKeys.of(cm.decode(md.custom_metadata), md)  # type: ignore[arg-type]
    objects = {
        suffix: root / keys.bucket / getattr(keys, suffix[1:]) for suffix in (".log", ".indexes", ".manifest")
    }
    raw = made.data.log_segment.read_bytes()
    return Copied(configs, StoredSegment(name, md, lc, {}), raw, made.files(), objects, made)


def refused(copied: Copied, object_suffix: str, match: str | None = None, **extra: str) -> str:
    """Reading the segment must fail (never answer other bytes), naming the object; returns the message."""
    with pytest.raises(RemoteStorageException, match=match) as info:
        log, indexes = copied.read_everything(**extra)
        assert log == copied.raw and indexes == copied.indexes, "wrong bytes answered"
    message = str(info.value)
    assert copied.objects[object_suffix].name in message, message
    assert "\n" not in message
    return message


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_copies_write_sealed_version_2_manifests_that_read_back(tmp_path: Path, encrypted: bool) -> None:
    copied = copy_segment(tmp_path, encrypted=encrypted)
    doc = json.loads(copied.objects[".manifest"].read_bytes())
    assert doc["version"] == 2
    assert doc["seal"]["algorithm"] == ("HMAC-SHA256" if encrypted else "SHA-256")
    assert (doc["log"]["crc32c"] is None) is encrypted
    assert copied.read_everything() == (copied.raw, copied.indexes)


def test_an_edited_size_of_an_encrypted_compressed_segment_is_refused(tmp_path: Path) -> None:
    """The issue's case: the last chunk's recorded length grows; zeros were answered for the difference."""
    copied = copy_segment(tmp_path, encrypted=True)

    def grow(doc: dict[str, Any]) -> None:
        doc["log"]["size"] += 5
        doc["segment"]["segment_size_in_bytes"] += 5

    copied.edit_manifest(grow)
    refused(copied, ".manifest", "does not authenticate")


def test_an_edited_size_in_a_version_1_manifest_is_refused(tmp_path: Path) -> None:
    """Old manifests have no seal; the exact length check of every decoded piece still refuses the edit."""
    configs, segments = v1_store(tmp_path)
    seg = segments["secure"]
    manifest = next((tmp_path / "store").rglob("secure-*/0/*.manifest"))
    doc = json.loads(manifest.read_bytes())
    doc["log"]["size"] += 5
    manifest.write_bytes(json.dumps(doc).encode())
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        with pytest.raises(RemoteStorageException, match=r"log piece 2 decompresses to \d+ bytes") as info:
            read_all(rsm.fetch_log_segment(seg.metadata, 0, None, seg.log_config))
    assert manifest.with_suffix(".log").name in str(info.value)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_every_single_bit_edit_of_a_manifest_is_refused_naming_it(tmp_path: Path, encrypted: bool) -> None:
    """Flip the low bit of each byte in turn (digits stay digits, letters stay letters: mostly still JSON)."""
    copied = copy_segment(tmp_path, encrypted=encrypted)
    stored = copied.objects[".manifest"].read_bytes()
    keyring = Keyring(copied.configs["encryption.keyring.path"])
    source = "s3://b/t.manifest"
    good = Manifest.from_bytes(stored, source)
    assert cipher_for(good, keyring) is not None or not encrypted
    for i in range(len(stored)):
        edited = bytearray(stored)
        edited[i] ^= 0x01
        with pytest.raises((ManifestError, RemoteStorageException), match=re.escape(source)):
            cipher_for(Manifest.from_bytes(bytes(edited), source), keyring)
    # and through the RSM: one line naming the manifest object
    edited = bytearray(stored)
    edited[stored.index(b'"copy_id":"') + 11] ^= 0x01
    copied.objects[".manifest"].write_bytes(bytes(edited))
    refused(copied, ".manifest")


def test_a_plain_manifest_cannot_switch_its_crcs_off(tmp_path: Path) -> None:
    copied = copy_segment(tmp_path, encrypted=False)
    copied.edit_manifest(lambda doc: doc["log"].update(crc32c=None), reseal=True)
    refused(copied, ".manifest", r"no CRC-32C for log")
    copied = copy_segment(tmp_path / "2", encrypted=False)
    copied.edit_manifest(lambda doc: doc["indexes"]["TIMESTAMP"].update(crc32c=None), reseal=True)
    refused(copied, ".manifest", r"no CRC-32C for TIMESTAMP")


def test_a_plain_manifest_edited_without_resealing_is_refused(tmp_path: Path) -> None:
    copied = copy_segment(tmp_path, encrypted=False)
    copied.edit_manifest(lambda doc: doc["segment"].update(end_offset=doc["segment"]["end_offset"] + 1))
    refused(copied, ".manifest", "does not match its SHA-256 seal")


@pytest.mark.parametrize("compressible", [True, False], ids=["zstd", "stored"])
def test_swapped_chunks_with_their_crcs_are_refused_even_resealed(tmp_path: Path, compressible: bool) -> None:
    """Chunks 0 and 1 trade places in the `.log` object, and their entries in the manifest consistently."""
    copied = copy_segment(tmp_path, encrypted=False, compressible=compressible)
    doc = json.loads(copied.objects[".manifest"].read_bytes())
    sizes = doc["log"]["stored_sizes"]
    log = copied.objects[".log"].read_bytes()
    first, second = log[: sizes[0]], log[sizes[0] : sizes[0] + sizes[1]]
    copied.objects[".log"].write_bytes(second + first + log[sizes[0] + sizes[1] :])

    def swap(doc: dict[str, Any]) -> None:
        for field in ("stored_sizes", "codecs", "crc32c"):
            values = doc["log"][field]
            values[0], values[1] = values[1], values[0]

    copied.edit_manifest(swap, reseal=True)
    refused(copied, ".log", r"log piece [01]: CRC-32C mismatch")


def test_swapped_index_entries_are_refused_even_resealed(tmp_path: Path) -> None:
    copied = copy_segment(tmp_path, encrypted=False)

    def swap(doc: dict[str, Any]) -> None:
        indexes = doc["indexes"]
        indexes["OFFSET"], indexes["TIMESTAMP"] = indexes["TIMESTAMP"], indexes["OFFSET"]

    copied.edit_manifest(swap, reseal=True)
    refused(copied, ".indexes", r"index piece [01]: CRC-32C mismatch")


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_manifest_edited_to_claim_version_1_does_not_read(tmp_path: Path, encrypted: bool) -> None:
    """Version 1 has no seal: a sealed manifest rewritten as version 1 would escape its seal, but its pieces
    were written for version 2 (associated data, bound CRCs) and refuse to decode through it."""
    copied = copy_segment(tmp_path, encrypted=encrypted)

    def downgrade(doc: dict[str, Any]) -> None:
        doc["version"] = 1
        del doc["seal"]
        if encrypted:
            del doc["encryption"]["aad_version"]  # version 1 had none (and one left there is refused)

    copied.edit_manifest(downgrade)
    refused(copied, ".log", "does not authenticate" if encrypted else "CRC-32C mismatch")
    if encrypted:
        copied = copy_segment(tmp_path / "2", encrypted=True)
        copied.edit_manifest(lambda doc: (doc.update(version=1), doc.pop("seal")))
        refused(copied, ".manifest", "a version 1 manifest with encryption.aad_version")


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated-by-1": lambda p: _truncate(p, p.stat().st_size - 1),
    "truncated-to-half": lambda p: _truncate(p, p.stat().st_size // 2),
    "emptied": lambda p: _truncate(p, 0),
    "flipped-first": lambda p: _flip(p, 0),
    "flipped-middle": lambda p: _flip(p, p.stat().st_size // 2),
    "flipped-last": lambda p: _flip(p, p.stat().st_size - 1),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("suffix", [".log", ".indexes", ".manifest"])
@pytest.mark.parametrize(
    ("encrypted", "compressible", "arena"),
    [(False, True, False), (False, False, True), (True, True, False), (True, False, True)],
    ids=["plain-zstd", "plain-stored-arena", "encrypted-zstd", "encrypted-stored-arena"],
)
def test_every_object_kind_damaged_is_refused_naming_it(
    tmp_path: Path, corruption: str, suffix: str, encrypted: bool, compressible: bool, arena: bool
) -> None:
    copied = copy_segment(tmp_path, encrypted=encrypted, compressible=compressible)
    CORRUPTIONS[corruption](copied.objects[suffix])
    with pytest.raises(RemoteStorageException) as info, RemoteStorageManager() as rsm:
        rsm.configure(copied.configs)
        if arena:
            rsm.set_chunk_allocator(bytearray)
        md, lc = copied.seg.metadata, copied.seg.log_config
        # a fetch may answer, but only the right bytes; something must refuse
        assert read_all(rsm.fetch_log_segment(md, 0, None, lc)) == copied.raw
        for t, data in copied.indexes.items():
            assert read_all(rsm.fetch_index(md, IndexType(t), lc)) == data
    assert copied.objects[suffix].name in str(info.value)


@pytest.mark.parametrize(
    ("suffix", "corruption"),
    [
        (suffix, c)
        for suffix in (".log", ".indexes", ".manifest")
        for c in sorted(CORRUPTIONS)
        if suffix != ".manifest" or not c.startswith("flipped")
    ],  # fmt: skip
)
@pytest.mark.parametrize("name", ["plain", "secure"])
def test_objects_of_a_version_1_segment_damaged_are_refused_naming_them(
    tmp_path: Path, corruption: str, suffix: str, name: str
) -> None:
    """Old segments too. A version 1 manifest's bit flips are left out: nothing authenticates one (see
    rsm/stored/manifest.py), so for manifests the damage is truncation."""
    configs, segments = v1_store(tmp_path)
    seg = segments[name]
    damaged = next((tmp_path / "store").rglob(f"{name}-*/0/*{suffix}"))
    CORRUPTIONS[corruption](damaged)
    with pytest.raises(RemoteStorageException) as info, RemoteStorageManager() as rsm:
        rsm.configure(configs)
        check_reads_back(rsm, seg)
    assert damaged.name in str(info.value)


# -- manifest.require.authenticated, and sealing the manifests of old segments ---------------------------

REQUIRE = {"manifest.require.authenticated": "true"}


def test_required_authentication_refuses_version_1_and_unencrypted_manifests(tmp_path: Path) -> None:
    configs, segments = v1_store(tmp_path / "v1")
    with RemoteStorageManager() as rsm:
        rsm.configure({**configs, **REQUIRE})
        for seg in segments.values():
            with pytest.raises(RemoteStorageException, match="is a version 1 manifest") as info:
                rsm.fetch_log_segment(seg.metadata, 0, None, seg.log_config)
            assert ".manifest" in str(info.value) and seg.name in str(info.value)
    store = ObjectStore.from_config(RsmConfig(configs))
    for key in list_manifests(store, "fixture-bucket"):
        with pytest.raises(ManifestError, match="is a version 1 manifest"):
            SegmentReader.open(
                store, "fixture-bucket", key, Keyring(keys={"test-only-k1": TEST_ONLY_KEY}), None, True
            )
    encrypted = copy_segment(tmp_path / "encrypted", encrypted=True)
    assert encrypted.read_everything(**REQUIRE) == (encrypted.raw, encrypted.indexes)
    plain = copy_segment(tmp_path / "plain", encrypted=False)
    refused(plain, ".manifest", "belongs to an unencrypted segment", **REQUIRE)
    # and a plain topic is not tiered into a store whose reads would refuse it
    made = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "plain-topic", 0))
    with RemoteStorageManager() as rsm:
        rsm.configure({**plain.configs, **REQUIRE})
        with pytest.raises(ConfigException, match="topic plain-topic is not encrypted"):
            rsm.copy_log_segment_data(made.metadata, made.data, LogConfig())


def test_version_1_manifests_sealed_in_place_read_with_authentication_required(tmp_path: Path) -> None:
    configs, segments = v1_store(tmp_path)
    keyring_path = Path(configs["encryption.keyring.path"])
    keys = json.loads(keyring_path.read_text())
    keys["k2"] = base64.b64encode(b"another TEST-ONLY key, 32 bytes!").decode()
    keyring_path.write_text(json.dumps(keys))
    store = ObjectStore.from_config(RsmConfig(configs))
    for key in list_manifests(store, "fixture-bucket"):
        raw = store.get("fixture-bucket", key)
        secure = b'"encryption":null' not in raw
        rewritten = rekey_manifest(raw, key, Keyring(keyring_path), "k2" if secure else None)
        doc = json.loads(rewritten)
        assert doc["version"] == 2 and doc["seal"]["algorithm"] == ("HMAC-SHA256" if secure else "SHA-256")
        if secure:
            assert doc["encryption"]["key_id"] == "k2" and doc["encryption"]["aad_version"] == 1
        store.put("fixture-bucket", key, rewritten)
    del keys["test-only-k1"]  # the old key retires: the data key is wrapped under k2 now
    keyring_path.write_text(json.dumps(keys))
    secure, plain = segments["secure"], segments["plain"]
    with RemoteStorageManager() as rsm:
        rsm.configure({**configs, **REQUIRE})
        check_reads_back(rsm, secure)
        with pytest.raises(RemoteStorageException, match="belongs to an unencrypted segment"):
            rsm.fetch_log_segment(plain.metadata, 0, None, plain.log_config)
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        check_reads_back(rsm, plain)  # its CRCs, now bound to their pieces, still check
    # a sealed manifest of an old segment is as closed to edits as a new one
    manifest = next((tmp_path / "store").rglob("secure-*/0/*.manifest"))
    doc = json.loads(manifest.read_bytes())
    doc["segment"]["end_offset"] += 1
    manifest.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        with pytest.raises(RemoteStorageException, match="does not authenticate") as info:
            rsm.fetch_log_segment(secure.metadata, 0, None, secure.log_config)
        assert manifest.name in str(info.value)


# -- keys, nonces, caches --------------------------------------------------------------------------------


def test_data_keys_are_unique_per_segment_and_copy_and_nonces_per_piece(tmp_path: Path) -> None:
    """Every copy (a retry too, another segment too) draws its own data key, so a (key, nonce) pair is never
    used twice: within one copy, each piece (chunk or index) has its own nonce."""
    copied = copy_segment(tmp_path, encrypted=True)
    other = copy_segment(tmp_path, encrypted=True, name="u")  # same store, same key-encryption key
    keyring = Keyring(copied.configs["encryption.keyring.path"])

    def data_key(c: Copied) -> bytes | None:
        return unwrap_data_key(Manifest.from_bytes(c.objects[".manifest"].read_bytes(), "m"), keyring)

    data_keys, stored_logs = [data_key(other)], []
    for _ in range(3):  # the same segment copied again: Kafka retries
        data_keys.append(data_key(copied))
        stored_logs.append(copied.objects[".log"].read_bytes())
        with RemoteStorageManager() as rsm:
            rsm.configure(copied.configs)
            rsm.copy_log_segment_data(copied.made.metadata, copied.made.data, copied.seg.log_config)
    assert len(set(data_keys)) == 4 and len(set(stored_logs)) == 3
    manifest = Manifest.from_bytes(copied.objects[".manifest"].read_bytes(), "m")
    pieces = [(PieceKind.LOG, i) for i in range(manifest.log.count)]
    pieces += [(PieceKind.INDEX, INDEX_NUMBERS[t]) for t in manifest.indexes]
    assert len({SegmentCipher._nonce(kind, n) for kind, n in pieces}) == len(pieces) > 5


def test_a_manifest_rewritten_with_another_copys_id_does_not_get_its_cached_chunks(tmp_path: Path) -> None:
    """Decoded chunks are cached per copy: a plain manifest anyone rewrote to carry the copy id of an
    encrypted segment read a moment before must not be answered with that segment's decrypted chunks."""
    secret = copy_segment(tmp_path, encrypted=True, name="secret")
    other = copy_segment(tmp_path, encrypted=False, name="other", seed=1)
    assert other.raw != secret.raw
    secret_id = json.loads(secret.objects[".manifest"].read_bytes())["copy_id"]
    other.edit_manifest(lambda doc: doc.update(copy_id=secret_id), reseal=True)
    with RemoteStorageManager() as rsm:  # one chunk cache, as one broker serves many topics
        rsm.configure(secret.configs)
        assert (
            read_all(rsm.fetch_log_segment(secret.seg.metadata, 0, None, secret.seg.log_config)) == secret.raw
        )
        got = read_all(rsm.fetch_log_segment(other.seg.metadata, 0, None, other.seg.log_config))
    assert got == other.raw
