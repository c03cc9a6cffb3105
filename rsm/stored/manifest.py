"""The segment manifest: versioned JSON, written last, the commit point of a copy.

A segment exists for readers exactly when its `.manifest` object exists: copy writes `.log` and `.indexes`
first and the manifest last (one atomic PUT / rename), retries delete the old manifest before rewriting the
data objects, and delete removes the manifest first. So a reader never sees half a copy.

The manifest carries everything needed to read the segment without a broker or the metadata topic (the
Spark reader and the migration tool rely on it). This module is the format's reference; other tools read it.

```json
{
  "format": "kafka-tiered-rsm/segment-manifest",
  "version": 2,
  "copy_id": "<32 hex digits, new for every copy attempt>",
  "created_ms": 1700000000000,
  "segment": {"topic": "t", "topic_id": "<22-char base64>", "partition": 0, "segment_id": "<base64>",
              "start_offset": 0, "end_offset": 99, "max_timestamp_ms": 1, "broker_id": 0,
              "event_timestamp_ms": 1, "segment_size_in_bytes": 12345, "txn_idx_empty": true,
              "segment_leader_epochs": {"0": 0}},
  "location": {"bucket": "b", "prefix": "p/", "log": "<key>", "indexes": "<key>"},
  "encryption": null | {"algorithm": "AES-256-GCM", "key_id": "k1", "wrapped_key": "<base64>"},
  "log": {"size": 12345, "stored_size": 6789, "chunk_size": 4194304,
          "stored_sizes": [...], "codecs": [0 | 1, ...], "crc32c": [...] | null},
  "indexes": {"OFFSET": {"offset": 0, "stored_size": 10, "size": 8, "codec": 0, "crc32c": 123 | null},
              "TIMESTAMP": ..., "PRODUCER_SNAPSHOT": ..., "LEADER_EPOCH": ..., "TRANSACTION": (when present)},
  "integrity": {"batches": 10, "first_offset": 0, "last_offset": 99, "max_timestamp_ms": 1,
                "compressed_batch_bytes": 0},
  "validation": null | {"policy": "...", "action": "tier", "violations": [{"offset": 5, "reason": "..."}],
                        "violation_count": 1},
  "seal": {"algorithm": "HMAC-SHA256" | "SHA-256", "value": "<base64>"}
}
```

`segment` is Kafka's metadata of the segment as the copy received it; `integrity` is what the copy's check
found in the file. `segment.end_offset` is Kafka's `endOffset` (the next segment's base offset - 1) and
`integrity.last_offset` the last batch's last offset: they differ where compaction left a hole at the
segment's end, and the offsets between them hold no record (`Manifest.last_batch_offset`; a
manifest without `integrity.last_offset`, or of an empty segment, reads as ending at `segment.end_offset`,
or before `segment.start_offset`). Both are kept: Kafka, `rsm store` and deletes speak of the segment's
range, readers stop at its last batch.

`log.stored_sizes[i]` is the stored length of chunk i; chunk i holds original bytes
[i * chunk_size, min((i + 1) * chunk_size, size)) and starts in the `.log` object at the sum of the stored
sizes before it. `codecs` and `crc32c` follow the same numbering. Every piece must decode to exactly the
length recorded (`rsm.stored.stages`). Readers must refuse a `version` they do not know.

Versions. Version 1 (written up to commit 9b17d63) has no `seal`, and its CRCs are plain CRC-32Cs of the
original bytes. Version 2 is written since; readers read both, side by side, because stores hold years of
segments. What version 2 adds:

- Encrypted segments (`encryption` set): `seal` is `HMAC-SHA256` over the manifest's canonical bytes,
  keyed by HKDF-SHA256(data key, info = "kafka-tiered-rsm/manifest-seal/v2|" + the 16 segment id bytes),
  no salt, 32 bytes (`rsm.stored.cipher.SegmentCipher.seal_manifest`). The data key is wrapped under the
  keyring key the manifest names and bound to the segment id, so checking the seal needs the keyring,
  which decrypting needs anyway; without it nobody can make a seal. Any edit of the manifest is refused,
  before any of it is used. `crc32c` entries are null (GCM authenticates every piece; a CRC of the
  plaintext would leak). `encryption.aad_version` (new in version 2) names the associated data the pieces
  were encrypted with: 2 for copies ("kafka-tiered-rsm/chunk/v2|" + segment id (16) + kind (1) + number
  (8, big-endian)), so a manifest edited to claim version 1 (no seal; pieces "…/chunk/v1|") does not
  decrypt them; 1 for a version 1 segment whose manifest was rewritten as version 2 (manifest only: its
  pieces stay as they were written).
- Unencrypted segments: `seal` is `SHA-256` of the canonical bytes, checked on parse; every chunk and index
  must carry a CRC-32C (null is refused: a manifest cannot switch the integrity check off), and each CRC
  is bound to its piece: CRC-32C(original bytes || segment id (16) || kind ("L" chunk, "I" index) ||
  number (8, big-endian; an index's number is its position in `IndexType`)).
- Canonical form: JSON as `json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`
  writes it: keys sorted, no whitespace, non-ASCII characters as \\uXXXX escapes, integers in decimal (a
  manifest holds no floating-point numbers), base64 with its padding and no unused bits set. The seal
  covers the document without its `seal` member in canonical form; the stored object is the whole
  document in canonical form, byte for byte (anything else is refused: so any edit of the stored bytes,
  even one that leaves the meaning alone, is refused, and no two readers can parse it differently).

What this does and does not protect. Encryption is the authentication: an encrypted segment's manifest and
pieces cannot be changed, truncated, swapped or moved to another segment without being refused. A plain
segment has no key, so nothing stops someone who can write the store from rewriting it entirely (data, CRCs,
seal) into another valid segment; what its checks catch is everything short of that: damage, a manifest
edited without recomputing its seal, chunks or index pieces swapped or moved with their CRCs (the binding),
a CRC set to null. Version 1 manifests are authenticated by nothing: GCM still refuses edited or moved
pieces of an encrypted one and every piece's length is checked, but edits of its other fields (segment
metadata, `integrity`, `validation`) and, in a plain one, chunks swapped together with their CRCs go
unnoticed; a plain one without CRCs is refused (no release wrote one). Batch continuity across chunks is not
checked on read (a fetch starts at any chunk and would need the one before); the copy checks every batch
before upload, and Kafka's consumers check each batch's CRC. The seal covers the content, not where the
manifest is stored: the broker checks the segment id against Kafka's metadata; a tool reading manifests
alone should check the object's key. An operator whose every topic is encrypted sets
`manifest.require.authenticated=true` once version 1 manifests have been rewritten as version 2
(`rsm.stored.rekey`, which also re-keys): fetches then refuse version 1 manifests and unencrypted segments, and
copies of unencrypted segments are refused.

Decoded chunks are cached under `Manifest.cache_id`: the seal for version 2 (a digest of the whole
manifest, so a rewritten manifest that copied another's `copy_id` does not share its cached chunks) and
`copy_id` for version 1.

`location.log` and `location.indexes` must be exactly the keys `rsm.stored.layout` derives from `location.prefix`
and the segment's own fields (topic, topic id, partition, start offset, segment id), and those fields and the
bucket and prefix must be valid names (`rsm.api.names`): readers refuse any other manifest, so one planted in
the store cannot make them read another segment's objects or a file outside the store.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import itertools
import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from rsm.api.metadata import IndexType, RemoteLogSegmentMetadata, is_int, uuid_from_base64, uuid_to_base64
from rsm.api.names import bucket_problem, prefix_problem, topic_problem
from rsm.stored.cipher import SegmentCipher
from rsm.stored.layout import INDEXES_SUFFIX, LOG_SUFFIX, partition_dir
from rsm.stored.pieces import AAD_PREFIXES, CURRENT_VERSION, Codec, PieceKind, piece_tag

FORMAT = "kafka-tiered-rsm/segment-manifest"
VERSION = CURRENT_VERSION  # written by copies
READABLE_VERSIONS = (1, 2)
SEAL_HMAC = "HMAC-SHA256"  # encrypted segments: keyed by the segment's data key (authentication)
SEAL_DIGEST = "SHA-256"  # unencrypted segments: a checksum anyone can recompute
SEAL_BYTES = 32
INDEX_NUMBERS = {t: i for i, t in enumerate(IndexType)}  # piece numbers of indexes in the `.indexes` object


class ManifestError(ValueError):
    """A manifest that this code cannot read (unknown version, missing or inconsistent fields, a seal
    that does not match)."""


def _serialize(doc: dict[str, Any]) -> bytes:
    """A document in canonical form (see the module): what is stored, and what a seal covers."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def canonical_bytes(doc: dict[str, Any]) -> bytes:
    """The bytes a seal covers: ``doc`` without ``seal``, in canonical form (see the module)."""
    return _serialize({k: v for k, v in doc.items() if k != "seal"})


