"""Azure Blob Storage through adlfs: the filesystem the store speaks to, its deadlines, and the writer.

A bucket is a container. Credentials: `storage.azure.account.key` (a shared key) or, unset, the SDK's
`DefaultAzureCredential` chain (environment, workload identity, managed identity, the Azure CLI); the
account key is registered with `rsm.config.redact` and never shown. `storage.azure.endpoint.url` points at
an emulator (Azurite: `http://127.0.0.1:10000/<account>`) or a sovereign cloud.

Deadlines mean what S3's do (`rsm.store.deadlines`): the SDK's connection and read timeouts per attempt,
`storage.azure.retry.max.attempts` attempts with a short linear backoff (the SDK's default is 10 retries
of 15 s and up), and the store's bound on one request.

Writes: an object smaller than one block is a single Put Blob; a larger one goes up as staged blocks,
committed by one Put Block List on commit: Azure shows nothing until then. A write that stops before its
commit (an abort, `kill -9`) leaves uncommitted blocks, which Azure lists as an uncommitted blob and
discards after a week; `uncommitted_blobs` finds them and `discard_uncommitted` removes them (a Put Blob
of nothing, only if no blob is there, discards the blocks; the empty blob is then deleted; Azurite, which
counts staged blocks as a blob, has the blob deleted as it is).
"""

from __future__ import annotations

import base64
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from rsm.api.errors import ConfigException
from rsm.config.redact import (
    endpoint_without_credentials,
    install_log_redaction,
    redact_url,
    register_secrets,
)
from rsm.config.settings import Backend, RsmConfig
from rsm.store.deadlines import Deadlines
from rsm.store.objects import ObjectStore, endpoint_of, register_store
from rsm.store.writes import IOStats, ObjectWriter, UnfinishedWrite

log = logging.getLogger(__name__)

UNCOMMITTED = "uncommitted-blocks"  # an UnfinishedWrite's upload_id on Azure: a blob's staged blocks


def _filesystem_class() -> type:
    """adlfs's filesystem with a service client of the store's making (imported here: other backends must
    not pay for the Azure SDK)."""
    from adlfs import AzureBlobFileSystem

    class _RsmAzureBlobFileSystem(AzureBlobFileSystem):  # type: ignore[misc]
        """adlfs speaking through a client built with the store's endpoint, credential and deadlines."""

        def __init__(self, client_kwargs: dict[str, Any], **kwargs: Any) -> None:
            self._rsm_client_kwargs = client_kwargs
            super().__init__(**kwargs)

        def do_connect(self) -> None:
            from azure.storage.blob.aio import BlobServiceClient

            self.service_client = BlobServiceClient(**self._rsm_client_kwargs)

    return _RsmAzureBlobFileSystem


def account_url(config: RsmConfig) -> str:
    endpoint = config.get("storage.azure.endpoint.url")
    if endpoint:
        return str(endpoint).rstrip("/")
    return f"https://{config.get('storage.azure.account.name')}.blob.core.windows.net"


def open_filesystem(config: RsmConfig) -> tuple[Any, float, int]:
    """The Azure Blob filesystem for the configuration, the deadline of one request (seconds, retries
    included) and the attempts of a request."""
    from azure.storage.blob.aio import LinearRetry

    install_log_redaction()  # the SDK's DEBUG log shows request headers and URLs
    http_log = logging.getLogger("azure.core.pipeline.policies.http_logging_policy")
    if (
        http_log.level == logging.NOTSET
    ):  # it logs every request's headers at INFO: a broker's log is no place
        http_log.setLevel(logging.WARNING)
    deadlines = Deadlines.of(config, "azure")
    account = config.get("storage.azure.account.name")
    key = config.get("storage.azure.account.key")
    register_secrets(str(key) if key else None)
    url = endpoint_without_credentials(
        account_url(config),
        "storage.azure.endpoint.url",
        "Azure requests are signed with storage.azure.account.key or the SDK's chain",
        log,
    )
    if not account and not config.get("storage.azure.endpoint.url"):
        raise ConfigException(
            "config storage.azure.account.name (or storage.azure.endpoint.url) is required when "
            "storage.backend=azure"
        )
    if key:
        if not account:
            raise ConfigException("config storage.azure.account.key needs storage.azure.account.name")
        credential: Any = {"account_name": str(account), "account_key": str(key)}
    else:
        from azure.identity.aio import DefaultAzureCredential

        credential = DefaultAzureCredential()
    client_kwargs = {
        "account_url": url,
        "credential": credential,
        "connection_timeout": deadlines.connect,
        "read_timeout": deadlines.read,
        "retry_policy": LinearRetry(backoff=0.2, random_jitter_range=0.1, retry_total=deadlines.attempts - 1),
    }
    fs = _filesystem_class()(
        client_kwargs,
        account_name=str(account) if account else None,
        anon=True,  # no credential of adlfs's own: the client above has the store's
        skip_instance_cache=True,
        use_listings_cache=False,
        assume_container_exists=True,
    )
    return fs, deadlines.request, deadlines.attempts


