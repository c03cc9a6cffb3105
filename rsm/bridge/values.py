"""Kafka's value types as the bridge protocol carries them: JSON objects for segment metadata, segment data
paths, LogConfig and index types, and Kafka's text form of a Uuid (see PROTOCOL.md, "Operations").

Why a module of its own: framing (protocol.py) knows bytes and frames; this knows the RSM's types. The
protocol module re-exports these names, which is where clients have always found them.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from typing import Any

import orjson


def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_kafka(text: str, what: str = "uuid") -> uuid.UUID:
    """Parse Kafka's 22-char form (or the canonical 36-char UUID text)."""
    if not isinstance(text, str):
        raise ValueError(f"{what}: expected a string, got {type(text).__name__}")
    if len(text) == 22:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{what}: {text!r} is not Kafka base64: {exc}") from None
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is neither a Kafka Uuid nor a UUID") from None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: not base64: {exc}") from None


def encode_metadata(metadata: Any) -> dict[str, Any]:
    """RemoteLogSegmentMetadata -> JSON object (see PROTOCOL.md, "Segment metadata")."""
    seg_id = metadata.remote_log_segment_id
    tip = seg_id.topic_id_partition
    custom = metadata.custom_metadata
    out: dict[str, Any] = {
        "topic_id": uuid_to_kafka(_as_uuid(tip.topic_id)),
        "topic": tip.topic,
        "partition": tip.partition,
        "segment_id": uuid_to_kafka(_as_uuid(seg_id.id)),
        "start_offset": metadata.start_offset,
        "end_offset": metadata.end_offset,
        "max_timestamp_ms": metadata.max_timestamp_ms,
        "broker_id": metadata.broker_id,
        "event_timestamp_ms": metadata.event_timestamp_ms,
        "segment_size_in_bytes": metadata.segment_size_in_bytes,
        "segment_leader_epochs": [
            [int(e), int(o)] for e, o in sorted(metadata.segment_leader_epochs.items())
        ],
        "custom_metadata": _b64(custom.value) if custom is not None else None,
    }
    state = getattr(metadata, "state", None)
    if state is not None:
        out["state"] = getattr(state, "name", str(state))
    txn_empty = getattr(metadata, "txn_idx_empty", None)
    if txn_empty is not None:
        out["txn_idx_empty"] = bool(txn_empty)
    return out


def _as_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    return uuid_from_kafka(str(value))


def _require(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} has type {type(value).__name__}")
    return value


def decode_metadata(obj: Any) -> Any:
    """JSON object -> rsm.RemoteLogSegmentMetadata (raises ValueError naming the bad key)."""
    from rsm import (
        CustomMetadata,
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        RemoteLogSegmentState,
        TopicIdPartition,
    )

    where = "metadata"
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object")
    tip = TopicIdPartition(
        uuid_from_kafka(_require(obj, "topic_id", str, where), f"{where}.topic_id"),
        _require(obj, "topic", str, where),
        _require(obj, "partition", int, where),
    )
    seg_id = RemoteLogSegmentId(
        tip, uuid_from_kafka(_require(obj, "segment_id", str, where), f"{where}.segment_id")
    )
    epochs_raw = _require(obj, "segment_leader_epochs", list, where)
    epochs: dict[int, int] = {}
    for pair in epochs_raw:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, int) for x in pair)):
            raise ValueError(f"{where}.segment_leader_epochs: bad entry {pair!r}")
        epochs[pair[0]] = pair[1]
    custom_raw = obj.get("custom_metadata")
    custom = None if custom_raw is None else CustomMetadata(_unb64(custom_raw, f"{where}.custom_metadata"))
    kwargs: dict[str, Any] = {
        "remote_log_segment_id": seg_id,
        "start_offset": _require(obj, "start_offset", int, where),
        "end_offset": _require(obj, "end_offset", int, where),
        "max_timestamp_ms": _require(obj, "max_timestamp_ms", int, where),
        "broker_id": _require(obj, "broker_id", int, where),
        "event_timestamp_ms": _require(obj, "event_timestamp_ms", int, where),
        "segment_size_in_bytes": _require(obj, "segment_size_in_bytes", int, where),
        "segment_leader_epochs": epochs,
        "custom_metadata": custom,
    }
    if isinstance(obj.get("txn_idx_empty"), bool):
        kwargs["txn_idx_empty"] = obj["txn_idx_empty"]
    if obj.get("state") is not None:
        try:
            kwargs["state"] = RemoteLogSegmentState[obj["state"]]
        except (KeyError, TypeError):
            raise ValueError(f"{where}.state: unknown state {obj['state']!r}") from None
    return RemoteLogSegmentMetadata(**kwargs)


