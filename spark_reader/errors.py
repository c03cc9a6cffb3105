"""Errors a user of the source can act on: each one line naming the topic, partition or object at fault."""

from __future__ import annotations


class ReaderError(Exception):
    """The source cannot answer the query (unknown topic, bad option, unreadable or corrupt object)."""


class DataLossError(ReaderError):
    """Offsets the query asked for are no longer in the store (failOnDataLoss=true)."""
