"""The catalog home's own directory and its two move pointers, as documents.

Why in the stored format: every document the store keeps beside the segments (overlays, location records,
encryption memory, journals) lives under `HOME_DIR` at the catalog home, and the pointers a catalog move
leaves there are read by every broker, reader and tool configured for either place. Reading them through a
store and refusing a moved home is `rsm.store.home`'s job; this module is their names and JSON:

    <new home>_rsm/catalog-moving.json  {"version": 1, "from": {"bucket", "prefix"}, "started_ms"}
    <old home>_rsm/catalog-moved.json   {"version": 1, "to": {"bucket", "prefix"}, "moved_ms"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rsm.stored.layout import Location

HOME_DIR = "_rsm/"
MOVED_POINTER = HOME_DIR + "catalog-moved.json"
MOVING_POINTER = HOME_DIR + "catalog-moving.json"
POINTER_VERSION = 1

__all__ = ["HOME_DIR", "MOVED_POINTER", "MOVING_POINTER", "POINTER_VERSION", "CatalogPointer"]


@dataclass(frozen=True)
class CatalogPointer:
    """A move pointer: the other home (`field`: `to` or `from`) and when (`stamp`: `moved_ms`,
    `started_ms`)."""

    location: Location
    at_ms: int

    def to_bytes(self, field: str, stamp: str) -> bytes:
        doc = {
            "version": POINTER_VERSION,
            field: {"bucket": self.location.bucket, "prefix": self.location.prefix},
            stamp: self.at_ms,
        }
        return json.dumps(doc, indent=2).encode() + b"\n"

    @classmethod
    def from_bytes(cls, raw: bytes, field: str, stamp: str) -> CatalogPointer:
        """Parse a stored pointer; ValueError, KeyError or TypeError when it is not a version 1 pointer."""
        doc = json.loads(raw)
        target = doc[field]
        location = Location(str(target["bucket"]), str(target["prefix"]))
        if doc.get("version") != POINTER_VERSION:
            raise ValueError(f"version {doc.get('version')!r}")
        return cls(location, int(doc.get(stamp, 0)))
