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

Every way the destination shows nothing or the whole object. The caller then checks its size. Each way is
its store's `copy_object` (`ObjectStore`, `LocalStore`, `S3Store`).
"""

from __future__ import annotations

from collections.abc import Callable

from rsm.store.objects import ObjectStore

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
    return store.copy_object(
        src_bucket, src_key, dst_bucket, dst_key, part_size=part_size, on_bytes=on_bytes, size=size, link=link
    )
