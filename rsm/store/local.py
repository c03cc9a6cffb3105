"""The file store: a bucket is a directory under `storage.file.root`, and a write lands atomically.

Bytes go to a hidden temporary name in the destination directory (`rsm.store.writes.temp_name`) and are
renamed over the final name on commit: a rename within one directory is atomic on POSIX, so a reader sees
the whole object or none. A write killed before its rename leaves only its temporary file, which
`rsm.store.debris` finds by its name's shape.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import fsspec

from rsm.api.errors import ConfigException, InvalidArgumentException
from rsm.config.settings import Backend, RsmConfig
from rsm.store.objects import ObjectNotFound, ObjectStore, register_store
from rsm.store.writes import IOStats, ObjectWriter, UnfinishedWrite, temp_name, temp_target
from segment_format.buffers import pread_into

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


@register_store
class LocalStore(ObjectStore):
    """The file store: a bucket is a directory under `storage.file.root`, a key a path below it (resolved,
    symlinks followed, inside `<root>/<bucket>/`); writes go to a temporary name renamed on commit."""

    backend = Backend.FILE

    def __init__(
        self,
        fs: Any,
        backend: Backend | None = None,
        root: Path | None = None,
        part_size: int = 8 << 20,
        request_timeout: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(fs, backend, root, part_size, None, attempts)  # local files: no network deadline

    @classmethod
    def identity(cls, config: RsmConfig) -> str:
        return str(config.file_root.resolve() if config.file_root else "")

    @classmethod
    def open(cls, config: RsmConfig, *, create: bool = True) -> ObjectStore:
        fs, root = open_filesystem(config, create)
        store = cls(fs, Backend.FILE, root, int(config.get("storage.s3.multipart.part.size")))  # type: ignore[arg-type]
        store.where = str(root)
        return store

    def network_wait(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()  # a local read lends no permit: it does not wait on a network

    def bucket_exists(self, bucket: str) -> bool | None:
        """Whether the bucket's directory is there. A store opened to write (`creates`: the RSM, a tool that
        writes) makes it with its first write, as a broker's first copy into a new store does; one opened
        read-only (`ObjectStore.from_config(create=False)`: readers and inspecting tools) is told it is
        missing, as on a cloud, rather than finding an empty store."""
        self._directory(bucket, "")  # checks the name
        assert self.root is not None
        return self.creates or (self.root / bucket).is_dir()

    def access_problem(self, bucket: str, directory: str) -> str | None:
        """The bucket's directory must exist, and every directory on the way to `directory` be readable: a
        listing skips one it may not read without a word."""
        assert self.root is not None
        path = self.root / bucket
        if not path.is_dir():
            what = "is not a directory" if path.exists() else "does not exist"
            return f"bucket {bucket!r} {what} (no directory {path})"
        for part in [p for p in directory.split("/") if p]:
            if not os.access(path, os.R_OK | os.X_OK):
                return f"permission denied on {path}"
            path = path / part
            if not path.exists():
                return None
        if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
            return f"permission denied on {path}"
        return None

    def _located(self, bucket: str, key: str) -> str:
        base = f"{self.root}/{bucket}"
        path = f"{base}/{key}" if key else base
        real = os.path.realpath(path)
        if real != base and not real.startswith(base + "/"):
            raise InvalidArgumentException(
                f"refusing object {self.describe(bucket, key)}: its path resolves outside the store's "
                f"directory of bucket {bucket} (through a symlink)"
            )
        return path

    def _writer(self, bucket: str, key: str) -> ObjectWriter:
        return FileWriter(self.fs, self.stats, self.path(bucket, key))

    def get_range_into(
        self, bucket: str, key: str, start: int, out: memoryview, *, checksum: bool = False
    ) -> int | None:
        """Read straight into ``out``, checksummed as it is read, in one call that releases the GIL once."""
        try:
            got, crc = pread_into(self.path(bucket, key), start, out, checksum=checksum)
        except FileNotFoundError:
            raise ObjectNotFound(self.describe(bucket, key)) from None
        self.stats.read(got)
        if got != len(out):
            raise OSError(f"short read of {self.describe(bucket, key)}: {got} of {len(out)} bytes")
        return crc

    def copy_object(
        self,
        src_bucket: str,
        src_key: str,
        dst_bucket: str,
        dst_key: str,
        *,
        part_size: int,
        on_bytes: Callable[[int], None] | None = None,
        size: int | None = None,
        link: bool = True,
    ) -> int:
        """A hard link when ``link`` and one file system allows it (a new name for the same bytes: stored
        objects are never changed in place), else the kernel's copy; either to a temporary name renamed over
        the destination, so a killed copy leaves only a temporary file `gc` recognises."""
        src = self.path(src_bucket, src_key)
        dst = self.path(dst_bucket, dst_key)
        directory, _, name = dst.rpartition("/")
        os.makedirs(directory, exist_ok=True)
        tmp = f"{directory}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            linked = False
            if link:
                try:
                    os.link(src, tmp)
                    linked = True
                except FileNotFoundError:
                    raise
                except OSError:  # another file system, or one without hard links: copy
                    pass
            if not linked:
                shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            if linked and os.path.lexists(tmp):
                # rename() between two links of one file does nothing (POSIX): dst was already this file
                os.unlink(tmp)
        except FileNotFoundError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if not os.path.exists(src):
                raise ObjectNotFound(self.describe(src_bucket, src_key)) from None
            raise
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        size = os.path.getsize(dst)
        self.stats.read(size)
        self.stats.wrote(size, 1)
        if on_bytes is not None:
            on_bytes(size)
        return size

    def _leftovers(self, bucket: str, keys: list[str]) -> list[UnfinishedWrite]:
        """The temporary files of unfinished writes of these keys, beside them."""
        by_dir: dict[str, set[str]] = {}
        for key in keys:
            directory, _, name = key.rpartition("/")
            by_dir.setdefault(directory, set()).add(name)
        found: list[UnfinishedWrite] = []
        for directory, names in sorted(by_dir.items()):
            try:  # names only: a partition's directory may hold thousands of objects, not worth a stat each
                entries = self.fs.ls(self._directory(bucket, directory), detail=False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                path = str(entry)
                target = temp_target(path.rpartition("/")[2])
                if target not in names:
                    continue
                try:
                    info = self.fs.info(path)
                except FileNotFoundError:
                    continue  # removed meanwhile
                if info.get("type") == "file":
                    key = f"{directory}/{target}" if directory else str(target)
                    found.append(UnfinishedWrite(bucket, key, temp_path=path, started=info.get("mtime")))
        return sorted(found, key=lambda w: (w.key, str(w.temp_path)))

    def discard(self, write: UnfinishedWrite) -> bool:
        if write.temp_path is None:
            return super().discard(write)
        directory, _, filename = write.temp_path.rpartition("/")
        key_dir = write.key.rpartition("/")[0]
        if directory != self._directory(write.bucket, key_dir) or temp_target(filename) is None:
            raise InvalidArgumentException(
                f"refusing to remove {write.temp_path}: not a temporary file of {self.describe(write.bucket, write.key)}"
            )
        try:
            self.fs.rm_file(write.temp_path)
        except FileNotFoundError:
            return False
        return True
