"""Real GCS and Azure Blob endpoints for tests: fake-gcs-server and Azurite as child processes.

Each listens on a free 127.0.0.1 port and is spoken to over HTTP by the real SDKs (gcsfs, adlfs and the
Azure SDK underneath): the same requests as to Google or Azure, never an in-process mock. Installed by
:mod:`harness.emulators`; stopped by ``stop()``, a context manager, and the kernel when pytest dies
(:func:`harness.procs.dies_with_parent`). Azurite's well-known development account and key are public test
values, never real credentials.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.maven import log_tail
from harness.ports import LOOPBACK, free_port, wait_for_port
from harness.procs import dies_with_parent

log = logging.getLogger(__name__)

# Azurite's documented development storage account (public; the same for everyone)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class _Emulator:
    """One emulator process: start()/stop() or a context manager."""

    host: str = LOOPBACK
    port: int = 0
    name: str = "emulator"
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _dir: Path | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self, workdir: Path) -> list[str]:  # pragma: no cover - each emulator's own
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> _Emulator:
        if self._proc is not None:
            return self
        self.port = self.port or free_port(self.host)
        self._dir = Path(tempfile.mkdtemp(prefix=f"rsm-{self.name}-"))
        log_file = self._dir / "emulator.log"
        with open(log_file, "wb") as out:
            self._proc = subprocess.Popen(
                dies_with_parent(self.command(self._dir)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self._dir,
            )
        atexit.register(self.stop)
        if not wait_for_port(self.host, self.port, timeout) or self._proc.poll() is not None:
            tail = log_tail(log_file, 30)
            self.stop()
            raise RuntimeError(
                f"{self.name} did not listen on {self.endpoint_url} within {timeout:.0f}s:\n{tail}"
            )
        log.info("%s on %s", self.name, self.endpoint_url)
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> _Emulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class FakeGcsServer(_Emulator):
    """fake-gcs-server, in memory, plain HTTP."""

    name: str = "fake-gcs-server"
    binary: Path | None = None
    project: str = "test-project"

    def command(self, workdir: Path) -> list[str]:
        assert self.binary is not None
        return [
            str(self.binary),
            "-scheme", "http",
            "-host", self.host,
            "-port", str(self.port),
            "-backend", "memory",
            "-public-host", f"{self.host}:{self.port}",
            "-external-url", self.endpoint_url,
            "-log-level", "warn",
        ]  # fmt: skip

    def rsm_configs(self, **extra: str) -> dict[str, str]:
        """RemoteStorageManager configs for this endpoint (gcs backend, anonymous) plus ``extra``."""
        return {
            "storage.backend": "gcs",
            "storage.gcs.endpoint.url": self.endpoint_url,
            "storage.gcs.project": self.project,
            "storage.gcs.token": "anon",
            **extra,
        }

    def filesystem(self) -> Any:
        """A fresh gcsfs filesystem on this endpoint (for the tests' own look at the store)."""
        # gcsfs.core's: the package's default (its "extended" class) asks each bucket's type over gRPC
        from gcsfs.core import GCSFileSystem  # noqa: PLC0415

        return GCSFileSystem(
            endpoint_url=self.endpoint_url, token="anon", project=self.project, skip_instance_cache=True
        )

    def make_bucket(self, name: str | None = None) -> str:
        bucket = name or f"test-{uuid.uuid4().hex[:16]}"
        self.filesystem().mkdir(bucket)
        return bucket

    def env(self) -> dict[str, str]:
        """Variables pointing a subprocess's Google SDK at this endpoint."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint_url}


@dataclass
class AzuriteServer(_Emulator):
    """Azurite's Blob service, in memory."""

    name: str = "azurite"
    script: Path | None = None
    account: str = AZURITE_ACCOUNT
    key: str = AZURITE_KEY

    @property
    def blob_url(self) -> str:
        return f"{self.endpoint_url}/{self.account}"

    def command(self, workdir: Path) -> list[str]:
        assert self.script is not None
        return [
            str(self.script),
            "--blobHost", self.host,
            "--blobPort", str(self.port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
            "--disableTelemetry",
        ]  # fmt: skip

    def rsm_configs(self, **extra: str) -> dict[str, str]:
        """RemoteStorageManager configs for this endpoint (azure backend, the development key) plus ``extra``."""
        return {
            "storage.backend": "azure",
            "storage.azure.endpoint.url": self.blob_url,
            "storage.azure.account.name": self.account,
            "storage.azure.account.key": self.key,
            **extra,
        }

    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={self.blob_url};"
        )

    def blob_service(self) -> Any:
        """A synchronous Azure SDK client on this endpoint (for the tests' own look at the store)."""
        from azure.storage.blob import BlobServiceClient  # noqa: PLC0415

        return BlobServiceClient.from_connection_string(self.connection_string())

    def filesystem(self) -> Any:
        """A fresh adlfs filesystem on this endpoint (for the tests' own look at the store)."""
        import adlfs  # noqa: PLC0415

        return adlfs.AzureBlobFileSystem(connection_string=self.connection_string(), skip_instance_cache=True)

    def make_bucket(self, name: str | None = None) -> str:
        bucket = name or f"test-{uuid.uuid4().hex[:16]}"
        self.blob_service().create_container(bucket)
        return bucket

    def env(self) -> dict[str, str]:
        """Variables giving a subprocess's Azure SDK this account (adlfs reads them too)."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}
