"""Listing a bucket's keys and objects: what `ObjectStore` gives alike over fsspec, and what backends override.

Apart from `rsm.store.objects` because listing is a job of its own with its own costs: a whole prefix
(`list`, `list_objects`: fsspec's `find`, one deadline for all its pages), a page from a key on
(`list_from`: S3's StartAfter, so a planner's requests do not grow with the history before its range), and
the directories right under a prefix (`list_dirs`: one delimited listing). Each counts its requests in the
store's `IOStats`. `S3Store` overrides `_pages`, `list_from` and `list_dirs` with ListObjectsV2's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from rsm.store.writes import TEMP_MARK, IOStats

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size in bytes and last modification (seconds since the epoch)."""

    key: str
    size: int
    modified: float


def modified_time(info: dict[str, Any]) -> float:
    """The modification time in a listing entry: `mtime` (file store) or `LastModified` (S3)."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if value is None:
        return 0.0
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value)


class ObjectListings:
    """The listings of `ObjectStore` (its base class): they use its filesystem, its checked directory names
    (`_directory`), its bounded requests (`_remote`) and its `stats`."""

    fs: Any
    stats: IOStats
    _directory: Callable[[str, str], str]
    _remote: Callable[..., Any]

    def list(self, bucket: str, prefix: str = "", *, include_temporary: bool = False) -> list[str]:
        """Keys under a prefix in a bucket, sorted; temporary files of unfinished writes are left out
        unless ``include_temporary`` (`rsm migrate gc` looks for the ones a killed process left)."""
        base = self._directory(bucket, "").rstrip("/") + "/"
        directory = prefix.rpartition("/")[0]
        try:
            found = self._remote(bucket, prefix, self.fs.find, self._directory(bucket, directory))
        except FileNotFoundError:
            self.stats.listed()
            return []
        self.stats.listed(self._pages(len(found)))
        keys = []
        for path in found:
            path = str(path)
            key = path[len(base) :] if path.startswith(base) else path.split("/", 1)[1]
            if key.startswith(prefix) and (include_temporary or TEMP_MARK not in key.rsplit("/", 1)[-1]):
                keys.append(key)
        return sorted(keys)

    def list_objects(
        self, bucket: str, prefix: str = "", *, include_temporary: bool = False
    ) -> list[ObjectInfo]:
        """`list` with each object's size and modification time (one listing, no request per object)."""
        base = self._directory(bucket, "").rstrip("/") + "/"
        directory = prefix.rpartition("/")[0]
        try:
            found = self._remote(
                bucket, prefix, self.fs.find, self._directory(bucket, directory), detail=True
            )
        except FileNotFoundError:
            self.stats.listed()
            return []
        self.stats.listed(self._pages(len(found)))
        out = []
        for path, info in dict(found).items():
            path = str(path)
            key = path[len(base) :] if path.startswith(base) else path.split("/", 1)[1]
            if not key.startswith(prefix) or info.get("type") == "directory":
                continue
            if include_temporary or ".tmp-" not in key.rsplit("/", 1)[-1]:
                out.append(ObjectInfo(key, int(info.get("size") or 0), modified_time(info)))
        return sorted(out, key=lambda o: o.key)

    def _pages(self, listed: int) -> int:
        """The requests a listing of `listed` entries took, as far as the store can tell (one; `S3Store`
        counts its pages of 1,000 keys, which s3fs's `find` makes unseen)."""
        return 1

    def list_from(
        self,
        bucket: str,
        prefix: str,
        *,
        start_after: str = "",
        limit: int | None = None,
        include_temporary: bool = False,
    ) -> list[ObjectInfo]:
        """Objects under `prefix` whose keys sort after `start_after`, in key order, at most `limit`.

        Why beside `list_objects`: a planner that knows where its range starts asks S3 for the keys from
        there on (ListObjectsV2's StartAfter, 1,000 keys a page, stopping at `limit`), so its requests do
        not grow with the history before it; each page is one request within the deadline (a listing of
        a whole prefix through `list_objects` is one deadline for all its pages). Temporary files of
        unfinished writes are left out unless ``include_temporary``. On the file store the directory is
        listed and filtered (no request is saved there, and none is paid).
        """
        self._directory(bucket, prefix.rpartition("/")[0])  # checks the names
        found = [
            o
            for o in self.list_objects(bucket, prefix, include_temporary=include_temporary)
            if o.key > start_after
        ]
        return found if limit is None else found[:limit]

    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        """The names of the "directories" right under `prefix` (a prefix ending in '/'), sorted: one
        delimited listing on S3 (a page per 1,000 names), however many objects lie below them."""
        self._directory(bucket, prefix.rstrip("/"))  # checks the names
        self.stats.listed()
        try:
            entries = self.fs.ls(self._directory(bucket, prefix.rstrip("/")), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            str(e["name"]).rstrip("/").rpartition("/")[2] for e in entries if e.get("type") == "directory"
        )
