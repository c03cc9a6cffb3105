"""The RSM's operations as the bridge answers them (PROTOCOL.md): a request's metadata, segment data and
LogConfig decoded from its frame, the RemoteStorageManager called, its answer encoded.

Apart from the server, which owns connections, frames and their dispatch: this is all the bridge knows of
the RSM's contract, so a change to the contract changes this module and `protocol.py` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rsm.bridge import protocol
from rsm.bridge.protocol import Op
from rsm.config.properties import mask_configs


class Request(Protocol):
    """The part of a request an operation reads."""

    header: dict[str, Any]
    payload: bytes | bytearray | memoryview


class RsmOperations:
    """Copy, delete and the configuration's description as requests; fetches as streams (`open_stream`)."""

    def __init__(self, rsm: Any, configs: Mapping[str, str], frame_bytes: int) -> None:
        self.rsm = rsm
        self.configs = configs
        self.frame_bytes = frame_bytes
        self._metadata = protocol.MetadataDecoder()  # a segment's metadata decoded once, not per fetch

    def configure_info(self, ctx: Request) -> dict[str, Any]:
        return {
            "rsm_class": f"{type(self.rsm).__module__}.{type(self.rsm).__qualname__}",
            "configs": mask_configs(self.configs),
            "data_frame_bytes": self.frame_bytes,
        }

    def copy(self, ctx: Request) -> dict[str, Any]:
        h = ctx.header
        metadata = protocol.decode_metadata(h.get("metadata"))
        segment_data = protocol.decode_segment_data(h.get("segment_data"), bytes(ctx.payload))
        log_config = protocol.decode_log_config(h.get("log_config"))
        custom = self.rsm.copy_log_segment_data(metadata, segment_data, log_config)
        value = None if custom is None else custom.value
        return {"custom_metadata": None if value is None else protocol._b64(bytes(value))}

    def delete(self, ctx: Request) -> dict[str, Any]:
        h = ctx.header
        metadata = protocol.decode_metadata(h.get("metadata"))
        self.rsm.delete_log_segment_data(metadata, protocol.decode_log_config(h.get("log_config")))
        return {}

    def open_stream(self, header: dict[str, Any]) -> Any:
        op = header.get("op")
        metadata = self._metadata.decode(header.get("metadata"))
        log_config = protocol.decode_log_config(header.get("log_config"))
        if op == Op.FETCH_INDEX:
            return self.rsm.fetch_index(
                metadata, protocol.decode_index_type(header.get("index_type")), log_config
            )
        start = header.get("start_position")
        end = header.get("end_position")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise ValueError(f"start_position: expected a non-negative integer, got {start!r}")
        if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < start):
            raise ValueError(f"end_position: expected an integer >= start_position {start}, got {end!r}")
        return self.rsm.fetch_log_segment(metadata, start, end, log_config)


def validation_stats(rsm: object) -> dict[str, Any] | None:
    """The RSM's record validation counters, when it keeps them (test doubles do not)."""
    stats = getattr(rsm, "validation_stats", None)
    return stats() if callable(stats) else None


def store_bytes_read(rsm: Any) -> int | None:
    """Bytes the RSM has read from its object store (None if it does not count): the benchmark compares
    storage reads per byte delivered through the bridge and in process."""
    stats = getattr(getattr(rsm, "store", None), "stats", None)
    try:
        return int(stats.snapshot()["bytes_read"]) if stats is not None else None
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None
