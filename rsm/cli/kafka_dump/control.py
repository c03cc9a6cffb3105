"""Control records' text: transaction markers and KRaft's control records, as Kafka prints them."""

from __future__ import annotations

import struct
from collections.abc import Callable

from rsm.cli.kafka_dump.common import DumpError

# ------------------------------------------------------------------------------------ control records


class _Reader:
    """Kafka's protocol readers for the small control-record messages."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self.pos += size

    def compact_array(self, item: Callable[[], dict]) -> list[dict]:  # type: ignore[type-arg]
        n = self.uvarint() - 1
        return [item() for _ in range(max(n, 0))]


def _json(obj: object) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _uuid_text(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def control_record_text(key: bytes | None, value: bytes | None) -> bytes:
    """What DumpLogSegments.printControlRecord appends to a control record's line."""
    if key is None or len(key) < 4:
        raise DumpError(
            f"Invalid value size found for end control record key. Must have at least 4 bytes, but found only {0 if key is None else len(key)}"
        )
    _version, type_id = struct.unpack_from(">hh", key)
    names = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
             5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}  # fmt: skip
    name = names.get(type_id)
    v = value or b""
    if name in ("ABORT", "COMMIT"):
        if len(v) < 6:
            raise DumpError(
                f"Invalid value size found for end transaction marker. Must have at least 6 bytes, but found only {len(v)}"
            )
        _ver, epoch = struct.unpack_from(">hi", v)
        return b" endTxnMarker: %s coordinatorEpoch: %d" % (name.encode(), epoch)
    if name is None:
        return b" controlType: UNKNOWN(%d)" % type_id
    r = _Reader(v)
    version = r.take(">h")
    if name == "LEADER_CHANGE":
        leader = r.take(">i")
        voter = lambda: _voter(r)  # noqa: E731
        doc = {"version": version, "leaderId": leader, "voters": r.compact_array(voter),
               "grantingVoters": r.compact_array(voter)}  # fmt: skip
        return b" LeaderChange: " + _json(doc).encode()
    if name == "SNAPSHOT_HEADER":
        return (
            b" SnapshotHeader "
            + _json({"version": version, "lastContainedLogTimestamp": r.take(">q")}).encode()
        )
    if name == "SNAPSHOT_FOOTER":
        return b" SnapshotFooter " + _json({"version": version}).encode()
    if name == "KRAFT_VERSION":
        return b" KRaftVersion " + _json({"version": version, "kRaftVersion": r.take(">h")}).encode()
    return (
        b" KRaftVoters "
        + _json({"version": version, "voters": r.compact_array(lambda: _voters_entry(r))}).encode()
    )


def _voter(r: _Reader) -> dict:  # type: ignore[type-arg]
    voter = {"voterId": r.take(">i")}
    r.tagged_fields()
    return voter


def _voters_entry(r: _Reader) -> dict:  # type: ignore[type-arg]
    voter_id = r.take(">i")
    directory = _uuid_text(r.data[r.pos : r.pos + 16])
    r.pos += 16

    def endpoint() -> dict:  # type: ignore[type-arg]
        e = {"name": r.compact_string(), "host": r.compact_string(), "port": r.take(">H")}
        r.tagged_fields()
        return e

    endpoints = r.compact_array(endpoint)
    feature = {"minSupportedVersion": r.take(">h"), "maxSupportedVersion": r.take(">h")}
    r.tagged_fields()
    r.tagged_fields()
    return {
        "voterId": voter_id,
        "voterDirectoryId": directory,
        "endpoints": endpoints,
        "kRaftVersionFeature": feature,
    }
