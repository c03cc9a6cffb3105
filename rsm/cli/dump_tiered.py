"""``rsm dump-log`` of a tiered segment: its objects read back through the manifest.

A tiered segment is three objects (``<base>-<segment id>.log`` chunked, compressed and maybe encrypted,
``.indexes`` holding every index, ``.manifest`` describing both). To dump one, its files are rebuilt from
the store exactly as the RemoteStorageManager's fetch path gives them to a broker (every chunk decrypted
with the keyring, decompressed and checked) into a private temporary directory under Kafka's own names,
then dumped there as local files are: the output is the local file's, line for line, but for the
``Dumping`` line, which names the stored object.

Two ways in: a path to any of the three objects in a file store (``--keyring`` or ``--config`` gives
the keyring of an encrypted one), or ``--config server.properties --topic T --partition P --offset O``,
which finds the segment serving that offset in the partition's history as the readers do (any store,
S3 included).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import IndexType
from rsm.cli.dump_files import dump_files
from rsm.config.keyring import Keyring
from rsm.config.properties import tool_configs
from rsm.config.settings import RsmConfig
from rsm.store.layout import OBJECT_NAME, is_tiered_object
from rsm.store.objects import ObjectStore
from rsm.stored.manifest import Manifest, ManifestError

KINDS = {
    "log": (".log", None),
    "index": (".index", IndexType.OFFSET),
    "timeindex": (".timeindex", IndexType.TIMESTAMP),
    "txnindex": (".txnindex", IndexType.TRANSACTION),
    "snapshot": (".snapshot", IndexType.PRODUCER_SNAPSHOT),
    "leader-epoch-checkpoint": ("leader-epoch-checkpoint", IndexType.LEADER_EPOCH),
}


class _Refused(Exception):
    """One line for the user."""


def _keyring(args: argparse.Namespace, configs: dict[str, str] | None) -> Keyring:
    """The keyring file's keys (--keyring, or the config's) and KMS keys (the config's encryption.kms.*, else
    boto3's defaults); without a keyring file a segment under a keyring key id is refused (`materialize`)."""
    from rsm.config.kms import KmsKeys

    path = getattr(args, "keyring", None) or (configs or {}).get("encryption.keyring.path")
    kms = KmsKeys.from_config(RsmConfig(configs)) if configs else KmsKeys()
    return Keyring(path or None, kms=kms)


def materialize(
    store: ObjectStore, bucket: str, manifest: Manifest, keyring: Keyring | None, into: Path
) -> Path:
    """The segment's files under Kafka's names in ``into``, decoded by the RSM's fetch path; the .log path."""
    from rsm.config.kms import is_kms_key
    from rsm.fetch.reader import SegmentReader, cipher_for

    if (
        manifest.encryption is not None
        and not is_kms_key(manifest.encryption.key_id)
        and (keyring is None or (keyring.path is None and not keyring.key_ids()))
    ):
        raise _Refused(
            f"{manifest.source} is encrypted (key id {manifest.encryption.key_id}): give --keyring FILE, "
            "or --config with rsm.config.encryption.keyring.path"
        )
    reader = SegmentReader(store, bucket, manifest, cipher_for(manifest, keyring))
    seg = manifest.segment
    base = f"{seg.start_offset:020d}"
    log_path = into / f"{base}.log"
    with log_path.open("wb") as out:
        for i in range(manifest.log.count):
            out.write(reader.chunk(i))
    for _kind, (suffix, index_type) in KINDS.items():
        if index_type is None or index_type not in manifest.indexes:
            continue
        name = suffix if suffix == "leader-epoch-checkpoint" else f"{base}{suffix}"
        if index_type is IndexType.PRODUCER_SNAPSHOT:
            name = f"{seg.end_offset + 1:020d}.snapshot"
        (into / name).write_bytes(reader.index(index_type))
    return log_path


def _dump(args: argparse.Namespace, segment_dir: Path, log_path: Path, kind: str, shown: str) -> int:

    suffix, _ = KINDS[kind]
    if kind == "log":
        target = log_path
    elif kind == "snapshot":
        found = sorted(segment_dir.glob("*.snapshot"))
        if not found:
            raise _Refused(f"{shown} has no producer snapshot")
        target = found[0]
    elif kind == "leader-epoch-checkpoint":
        target = segment_dir / suffix
    else:
        target = log_path.with_suffix(suffix)
    if not target.exists():
        raise _Refused(f"{shown} has no {suffix} (Kafka stored none for it)")
    return dump_files(args, [str(target)], shown={str(target): f"{shown} ({target.name})"})


def run_tiered(args: argparse.Namespace) -> int:
    """``--config --topic --partition --offset``: the segment serving that offset, from the store."""
    from rsm.api.metadata import to_uuid
    from rsm.catalog import TopicCatalog
    from rsm.catalog.segments import CatalogError

    missing = [f"--{n}" for n in ("config", "topic", "partition", "offset") if getattr(args, n) is None]
    try:
        if missing:
            raise _Refused(
                f"a tiered segment needs --config, --topic, --partition and --offset (missing {', '.join(missing)})"
            )
        configs = tool_configs(args.config)  # a key that is no setting is refused, naming the closest one
        config = RsmConfig(configs)
        store = ObjectStore.from_config(config, create=False)  # read-only: a missing root is refused
        store.require_bucket(str(config.get("bucket")))
        catalog = TopicCatalog(config, store)
        tid = to_uuid(args.topic_id) if args.topic_id else catalog.live_topic_id(args.topic)
        history = catalog.histories(args.topic, tid, [args.partition]).get(args.partition)
        slices = history.between(args.offset, args.offset) if history else []
        if not slices:
            have = (
                f"offsets {history.first_offset}..{history.next_offset - 1}"
                if history and history.slices
                else "nothing"
            )  # type: ignore[operator]
            raise _Refused(
                f"{args.topic}-{args.partition}: no tiered segment holds offset {args.offset} (the store has {have})"
            )
        seg = slices[0].segment
        keyring = _keyring(args, configs)
        with tempfile.TemporaryDirectory(prefix="rsm-dump-") as tmp:
            log_path = materialize(catalog.store, seg.bucket, seg.manifest, keyring, Path(tmp))
            # the object the dumped file came from: the .log, or the .indexes object an index is stored in
            stored = "log" if args.file_kind == "log" else "indexes"
            shown = catalog.store.describe(seg.bucket, seg.manifest.location[stored])
            return _dump(args, Path(tmp), log_path, args.file_kind, shown)
    except (
        _Refused,
        CatalogError,
        ConfigException,
        RemoteStorageException,
        ManifestError,
        ValueError,
    ) as exc:
        sys.stderr.write(f"rsm dump-log: {exc}\n")
        return 1


def run_tiered_objects(args: argparse.Namespace, files: list[str]) -> int:
    """Paths to stored objects in a file store: each segment dumped through its manifest."""
    status = 0
    try:
        configs = tool_configs(args.config) if args.config else None
    except ValueError as exc:
        sys.stderr.write(f"rsm dump-log: {exc}\n")
        return 1
    for name in files:
        try:
            if not is_tiered_object(name):
                raise _Refused(f"{name}: give stored segment objects or local files, not both")
            path = Path(name).resolve()
            if not path.exists():
                raise _Refused(f"{name}: No such file or directory")
            manifest_path = path.with_name(
                OBJECT_NAME.match(path.name).group(0).rsplit(".", 1)[0] + ".manifest"
            )  # type: ignore[union-attr]
            try:
                manifest = Manifest.from_bytes(manifest_path.read_bytes(), str(manifest_path))
            except FileNotFoundError:
                raise _Refused(
                    f"{name}: no manifest beside it ({manifest_path.name}): the copy never committed"
                ) from None
            key = manifest.location["log"]
            bucket = manifest.location["bucket"]
            log_object = manifest_path.with_name(Path(key).name)
            bucket_dir = str(log_object)[: -len(key)].rstrip("/")
            if not str(log_object).endswith("/" + key) or Path(bucket_dir).name != bucket:
                raise _Refused(f"{name}: not where its manifest says it is ({bucket}/{key})")
            store = ObjectStore.from_config(
                RsmConfig(
                    {
                        "storage.backend": "file",
                        "storage.file.root": str(Path(bucket_dir).parent),
                        "bucket": bucket,
                    }
                )
            )
            kind = {".log": "log", ".indexes": args.file_kind, ".manifest": args.file_kind}[path.suffix]
            with tempfile.TemporaryDirectory(prefix="rsm-dump-") as tmp:
                log_path = materialize(store, bucket, manifest, _keyring(args, configs), Path(tmp))
                status |= _dump(args, Path(tmp), log_path, kind, str(log_object))
        except (_Refused, ConfigException, RemoteStorageException, ManifestError, OSError) as exc:
            sys.stderr.write(f"rsm dump-log: {exc}\n")
            status = 1
    return status