@dataclass(frozen=True)
class Seal:
    """A version 2 manifest's seal: HMAC-SHA256 (encrypted segments) or SHA-256 (unencrypted ones)."""

    algorithm: str
    value: bytes

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "value": base64.b64encode(self.value).decode("ascii")}

    @classmethod
    def from_json(cls, doc: Any, source: str) -> Seal:
        if not isinstance(doc, dict):
            raise ManifestError(f"{source} is a version 2 manifest without a seal")
        try:
            text = str(doc["value"])
            value = base64.b64decode(text, validate=True)
            algorithm = str(doc["algorithm"])
        except (KeyError, binascii.Error, ValueError):
            raise ManifestError(f"{source} has a malformed seal") from None
        if base64.b64encode(value).decode("ascii") != text:  # base64 ignores unused low bits: edits too
            raise ManifestError(f"{source} has a seal that is not canonical base64")
        if algorithm not in (SEAL_HMAC, SEAL_DIGEST) or len(value) != SEAL_BYTES:
            raise ManifestError(f"{source} has a seal of unknown algorithm {algorithm!r} or length")
        return cls(algorithm, value)


@dataclass(frozen=True)
class ChunkIndex:
    """Where each chunk of the `.log` object is and how to decode it."""

    size: int
    chunk_size: int
    stored_sizes: tuple[int, ...]
    codecs: tuple[Codec, ...]
    crc32c: tuple[int, ...] | None
    offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0 or self.size < 0 or any(n < 0 for n in self.stored_sizes):
            raise ManifestError(
                f"chunk index has a chunk size of {self.chunk_size}, a size of {self.size} or a negative "
                "stored size"
            )
        expected = -(-self.size // self.chunk_size) if self.size else 0
        if len(self.stored_sizes) != expected or len(self.codecs) != expected:
            raise ManifestError(
                f"chunk index of a {self.size}-byte log in {self.chunk_size}-byte chunks needs {expected} "
                f"entries, has {len(self.stored_sizes)} sizes and {len(self.codecs)} codecs"
            )
        if self.crc32c is not None and len(self.crc32c) != expected:
            raise ManifestError(f"chunk index has {len(self.crc32c)} CRCs for {expected} chunks")
        object.__setattr__(self, "offsets", (0, *itertools.accumulate(self.stored_sizes)))

    @property
    def count(self) -> int:
        return len(self.stored_sizes)

    @property
    def stored_size(self) -> int:
        return self.offsets[-1]

    def original_span(self, i: int) -> tuple[int, int]:
        start = i * self.chunk_size
        return start, min(start + self.chunk_size, self.size)

    def stored_span(self, i: int) -> tuple[int, int]:
        return self.offsets[i], self.offsets[i + 1]

    def chunk_of(self, position: int) -> int:
        return position // self.chunk_size

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "stored_size": self.stored_size,
            "chunk_size": self.chunk_size,
            "stored_sizes": list(self.stored_sizes),
            "codecs": [int(c) for c in self.codecs],
            "crc32c": None if self.crc32c is None else list(self.crc32c),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ChunkIndex:
        crcs = doc.get("crc32c")
        index = cls(
            size=int(doc["size"]),
            chunk_size=int(doc["chunk_size"]),
            stored_sizes=tuple(int(x) for x in doc["stored_sizes"]),
            codecs=tuple(Codec(int(x)) for x in doc["codecs"]),
            crc32c=None if crcs is None else tuple(int(x) for x in crcs),
        )
        if "stored_size" in doc and int(doc["stored_size"]) != index.stored_size:
            raise ManifestError("log.stored_size disagrees with the sum of stored_sizes")
        return index


@dataclass(frozen=True)
class IndexEntry:
    """One index inside the `.indexes` object."""

    offset: int
    stored_size: int
    size: int
    codec: Codec
    crc32c: int | None

    def __post_init__(self) -> None:
        if min(self.offset, self.stored_size, self.size) < 0:
            raise ManifestError(f"index entry with a negative offset or size: {self}")

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "stored_size": self.stored_size,
            "size": self.size,
            "codec": int(self.codec),
            "crc32c": self.crc32c,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IndexEntry:
        crc = doc.get("crc32c")
        return cls(int(doc["offset"]), int(doc["stored_size"]), int(doc["size"]), Codec(int(doc["codec"])),
                   None if crc is None else int(crc))  # fmt: skip


@dataclass(frozen=True)
class Encryption:
    """How an encrypted segment's pieces are keyed.

    ``aad_version``: the associated data its pieces were encrypted with (`rsm.stored.pieces.AAD_PREFIXES`):
    recorded from manifest version 2 on (2 for copies, 1 for a version 1 segment whose manifest was
    rewritten as version 2); None, absent from the JSON, in a version 1 manifest (1).
    """

    key_id: str
    wrapped_key: bytes
    algorithm: str = "AES-256-GCM"
    aad_version: int | None = CURRENT_VERSION

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "algorithm": self.algorithm,
            "key_id": self.key_id,
            "wrapped_key": base64.b64encode(self.wrapped_key).decode("ascii"),
        }
        if self.aad_version is not None:
            doc["aad_version"] = self.aad_version
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Encryption:
        if doc.get("algorithm", "AES-256-GCM") != "AES-256-GCM":
            raise ManifestError(f"unknown encryption algorithm {doc.get('algorithm')!r}")
        aad = doc.get("aad_version")
        if aad is not None and (type(aad) is not int or aad not in AAD_PREFIXES):
            raise ManifestError(f"unknown encryption aad_version {aad!r}")
        return cls(str(doc["key_id"]), base64.b64decode(doc["wrapped_key"]), aad_version=aad)