def where(config: RsmConfig) -> str:
    """The endpoint as messages name it."""
    return redact_url(account_url(config))


def run(fs: Any) -> Callable[..., Any]:
    """Call a coroutine function on the filesystem's loop (with `timeout=`), as `ObjectStore._remote` wants."""
    from fsspec.asyn import sync

    return functools.partial(sync, fs.loop)


def body_errors() -> tuple[type[BaseException], ...]:
    """What reading a response body raises when the connection fails after the headers, which the SDK's
    retry policy does not cover (it retries until a response arrives): a body cut short or reset."""
    from aiohttp import ClientPayloadError
    from azure.core.exceptions import IncompleteReadError

    return (IncompleteReadError, ClientPayloadError)


def not_found_errors() -> tuple[type[BaseException], ...]:
    """What the SDK raises for a missing blob or container where fsspec's callers expect FileNotFoundError
    (adlfs translates some calls, not all: a missing container surfaced raw, naming no setting)."""
    from azure.core.exceptions import ResourceNotFoundError

    return (ResourceNotFoundError,)


def _missing(exc: BaseException) -> bool:
    from azure.core.exceptions import ResourceNotFoundError

    return isinstance(exc, ResourceNotFoundError)


async def _container_exists(fs: Any, bucket: str) -> bool | None:
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

    try:
        return bool(await fs.service_client.get_container_client(bucket).exists())
    except ClientAuthenticationError:
        return None
    except HttpResponseError as exc:
        if exc.status_code == 403:
            return None
        raise


def bucket_exists(remote: Callable[..., Any], fs: Any, bucket: str) -> bool | None:
    """Whether a container exists (one request); None when Azure would not say (no permission)."""
    return remote(bucket, "", run(fs), _container_exists, fs, bucket)  # type: ignore[no-any-return]


async def uncommitted_blobs(fs: Any, bucket: str, prefix: str) -> list[tuple[str, float | None]]:
    """(key, time) of every blob under `prefix` that holds uncommitted blocks and no committed content
    (those listed with `uncommittedblobs` and not without it; two listings, a page of each at a time)."""
    container = fs.service_client.get_container_client(bucket)
    committed = {str(blob["name"]) async for blob in container.list_blobs(name_starts_with=prefix or None)}
    found: list[tuple[str, float | None]] = []
    async for blob in container.list_blobs(name_starts_with=prefix or None, include=["uncommittedblobs"]):
        if blob.get("size") or str(blob["name"]) in committed:  # one listing of each: both, or none
            continue
        created = blob.get("creation_time") or blob.get("last_modified")
        found.append((str(blob["name"]), created.timestamp() if created is not None else None))
    return found


async def discard_uncommitted(fs: Any, bucket: str, key: str) -> bool:
    """Drop a blob's uncommitted blocks when no committed blob is there; False when there were none."""
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

    blob = fs.service_client.get_blob_client(bucket, key)
    try:
        blocks = await blob.get_block_list("uncommitted")
    except Exception as exc:
        if _missing(exc):
            return False
        raise
    committed, uncommitted = blocks
    if not uncommitted or committed:
        return False  # nothing staged, or a real blob is there: its staged blocks expire by themselves
    conditions: dict[str, Any] = {}
    try:  # Put Blob discards the uncommitted blocks; only where no blob is, so nothing real is touched
        answer = await blob.upload_blob(b"", overwrite=False)
        conditions = {"etag": answer["etag"], "match_condition": MatchConditions.IfNotModified}
    except (ResourceExistsError, ResourceModifiedError):
        pass  # some services (Azurite) count a blob of staged blocks alone as one: it is deleted as it is
    try:
        await blob.delete_blob(**conditions)
    except Exception as exc:  # noqa: BLE001 - written meanwhile: a real write owns the name now
        if not _missing(exc):
            log.debug("az://%s/%s changed while its uncommitted blocks were discarded", bucket, key)
            return False
    return True


def _block_id(number: int) -> str:
    return base64.b64encode(f"{number:08d}-{uuid.uuid4().hex[:8]}".encode()).decode()


