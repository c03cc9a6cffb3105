"""The file store: a bucket is a directory under `storage.file.root`, and a write lands atomically.

Bytes go to a hidden temporary name in the destination directory (`rsm.store.writes.temp_name`) and are
renamed over the final name on commit: a rename within one directory is atomic on POSIX, so a reader sees
the whole object or none. A write killed before its rename leaves only its temporary file, which
`rsm.store.debris` finds by its name's shape.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import fsspec

from rsm.api.errors import ConfigException
from rsm.config.settings import RsmConfig
from rsm.store.writes import IOStats, temp_name

log = logging.getLogger(__name__)


def open_filesystem(config: RsmConfig, create: bool = True) -> tuple[Any, Path]:
    """The local filesystem and the store's root (created if missing unless ``create`` is false: the
    read-only tools refuse a root that does not exist rather than read an empty store; a file there is
    refused)."""
    root = config.file_root
    assert root is not None  # checked by RsmConfig
    root = root.expanduser().resolve()
    if not create and not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "does not exist"
        raise ConfigException(f"config storage.file.root {root} {what}")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the store should be, a read-only parent...
        what = "is a file, not a directory" if root.is_file() else f"cannot be created ({exc.strerror})"
        raise ConfigException(f"config storage.file.root {root} {what}") from None
    fs = fsspec.filesystem("file", auto_mkdir=True, skip_instance_cache=True)
    return fs, root


class FileWriter:
    """Write to a temporary name next to the destination, rename on commit."""

    def __init__(self, fs: Any, stats: IOStats, path: str) -> None:
        self._fs = fs
        self._stats = stats
        self._path = path
        directory, _, name = path.rpartition("/")
        self._tmp = f"{directory}/{temp_name(name)}"
        self._file = fs.open(self._tmp, "wb")
        self._size = 0

    def write(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self._size += len(data)

    def commit(self) -> None:
        try:
            self._file.close()
            self._fs.mv(self._tmp, self._path)
        except BaseException:
            self.abort()
            raise
        self._stats.wrote(self._size, 1)

    def abort(self) -> None:
        try:
            self._file.close()
        except Exception:  # noqa: BLE001 - the write already failed; the cleanup below matters more
            log.debug("closing %s after a failed write", self._tmp, exc_info=True)
        try:
            self._fs.rm_file(self._tmp)
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001
            log.warning("could not remove temporary file %s", self._tmp, exc_info=True)