@dataclass(frozen=True)
class SegmentInfo:
    """The copy of the segment's metadata kept in the manifest."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    txn_idx_empty: bool
    segment_leader_epochs: dict[str, int]

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata, txn_idx_empty: bool) -> SegmentInfo:
        seg = metadata.remote_log_segment_id
        tip = seg.topic_id_partition
        return cls(
            topic=tip.topic,
            topic_id=uuid_to_base64(tip.topic_id),
            partition=tip.partition,
            segment_id=uuid_to_base64(seg.id),
            start_offset=metadata.start_offset,
            end_offset=metadata.end_offset,
            max_timestamp_ms=metadata.max_timestamp_ms,
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            segment_size_in_bytes=metadata.segment_size_in_bytes,
            txn_idx_empty=txn_idx_empty,
            segment_leader_epochs={str(k): v for k, v in metadata.segment_leader_epochs.items()},
        )


@dataclass(frozen=True)
class Manifest:
    """One segment copy's manifest (see the module for the format and what its versions guarantee).

    ``source`` names the object it was read from, for messages; ``signed`` holds the canonical bytes its
    seal covers (version 2, as read; empty for a manifest built in memory).
    """

    copy_id: str
    created_ms: int
    segment: SegmentInfo
    location: dict[str, str]
    encryption: Encryption | None
    log: ChunkIndex
    indexes: dict[IndexType, IndexEntry]
    integrity: dict[str, int]
    validation: dict[str, Any] | None = None
    version: int = VERSION
    seal: Seal | None = None
    source: str = field(default="manifest", compare=False, repr=False)
    signed: bytes = field(default=b"", compare=False, repr=False)

    @functools.cached_property
    def segment_uuid(self) -> uuid.UUID:
        return uuid_from_base64(self.segment.segment_id)

    @property
    def last_batch_offset(self) -> int:
        """The last offset a batch of this copy holds, which the metadata's `end_offset` can lie past (a
        compacted tail). From `integrity` (`last_offset`, recorded by every copy's check); a
        manifest without it (or with a value outside the segment's range) reads as ending at `end_offset`,
        an empty segment (no batches) as `start_offset - 1`."""
        seg = self.segment
        if self.integrity.get("batches") == 0:
            return seg.start_offset - 1
        last = self.integrity.get("last_offset")
        return last if last is not None and seg.start_offset <= last <= seg.end_offset else seg.end_offset

    @property
    def stored_bytes(self) -> int:
        """What the copy's pieces take in the store: its log chunks and index pieces (the manifest not
        counted), as `rsm store du` and `rsm migrate` report sizes."""
        return self.log.stored_size + sum(e.stored_size for e in self.indexes.values())

    @property
    def aad_version(self) -> int:
        """The associated-data version of the segment's pieces (see `Encryption`)."""
        enc = self.encryption
        return 1 if enc is None or enc.aad_version is None else enc.aad_version

    @functools.cached_property
    def cache_id(self) -> str:
        """What decoded chunks of this copy are cached under (see the module)."""
        return self.copy_id if self.seal is None else self.seal.value.hex()

    def piece_tag(self, kind: PieceKind, number: int) -> bytes | None:
        """What the recorded CRC of a piece is bound to (version 2), else None (plain CRC-32C)."""
        return piece_tag(self.segment_uuid, kind, number) if self.version >= 2 else None

    def check_seal(self, cipher: SegmentCipher) -> None:
        """Refuse a version 2 encrypted manifest whose seal is not its segment's seal of its content.

        Called once the data key is unwrapped (`rsm.stored.data_keys.cipher_for`); remembered on this object,
        since the same parsed manifest under the key it names is checked once for all.
        """
        if self.version < 2 or self.encryption is None or self.__dict__.get("_sealed"):
            return
        if (
            self.seal is None
            or not self.signed
            or not cipher.manifest_seal_matches(self.signed, self.seal.value)
        ):
            raise ManifestError(
                f"{self.source} does not authenticate under its segment's data key "
                "(edited, damaged, or sealed for another segment)"
            )
        self.__dict__["_sealed"] = True  # a frozen dataclass: a private memo, not a field

    def to_json(self) -> dict[str, Any]:
        """The document without its seal (what the seal covers)."""
        return {
            "format": FORMAT,
            "version": self.version,
            "copy_id": self.copy_id,
            "created_ms": self.created_ms,
            "segment": asdict(self.segment),
            "location": dict(self.location),
            "encryption": None if self.encryption is None else self.encryption.to_json(),
            "log": self.log.to_json(),
            "indexes": {t.value: e.to_json() for t, e in self.indexes.items()},
            "integrity": dict(self.integrity),
            "validation": self.validation,
        }

    def to_bytes(self, cipher: SegmentCipher | None = None) -> bytes:
        """The stored document, sealed (version 2): with the segment's ``cipher`` when it is encrypted."""
        doc = self.to_json()
        body = canonical_bytes(doc)
        if self.version < 2:
            return body
        if self.encryption is not None:
            if cipher is None:
                raise ValueError("sealing an encrypted segment's manifest needs its cipher")
            seal = Seal(SEAL_HMAC, cipher.seal_manifest(body))
        else:
            seal = Seal(SEAL_DIGEST, hashlib.sha256(body).digest())
        return _serialize({**doc, "seal": seal.to_json()})

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "manifest") -> Manifest:
        """Parse a stored manifest; one of version 2 must be stored exactly in canonical form."""
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the stack allows
            raise ManifestError(f"{source} is not JSON: {exc}") from None
        manifest = cls.from_json(doc, source)
        if manifest.version >= 2 and bytes(data) != _serialize(doc):
            raise ManifestError(f"{source} is not stored in canonical form (edited)")
        return manifest

    @classmethod
    def from_json(cls, doc: Any, source: str = "manifest") -> Manifest:
        """Parse and check a stored document; an unencrypted version 2 manifest's seal is checked here,
        an encrypted one's needs the data key (`check_seal`)."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f"{source} is not a {FORMAT} document")
        version = doc.get("version")
        if type(version) is not int or version not in READABLE_VERSIONS:
            raise ManifestError(
                f"{source} has version {version!r}; this reader knows {list(READABLE_VERSIONS)}"
            )
        seal = None
        signed = b""
        if version >= 2:
            seal = Seal.from_json(doc.get("seal"), source)
            signed = canonical_bytes(doc)
            # an unkeyed seal is checked first, so any edit is reported as what it is
            if seal.algorithm == SEAL_DIGEST and hashlib.sha256(signed).digest() != seal.value:
                raise ManifestError(f"{source} does not match its SHA-256 seal (edited or damaged)")
        elif "seal" in doc:
            raise ManifestError(f"{source} is a version 1 manifest with a seal (version 1 never had one)")
        try:
            seg = doc["segment"]
            manifest = cls(
                copy_id=str(doc["copy_id"]),
                created_ms=int(doc["created_ms"]),
                segment=SegmentInfo(**{**seg, "segment_leader_epochs": dict(seg["segment_leader_epochs"])}),
                location={str(k): str(v) for k, v in doc["location"].items()},
                encryption=None if doc.get("encryption") is None else Encryption.from_json(doc["encryption"]),
                log=ChunkIndex.from_json(doc["log"]),
                indexes={IndexType(k): IndexEntry.from_json(v) for k, v in doc["indexes"].items()},
                integrity={str(k): int(v) for k, v in doc.get("integrity", {}).items()},
                validation=doc.get("validation"),
                version=version,
                seal=seal,
                source=source,
                signed=signed,
            )
            manifest.segment_uuid  # noqa: B018 - a malformed segment id is refused here, not at first use
        except ManifestError as exc:  # from the parts' parsers, which do not know the object
            raise ManifestError(f"{source} is malformed: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            # a member of another JSON type than the format's (AttributeError), Infinity as an int (Overflow);
            # the message may quote the document (a key): escaped, so it stays one line of the broker's log
            detail = str(exc).encode("unicode_escape").decode("ascii")
            raise ManifestError(f"{source} is malformed: {type(exc).__name__}: {detail}") from None
        manifest._check_consistency()
        _check_location(manifest.segment, manifest.location, source)
        return manifest

    def _check_consistency(self) -> None:
        """What every manifest of its kind must hold, before anything of it is used."""
        crcs = [self.log.crc32c, *(e.crc32c for e in self.indexes.values())]
        if self.encryption is None:
            # a plain segment's only integrity check: no release wrote a plain manifest without CRCs
            missing = ["log"] if self.log.crc32c is None else []
            missing += [t.value for t, e in self.indexes.items() if e.crc32c is None]
            if missing:
                raise ManifestError(
                    f"{self.source} records no CRC-32C for {', '.join(missing)} of an unencrypted segment"
                )
        elif self.version >= 2 and any(c is not None for c in crcs):
            raise ManifestError(f"{self.source} records CRC-32Cs for an encrypted segment")
        elif (self.encryption.aad_version is None) != (self.version < 2):
            # version 1 pieces only: else a sealed manifest rewritten as version 1 would still decrypt
            raise ManifestError(
                f"{self.source}: a version {self.version} manifest "
                f"{'without' if self.version >= 2 else 'with'} encryption.aad_version"
            )
        if self.version >= 2:
            assert self.seal is not None
            expected = SEAL_HMAC if self.encryption is not None else SEAL_DIGEST
            if self.seal.algorithm != expected:
                raise ManifestError(
                    f"{self.source} is sealed with {self.seal.algorithm}; "
                    f"{'an encrypted' if self.encryption is not None else 'an unencrypted'} segment's "
                    f"manifest is sealed with {expected}"
                )


def require_authenticated(manifest: Manifest) -> None:
    """Refuse a manifest no key authenticates (`manifest.require.authenticated=true`)."""
    if manifest.version < 2:
        raise ManifestError(
            f"{manifest.source} is a version 1 manifest (not authenticated; re-key the segment) "
            "and manifest.require.authenticated=true"
        )
    if manifest.encryption is None:
        raise ManifestError(
            f"{manifest.source} belongs to an unencrypted segment (its manifest cannot be authenticated) "
            "and manifest.require.authenticated=true"
        )


def _check_location(seg: SegmentInfo, location: dict[str, str], source: str) -> None:
    """Refuse a manifest whose object keys are not the segment's own (see the module docstring)."""

    def refuse(name: str, value: object, problem: str) -> ManifestError:
        return ManifestError(f"{source} has an unusable {name} {value!r}: it {problem}")

    def kafka_id(value: object) -> str | None:
        try:
            ok = isinstance(value, str) and uuid_to_base64(uuid_from_base64(value)) == value
        except ValueError:
            ok = False
        return None if ok else "is not a Kafka id (22 characters of URL-safe base64)"

    numbers = {"partition": seg.partition, "start_offset": seg.start_offset}
    checks = [
        ("segment.topic", seg.topic, topic_problem(seg.topic)),
        ("segment.topic_id", seg.topic_id, kafka_id(seg.topic_id)),
        ("segment.segment_id", seg.segment_id, kafka_id(seg.segment_id)),
        *(
            (f"segment.{name}", n, None if is_int(n) and n >= 0 else "is not a non-negative int")
            for name, n in numbers.items()
        ),
        ("location.bucket", location.get("bucket"), bucket_problem(location.get("bucket"))),
        ("location.prefix", location.get("prefix"), prefix_problem(location.get("prefix"))),
    ]
    for name, value, problem in checks:
        if problem:
            raise refuse(name, value, problem)
    stem = partition_dir(location["prefix"], seg.topic, seg.topic_id, seg.partition)
    stem += f"{seg.start_offset:020d}-{seg.segment_id}"
    for name, suffix in (("log", LOG_SUFFIX), ("indexes", INDEXES_SUFFIX)):
        if location.get(name) != stem + suffix:
            raise refuse(
                f"location.{name}", location.get(name), f"is not this segment's key {stem + suffix!r}"
            )
