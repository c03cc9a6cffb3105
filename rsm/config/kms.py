"""AWS KMS keys for envelope encryption: a key id `kms:<key ARN, key id or alias/...>` names a KMS key.

Why: a keyring file puts key material on every broker and every Spark executor; with a KMS key no key
material lives in a file. Each segment's data key is made by KMS (`GenerateDataKey`, AES-256) and stored
wrapped in the manifest, as a keyring key's is; reading a segment asks KMS to unwrap it (`Decrypt`).
Re-keying to a KMS key wraps an existing data key with `Encrypt`. The segment id is bound to every wrapped
key as KMS encryption context, as the keyring binds it as associated data: a wrapped key moved to another
segment's manifest does not unwrap.

Decrypted data keys are kept in memory (`encryption.kms.cache.keys` of them at most, each for
`encryption.kms.cache.ttl.ms`), so the fetches of a segment cost one `Decrypt`, and fetches of segments
already opened go on while KMS is unreachable. Anything else that needs KMS then fails with one line naming
the key and the cause, as a `RemoteStorageException`: Kafka retries a copy later.

Credentials and region come from boto3's default chain (environment, shared files, web identity, instance
and container roles) unless `encryption.kms.endpoint.url` / `encryption.kms.region` say otherwise. Data keys
never appear in logs, exceptions or `repr`.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.config.redact import redact_text

log = logging.getLogger(__name__)

T = TypeVar("T")

KMS_PREFIX = "kms:"
CONTEXT_KEY = "kafka-tiered-rsm/segment"


def is_kms_key(key_id: str | None) -> bool:
    """Whether a key id names a KMS key (`kms:...`) rather than a keyring entry."""
    return bool(key_id) and str(key_id).startswith(KMS_PREFIX)


def kms_key(key_id: str) -> str:
    """The KMS KeyId of a `kms:` key id (a key ARN, a key id, an alias name or an alias ARN)."""
    key = key_id[len(KMS_PREFIX) :].strip()
    if not key:
        raise ConfigException(f"key id {key_id!r} names no KMS key: write kms:<key ARN> or kms:alias/<name>")
    return key


@dataclass(frozen=True)
class KmsDeadlines:
    """How long KMS may take: per attempt (connect, read), the attempts, and one whole request; the storage
    deadlines' meaning (`rsm.store.deadlines`), under `encryption.kms.*`."""

    connect: float = 5.0
    read: float = 20.0
    attempts: int = 3
    request: float = 60.0

    def bounded(self, call: Callable[[], T]) -> T:
        """`call()` on a worker thread, TimeoutError after `request` seconds (botocore has no bound on a whole
        request with its retries; the thread, left to botocore's own timeouts, ends by itself)."""
        pool = _pool()
        future = pool.submit(call)
        try:
            return future.result(timeout=self.request)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError from None


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(8, thread_name_prefix="rsm-kms")
        return _POOL


def _timeout_setting(exc: BaseException) -> str | None:
    """The setting that bounds a botocore timeout or connection failure, or None for other failures."""
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    if isinstance(exc, ReadTimeoutError):
        return "encryption.kms.read.timeout.ms"
    if isinstance(exc, (ConnectTimeoutError, EndpointConnectionError)):
        return "encryption.kms.connect.timeout.ms"
    return None