class AzureWriter:
    """A block blob written directly (through adlfs's client): blocks of `block_size` are staged as the
    buffer fills and committed in one Put Block List on commit; an object smaller than one block is a
    single Put Blob. On abort, the staged blocks are discarded (`discard_uncommitted`)."""

    def __init__(
        self, remote: Callable[..., Any], fs: Any, stats: IOStats, block_size: int, bucket: str, key: str
    ) -> None:
        """`remote`: `ObjectStore._remote` (each request within its deadline); `fs`: the Azure filesystem."""
        self._remote = remote
        self._fs = fs
        self._run = run(fs)
        self._stats = stats
        self._block_size = block_size
        self._bucket = bucket
        self._key = key
        self._buf = bytearray()
        self._blocks: list[str] = []
        self._size = 0

    def _call(self, coro: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._remote(self._bucket, self._key, self._run, coro, *args, **kwargs)

    def _client(self) -> Any:
        return self._fs.service_client.get_blob_client(self._bucket, self._key)

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data
        self._size += len(data)
        if len(self._buf) >= self._block_size:
            self._stage()

    def _stage(self) -> None:
        body = bytes(self._buf)
        self._buf = bytearray()
        block = _block_id(len(self._blocks) + 1)
        self._call(self._client().stage_block, block, body, length=len(body))
        self._blocks.append(block)

    def commit(self) -> None:
        from azure.storage.blob import BlobBlock

        try:
            if not self._blocks:
                body = bytes(self._buf)
                self._call(self._client().upload_blob, body, length=len(body), overwrite=True)
            else:
                if self._buf:
                    self._stage()
                self._call(self._client().commit_block_list, [BlobBlock(block_id=b) for b in self._blocks])
        except BaseException:
            self.abort()
            raise
        self._buf = bytearray()
        self._blocks = []
        self._stats.wrote(self._size, 1)
        self._fs.invalidate_cache(f"{self._bucket}/{self._key}")

    def abort(self) -> None:
        self._buf = bytearray()
        if not self._blocks:
            return
        self._blocks = []
        try:
            self._call(discard_uncommitted, self._fs, self._bucket, self._key)
        except Exception:  # noqa: BLE001 - the write already failed; Azure discards them after a week
            log.warning(
                "could not discard the staged blocks of az://%s/%s", self._bucket, self._key, exc_info=True
            )


@register_store
class AzureStore(ObjectStore):
    """Azure Blob Storage (adlfs; a bucket is a container): blocks staged and committed by one Put Block
    List; a blob of uncommitted blocks alone is an unfinished write. The SDK's not-found errors are
    translated to FileNotFoundError (`_remote`), so a missing container is named like S3's bucket."""

    backend = Backend.AZURE

    @classmethod
    def identity(cls, config: RsmConfig) -> str:
        return (
            f"{endpoint_of(config, 'storage.azure.endpoint.url')}|{config.get('storage.azure.account.name')}"
        )

    @classmethod
    def open(cls, config: RsmConfig, *, create: bool = True) -> ObjectStore:
        fs, request_timeout, attempts = open_filesystem(config)
        block = int(config.get("storage.azure.block.size"))  # type: ignore[arg-type]
        store = cls(fs, Backend.AZURE, None, block, request_timeout, attempts)
        store.where = where(config)
        return store

    def body_errors(self) -> tuple[type[BaseException], ...]:
        return body_errors()

    def not_found_errors(self) -> tuple[type[BaseException], ...]:
        return not_found_errors()

    def bucket_exists(self, bucket: str) -> bool | None:
        return bucket_exists(self._remote, self.fs, bucket)

    def _writer(self, bucket: str, key: str) -> ObjectWriter:
        return AzureWriter(self._remote, self.fs, self.stats, self.part_size, bucket, key)

    def uploads_under(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[UnfinishedWrite]:
        """Every blob under `prefix` of uncommitted blocks alone (two listings, a page of each at a time)."""
        blobs = self._remote(bucket, prefix, run(self.fs), uncommitted_blobs, self.fs, bucket, prefix)
        found = [UnfinishedWrite(bucket, k, upload_id=UNCOMMITTED, started=t) for k, t in blobs]
        return found if limit is None else found[:limit]

    def discard(self, write: UnfinishedWrite) -> bool:
        if write.upload_id != UNCOMMITTED:
            return super().discard(write)
        found = self._remote(
            write.bucket, write.key, run(self.fs), discard_uncommitted, self.fs, write.bucket, write.key
        )
        return bool(found)
