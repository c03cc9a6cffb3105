"""Copying a stored object to another key of the same store, with bounded memory and no partial results.

- S3: a server-side copy: `CopyObject` for objects up to `part_size`, else a multipart upload whose parts
  are `UploadPartCopy` ranges of `part_size` (each request stays short enough for the store's request
  deadline, and no byte passes through this process). Completed only when every part is copied, aborted on
  any failure (`rsm migrate gc` aborts what a killed process left).
- File store: a hard link when source and destination are on one file system (`link`, the default): a new
  name for the same bytes, made in no time whatever the size, as `mv` does. Stored objects are never
  changed in place (every write goes to a temporary name renamed over the final one, every delete removes
  a name), so two names of one file behave as two copies. Otherwise `shutil.copyfile` (the kernel's copy:
  `sendfile` / `copy_file_range`, as `cp` does). Either goes to a temporary name `.<name>.tmp-<12 hex>`
  beside the destination, renamed over it when complete, the naming the store's own writer uses, so a
  killed copy leaves only a temporary file `gc` recognises.

- GCS and Azure Blob: streamed through this process, one part of the store's upload size at a time, into
  the store's own writer (a resumable upload, staged blocks): nothing shows until it commits, and a killed
  copy leaves what any killed write leaves there (`rsm.store.gcs`, `rsm.store.azure`).

Every way the destination shows nothing or the whole object. The caller then checks its size.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable

from rsm.config.settings import Backend
from rsm.store.objects import ObjectNotFound, ObjectStore

DEFAULT_COPY_PART_SIZE = 256 << 20


def copy_object(
    store: ObjectStore,
    src_bucket: str,
    src_key: str,
    dst_bucket: str,
    dst_key: str,
    *,
    part_size: int = DEFAULT_COPY_PART_SIZE,
    on_bytes: Callable[[int], None] | None = None,
    size: int | None = None,
    link: bool = True,
) -> int:
    """Copy one object within the store (see the module docstring); returns its size.

    ``size``: the object's size when known (the manifest records it), which saves S3 a HEAD request.
    ``link``: on the file store, a hard link where the file system allows one.
    """
    if store.backend is Backend.FILE:
        return _copy_file(store, src_bucket, src_key, dst_bucket, dst_key, on_bytes, link)
    if store.backend is not Backend.S3:
        return _copy_streamed(store, src_bucket, src_key, dst_bucket, dst_key, on_bytes, size)
    return _copy_s3(store, src_bucket, src_key, dst_bucket, dst_key, part_size, on_bytes, size)


def _copy_file(
    store: ObjectStore, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str,
    on_bytes: Callable[[int], None] | None, link: bool,
) -> int:  # fmt: skip
    src = store.path(src_bucket, src_key)
    dst = store.path(dst_bucket, dst_key)
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
            raise ObjectNotFound(store.describe(src_bucket, src_key)) from None
        raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    size = os.path.getsize(dst)
    store.stats.read(size)
    store.stats.wrote(size, 1)
    if on_bytes is not None:
        on_bytes(size)
    return size


def _copy_streamed(
    store: ObjectStore, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str,
    on_bytes: Callable[[int], None] | None, size: int | None,
) -> int:  # fmt: skip
    size = store.size(src_bucket, src_key) if size is None else size
    writer = store.open_writer(dst_bucket, dst_key)
    try:
        for start in range(0, size, store.part_size):
            end = min(start + store.part_size, size)
            writer.write(store.get_range(src_bucket, src_key, start, end))
            if on_bytes is not None:
                on_bytes(end - start)
    except BaseException:
        writer.abort()
        raise
    writer.commit()
    return size


def _copy_s3(
    store: ObjectStore, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, part_size: int,
    on_bytes: Callable[[int], None] | None, size: int | None,
) -> int:  # fmt: skip
    size = store.size(src_bucket, src_key) if size is None else size
    source = {"Bucket": src_bucket, "Key": src_key}

    def call(method: str, **kwargs: object) -> dict[str, object]:
        return store._remote(  # noqa: SLF001 - the store's deadline wrapper around one S3 request
            dst_bucket, dst_key, store.fs.call_s3, method, Bucket=dst_bucket, Key=dst_key, **kwargs
        )

    if size <= part_size:
        call("copy_object", CopySource=source)
        if on_bytes is not None:
            on_bytes(size)
    else:
        upload_id = str(call("create_multipart_upload")["UploadId"])
        parts = []
        try:
            for number, start in enumerate(range(0, size, part_size), 1):
                end = min(start + part_size, size) - 1
                out = call(
                    "upload_part_copy", UploadId=upload_id, PartNumber=number, CopySource=source,
                    CopySourceRange=f"bytes={start}-{end}",
                )  # fmt: skip
                etag = out["CopyPartResult"]["ETag"]  # type: ignore[index]
                parts.append({"PartNumber": number, "ETag": etag})
                if on_bytes is not None:
                    on_bytes(end + 1 - start)
            call("complete_multipart_upload", UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException:
            with contextlib.suppress(Exception):
                call("abort_multipart_upload", UploadId=upload_id)
            raise
    store.fs.invalidate_cache(f"{dst_bucket}/{dst_key}")
    store.stats.wrote(size, 1)
    return size
