"""``rsm dump-log`` of a tiered segment: its objects read back through the manifest."""

from __future__ import annotations


def is_tiered_object(name: str) -> bool:
    return False
