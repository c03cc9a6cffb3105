"""A copy that waits to be killed: `python debris_child.py JOB`, run by tests/store/test_debris.py.

JOB is a pickle of (configs, segment metadata, segment data, pause_at). The child configures a
RemoteStorageManager on a real store (the file store, moto S3 through s3fs, fake-gcs-server or Azurite) and
copies the segment; right after the `n`-th store operation of kind `op` has completed (`pause_at = (op, n)`), it prints
`paused <op> <n>` and waits, so the test can kill it with SIGKILL at a known point of the copy. Nothing in
the store is mocked: the operations are counted on the way through, as test_rsm_failures.FailingFS does.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rsm import RemoteStorageManager
from rsm.config.settings import Backend, RsmConfig
from rsm.store.objects import ObjectStore

S3_WRITES = ("create_multipart_upload", "upload_part", "complete_multipart_upload", "put_object")
# GCS and Azure writes: the coroutine functions their writers hand the store's request wrapper
CLOUD_WRITES = ("_initiate", "_put_chunk", "simple_upload", "stage_block", "commit_block_list", "upload_blob")


class PausingFS:
    """A real fsspec filesystem whose write-side operations are counted; the chosen one pauses after it."""

    def __init__(self, fs: Any, op: str, n: int) -> None:
        self._fs = fs
        self._op, self._n = op, n
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def done(self, op: str) -> None:
        with self._lock:
            self._counts[op] = count = self._counts.get(op, 0) + 1
        if op == self._op and count == self._n:
            print(f"paused {op} {count}", flush=True)
            while True:  # until SIGKILL
                time.sleep(60)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        f = self._fs.open(path, mode, **kwargs)
        if "w" not in mode:
            return f
        self.done("open")
        return _PausingFile(self, f)

    def mv(self, src: str, dst: str, **kwargs: Any) -> Any:
        out = self._fs.mv(src, dst, **kwargs)
        self.done("mv")
        return out

    def call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        out = self._fs.call_s3(method, *args, **kwargs)
        if method in S3_WRITES:
            self.done(method)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class _PausingFile:
    def __init__(self, owner: PausingFS, f: Any) -> None:
        self._owner, self._f = owner, f

    def write(self, data: Any) -> int:
        n = self._f.write(data)
        self._owner.done("write")
        return n

    def close(self) -> None:
        self._f.close()
        self._owner.done("close")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def main(job: Path) -> int:
    configs, metadata, data, (op, n) = pickle.loads(job.read_bytes())
    store = ObjectStore.from_config(RsmConfig(configs))
    if store.backend in (Backend.GCS, Backend.AZURE):
        counter, remote = PausingFS(None, op, n), store._remote

        def counted(bucket: str, key: str, call: Any, *args: Any, **kwargs: Any) -> Any:
            out = remote(bucket, key, call, *args, **kwargs)
            name = getattr(args[0], "__name__", "") if args else ""
            if name in CLOUD_WRITES:
                counter.done(name)
            return out

        store._remote = counted  # type: ignore[method-assign]
    else:
        store.fs = PausingFS(store.fs, op, n)
    rsm = RemoteStorageManager(store=store)
    rsm.configure(configs)
    rsm.copy_log_segment_data(metadata, data)
    print("copied without pausing", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
