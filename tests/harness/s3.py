"""A real S3 endpoint for tests: moto's threaded server on a free 127.0.0.1 port.

Clients talk HTTP to it exactly as to AWS (signatures, ranges, multipart), through boto3 or s3fs.
Credentials are moto's dummies ("testing"), never real ones; :meth:`S3Server.env` gives the AWS_*
variables for subprocesses (a broker's bridge, the ``rsm`` CLI).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from harness.ports import LOOPBACK, free_port, wait_for_port

if TYPE_CHECKING:
    import s3fs as _s3fs

log = logging.getLogger(__name__)


@dataclass
class S3Server:
    """moto's S3 server; start()/stop() or a context manager."""

    region: str = "us-east-1"
    access_key: str = "testing"
    secret_key: str = "testing"
    host: str = LOOPBACK
    port: int = 0
    _server: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> S3Server:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 - heavy import, only when used

        if self._server is not None:
            return self
        self.port = self.port or free_port(self.host)
        server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        server.start()
        self._server = server
        if not wait_for_port(self.host, self.port, timeout):
            self.stop()
            raise RuntimeError(f"moto S3 server did not listen on {self.endpoint_url} within {timeout:.0f}s")
        log.info("moto S3 server on %s", self.endpoint_url)
        return self

    def stop(self) -> None:
        if self._server is not None:
            try:
                self._server.stop()
            finally:
                self._server = None

    def boto3_client(self) -> Any:
        """A boto3 S3 client for this endpoint (path-style addressing, dummy credentials)."""
        import boto3  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs keyword arguments for this endpoint (for code that takes storage_options)."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.region},
        }

    def rsm_configs(self, **extra: str) -> dict[str, str]:
        """RemoteStorageManager configs for this endpoint (s3 backend, dummy credentials) plus ``extra``."""
        return {
            "storage.backend": "s3",
            "storage.s3.endpoint.url": self.endpoint_url,
            "storage.s3.region": self.region,
            "storage.s3.access.key.id": self.access_key,
            "storage.s3.secret.access.key": self.secret_key,
            **extra,
        }

    def s3fs(self, **kwargs: Any) -> _s3fs.S3FileSystem:
        """A fresh (uncached) s3fs filesystem talking to this endpoint."""
        import s3fs  # noqa: PLC0415

        options = self.storage_options()
        options.update(kwargs)
        return s3fs.S3FileSystem(skip_instance_cache=True, **options)

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique name when none is given) and return its name."""
        bucket = name or f"test-{uuid.uuid4().hex[:16]}"
        self.boto3_client().create_bucket(Bucket=bucket)
        return bucket

    def env(self) -> dict[str, str]:
        """AWS_* variables pointing a subprocess's AWS SDK / s3fs at this endpoint."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
        }

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