class MetadataDecoder:
    """``decode_metadata`` remembering its answers: Kafka fetches the same segments over and over, and
    decoding (two Kafka Uuids, base64, frozen dataclasses) is a tenth of the bridge's own work per fetch.

    The key is the object written back as compact JSON (one C call): equal objects decode to equal
    (immutable) metadata, and 1, 1.0 and true stay different keys, as they are not equally valid fields.
    Only successful decodes are remembered; a malformed object is decoded, and refused, every time.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._cache: dict[bytes, Any] = {}

    def decode(self, obj: Any) -> Any:
        try:
            key = orjson.dumps(obj)
        except TypeError:  # not from JSON (a caller's own object): no caching
            return decode_metadata(obj)
        hit = self._cache.get(key)
        if hit is None:
            hit = decode_metadata(obj)
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            self._cache[key] = hit
        return hit


def encode_segment_data(segment_data: Any) -> tuple[dict[str, Any], bytes]:
    """LogSegmentData -> (JSON object of paths, leader-epoch checkpoint bytes sent as the payload)."""
    txn = segment_data.transaction_index
    return (
        {
            "log_segment": str(segment_data.log_segment),
            "offset_index": str(segment_data.offset_index),
            "time_index": str(segment_data.time_index),
            "transaction_index": None if txn is None else str(txn),
            "producer_snapshot_index": str(segment_data.producer_snapshot_index),
        },
        bytes(segment_data.leader_epoch_index),
    )


def decode_segment_data(obj: Any, leader_epoch_index: bytes) -> Any:
    """JSON object of paths + payload -> rsm.LogSegmentData. Paths must be absolute."""
    from pathlib import Path

    from rsm import LogSegmentData

    where = "segment_data"
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object")

    def path(key: str, optional: bool = False) -> Path | None:
        if optional and obj.get(key) is None:
            return None
        p = Path(_require(obj, key, str, where))
        if not p.is_absolute():
            raise ValueError(f"{where}.{key}: {str(p)!r} is not an absolute path")
        return p

    return LogSegmentData(
        log_segment=path("log_segment"),
        offset_index=path("offset_index"),
        time_index=path("time_index"),
        transaction_index=path("transaction_index", optional=True),
        producer_snapshot_index=path("producer_snapshot_index"),
        leader_epoch_index=bytes(leader_epoch_index),
    )


def encode_log_config(log_config: Any) -> dict[str, str] | None:
    """LogConfig (or a plain mapping) -> JSON object of string values, or None."""
    if log_config is None:
        return None
    mapping = log_config if isinstance(log_config, Mapping) else _log_config_mapping(log_config)
    return {str(k): str(v) for k, v in mapping.items() if v is not None}


def _log_config_mapping(log_config: Any) -> Mapping[str, Any]:
    for attr in ("configs", "mapping", "_mapping", "values"):
        value = getattr(log_config, attr, None)
        if isinstance(value, Mapping):
            return value
        if callable(value):
            try:
                result = value()
            except TypeError:
                continue
            if isinstance(result, Mapping):
                return result
    try:
        return dict(log_config)
    except (TypeError, ValueError):
        raise TypeError(f"cannot read the entries of {type(log_config).__name__}") from None


def decode_log_config(obj: Any) -> Any:
    """JSON object -> rsm.LogConfig, or None when the client sent none."""
    if obj is None:
        return None
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        raise ValueError("log_config: expected an object of string values")
    from rsm import LogConfig

    return LogConfig(obj)


def decode_index_type(name: Any) -> Any:
    from rsm import IndexType

    if not isinstance(name, str):
        raise ValueError("index_type: expected a string")
    try:
        return IndexType[name]
    except KeyError:
        raise ValueError(f"index_type: unknown index type {name!r}") from None