class KmsKeys:
    """Data keys made and unwrapped by AWS KMS, with a bounded, expiring cache of unwrapped ones."""

    def __init__(
        self,
        endpoint_url: str | None = None,
        region: str | None = None,
        cache_keys: int = 1000,
        cache_ttl_s: float = 3600.0,
        client: Any = None,
        deadlines: KmsDeadlines | None = None,
    ) -> None:
        self._deadlines = deadlines or KmsDeadlines()
        self._endpoint_url = endpoint_url
        self._region = region
        self._cache_keys = cache_keys
        self._ttl = cache_ttl_s
        self._client = client
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, bytes, bytes], tuple[float, bytes]] = OrderedDict()

    @classmethod
    def from_config(cls, config: Any) -> KmsKeys:
        """From `encryption.kms.*` of an `RsmConfig` (or anything with its `get`)."""
        endpoint = config.get("encryption.kms.endpoint.url")
        region = config.get("encryption.kms.region")
        return cls(
            str(endpoint) if endpoint else None,
            str(region) if region else None,
            int(config.get("encryption.kms.cache.keys")),
            int(config.get("encryption.kms.cache.ttl.ms")) / 1000,
            deadlines=KmsDeadlines(
                int(config.get("encryption.kms.connect.timeout.ms")) / 1000,
                int(config.get("encryption.kms.read.timeout.ms")) / 1000,
                int(config.get("encryption.kms.retry.max.attempts")),
                int(config.get("encryption.kms.request.timeout.ms")) / 1000,
            ),
        )

    def __repr__(self) -> str:
        return f"KmsKeys(endpoint_url={self._endpoint_url!r}, region={self._region!r}, cached={len(self._cache)})"

    def client(self) -> Any:
        """boto3's KMS client (made on first use: the default chain is asked only when a KMS key is used)."""
        with self._lock:
            if self._client is None:
                import botocore.session
                from botocore.config import Config

                from rsm.config.redact import install_log_redaction

                install_log_redaction()  # botocore's DEBUG log shows session tokens and plaintext answers
                # botocore's own session (the default chain, as boto3's would): boto3 is no dependency, since
                # pinning it beside s3fs's aiobotocore (which pins botocore) sends pip backtracking
                self._client = botocore.session.get_session().create_client(
                    "kms",
                    endpoint_url=self._endpoint_url,
                    region_name=self._region,
                    config=Config(
                        connect_timeout=self._deadlines.connect,
                        read_timeout=self._deadlines.read,
                        retries={"total_max_attempts": self._deadlines.attempts, "mode": "standard"},
                    ),
                )
            return self._client

    @staticmethod
    def _context(context: bytes) -> dict[str, str]:
        return {CONTEXT_KEY: base64.b64encode(context).decode("ascii")}

    def _call(self, what: str, key_id: str, method: str, **kwargs: Any) -> dict[str, Any]:
        """One KMS request, within `encryption.kms.request.timeout.ms` (attempts included); any failure becomes
        one line naming the key, the cause and, for a timeout, the setting that bounds it."""
        try:
            return self._deadlines.bounded(lambda: getattr(self.client(), method)(**kwargs))  # type: ignore[no-any-return]
        except ConfigException:
            raise
        except TimeoutError:
            raise RemoteStorageException(
                f"KMS key {key_id}: cannot {what}: no answer within {self._deadlines.request:g} s "
                "(encryption.kms.request.timeout.ms, attempts included)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - botocore's errors, unreachable endpoints, missing credentials
            setting = _timeout_setting(exc)
            if setting is not None:
                raise RemoteStorageException(
                    f"KMS key {key_id}: cannot {what} ({type(exc).__name__} after "
                    f"{self._deadlines.attempts} attempt(s); {setting}, encryption.kms.retry.max.attempts)"
                ) from None
            response = getattr(exc, "response", None)
            code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
            cause = f"{code}: " if code else f"{type(exc).__name__}: "
            message = redact_text(str(exc)).splitlines()[0][:300] if str(exc) else ""
            raise RemoteStorageException(f"KMS key {key_id}: cannot {what} ({cause}{message})") from None

    def generate(self, key_id: str, context: bytes) -> tuple[bytes, bytes]:
        """A new 256-bit data key and its wrapped form (`GenerateDataKey`), bound to `context`."""
        out = self._call(
            "generate a data key",
            key_id,
            "generate_data_key",
            KeyId=kms_key(key_id),
            KeySpec="AES_256",
            EncryptionContext=self._context(context),
        )
        plaintext, wrapped = bytes(out["Plaintext"]), bytes(out["CiphertextBlob"])
        self._remember(key_id, wrapped, context, plaintext)
        return plaintext, wrapped

    def wrap(self, key_id: str, data_key: bytes, context: bytes) -> bytes:
        """An existing data key wrapped by a KMS key (`Encrypt`), bound to `context` (re-keying)."""
        out = self._call(
            "wrap a data key",
            key_id,
            "encrypt",
            KeyId=kms_key(key_id),
            Plaintext=data_key,
            EncryptionContext=self._context(context),
        )
        wrapped = bytes(out["CiphertextBlob"])
        self._remember(key_id, wrapped, context, data_key)
        return wrapped

    def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key wrapped in `wrapped` (`Decrypt`, or the cache): KMS checks the key and context."""
        cached = self._cached(key_id, wrapped, context)
        if cached is not None:
            return cached
        out = self._call(
            "unwrap a data key",
            key_id,
            "decrypt",
            KeyId=kms_key(key_id),
            CiphertextBlob=wrapped,
            EncryptionContext=self._context(context),
        )
        data_key = bytes(out["Plaintext"])
        self._remember(key_id, wrapped, context, data_key)
        return data_key

    def _cached(self, key_id: str, wrapped: bytes, context: bytes) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            entry = self._cache.get((key_id, wrapped, context))
            if entry is None:
                return None
            expires, data_key = entry
            if expires <= now:
                del self._cache[(key_id, wrapped, context)]
                return None
            self._cache.move_to_end((key_id, wrapped, context))
            return data_key

    def _remember(self, key_id: str, wrapped: bytes, context: bytes, data_key: bytes) -> None:
        if self._cache_keys <= 0 or self._ttl <= 0:
            return
        with self._lock:
            self._cache[(key_id, wrapped, context)] = (time.monotonic() + self._ttl, data_key)
            self._cache.move_to_end((key_id, wrapped, context))
            while len(self._cache) > self._cache_keys:
                self._cache.popitem(last=False)

    def cached_keys(self) -> int:
        """How many unwrapped data keys are in memory now (for tests and metrics)."""
        with self._lock:
            return len(self._cache)
