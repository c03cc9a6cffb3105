"""Kafka's own classes as the oracle for the project's format code.

:class:`JavaOracle` runs ``io.github.kafkatieredrsm.oracle.Oracle`` (``tests/java``) against the Kafka
4.4.0 jars: it writes whole segments through Kafka's ``UnifiedLog`` (magic 2: offsets, leader epochs,
producer state, transaction index, snapshot, indexes, exactly as a broker writes them) or ``LogSegment``
(legacy magic 0/1), dumps any segment file through Kafka's readers (``FileRecords``, ``OffsetIndex``,
``TimeIndex``, ``TransactionIndex``, ``ProducerStateManager.readSnapshot``, the leader-epoch
checkpoint), rebuilds indexes the way crash recovery does, and checks a ``.log`` with Kafka's
validation. One JVM serves all calls (a JVM per call costs about half a second).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import enum
import json
import logging
import os
import select
import subprocess
import threading
from pathlib import Path
from typing import Any

from harness.maven import JavaBuild, build_test_java, log_tail
from harness.procs import dies_with_parent

log = logging.getLogger(__name__)

MAIN_CLASS = "io.github.kafkatieredrsm.oracle.Oracle"
JVM_OPTS: tuple[str, ...] = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
CALL_TIMEOUT_S = 300.0


class Codec(enum.StrEnum):
    """Kafka's record compression codecs, by the names Kafka uses."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class OracleError(RuntimeError):
    """Kafka refused the input (its message is kept), or the oracle itself failed."""


def segment_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name for a segment file: 20-digit zero-padded base offset + suffix."""
    return f"{base_offset:020d}{suffix}"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _content(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": _b64(record.get("key")),
        "value": _b64(record.get("value")),
        "headers": [{"key": k, "value": _b64(v)} for k, v in record.get("headers", ())],
    }


class JavaOracle:
    """Writes, dumps and checks segment files with Kafka's own Java classes.

    By default one JVM serves every call (``Oracle serve``: a JSON request line in, a JSON line out),
    started on first use and restarted if it dies; ``persistent=False`` starts a JVM per call.
    Call :meth:`close` (the pytest fixture does) to stop it; an atexit hook is the safety net.
    """

    def __init__(
        self, build: JavaBuild | None = None, java: str = "java", *, persistent: bool = True
    ) -> None:
        self.build = build or build_test_java()
        self.java = java
        self.persistent = persistent
        self._server: subprocess.Popen[bytes] | None = None
        self._server_log: Path | None = None
        self._lock = threading.Lock()
        atexit.register(self.close)

    def _command(self, *args: str) -> list[str]:
        return dies_with_parent([self.java, *JVM_OPTS, "-cp", self.build.classpath, MAIN_CLASS, *args])

    @staticmethod
    def _env() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "JAVA_TOOL_OPTIONS")}

    def _run(self, *args: str) -> Any:
        if self.persistent:
            return self._call_server(list(args))
        try:
            proc = subprocess.run(
                self._command(*args),
                capture_output=True,
                text=True,
                timeout=CALL_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env=self._env(),
            )
        except subprocess.TimeoutExpired as exc:
            raise OracleError(
                f"oracle {args[0]} timed out after {CALL_TIMEOUT_S:.0f}s: {' '.join(args)}"
            ) from exc
        if proc.returncode != 0:
            errors = [
                line[len("ORACLE-ERROR: ") :]
                for line in proc.stderr.splitlines()
                if line.startswith("ORACLE-ERROR: ")
            ]
            if proc.returncode == 2 and errors:
                raise OracleError(errors[-1])
            tail = "\n".join(proc.stderr.splitlines()[-30:])
            raise OracleError(f"oracle {' '.join(args)} failed with exit code {proc.returncode}:\n{tail}")
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as exc:
            raise OracleError(f"oracle {args[0]} printed no JSON: {proc.stdout[:500]!r}") from exc

    def _start_server(self) -> subprocess.Popen[bytes]:
        logs = self.build.oracle_jar.parent.parent / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self._server_log = logs / f"oracle-serve-{os.getpid()}-{id(self):x}.log"
        with self._server_log.open("wb") as err:
            self._server = subprocess.Popen(
                self._command("serve"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self._env(),
            )
        log.info("java oracle server started (pid %s)", self._server.pid)
        return self._server

    def _call_server(self, request: list[str]) -> Any:
        with self._lock:
            server = self._server if self._server and self._server.poll() is None else self._start_server()
            assert server.stdin is not None and server.stdout is not None
            try:
                server.stdin.write(json.dumps(request).encode() + b"\n")
                server.stdin.flush()
                ready, _, _ = select.select([server.stdout], [], [], CALL_TIMEOUT_S)
                line = server.stdout.readline() if ready else b""
            except OSError:
                line = b""
            if not line:
                timed_out = server.poll() is None
                self._stop_server()
                what = f"timed out after {CALL_TIMEOUT_S:.0f}s" if timed_out else "died"
                tail = log_tail(self._server_log, 30) if self._server_log else ""
                raise OracleError(f"oracle server {what} on {' '.join(request)}\n{tail}")
        response = json.loads(line)
        if not response["ok"]:
            prefix = "oracle internal error: " if response.get("internal") else ""
            raise OracleError(prefix + response["error"])
        return response["result"]

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if server.stdin:
            with contextlib.suppress(OSError):
                server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        if server.stdout:
            server.stdout.close()

    @property
    def server_pid(self) -> int | None:
        """Pid of the persistent JVM while it runs."""
        server = self._server
        return server.pid if server is not None and server.poll() is None else None

    def close(self) -> None:
        """Stop the persistent JVM (if any); the oracle restarts it on the next call."""
        with self._lock:
            self._stop_server()

    def __enter__(self) -> JavaOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_segment(
        self,
        out_dir: Path,
        codec: str | Codec = Codec.NONE,
        *,
        records: int = 500,
        value_size: int = 100,
        transactional: bool = False,
        index_interval_bytes: int = 4096,
        seed: int = 0,
        magic: int = 2,
        base_offset: int = 0,
        open_transaction: bool = False,
        contents: list[dict[str, Any]] | None = None,
    ) -> Path:
        """Write a closed segment with Kafka's code into ``out_dir``; return the ``.log`` path.

        ``out_dir`` then holds ``<base>.log``, ``.index``, ``.timeindex`` (``.txnindex`` when a
        transaction was aborted), for magic 2 the producer ``<next offset>.snapshot`` and
        ``leader-epoch-checkpoint``, and ``expected.json`` (see :meth:`expected`). ``records`` counts
        data records; with ``transactional`` COMMIT/ABORT control records come on top, and with
        ``open_transaction`` too, the last transaction (2 more records) is left without its marker
        (records marked ``ongoing`` in expected.json; the snapshot keeps its first offset).

        ``contents`` gives the data records to write, in order, instead of generated ones (magic 2):
        ``[{"key": bytes | None, "value": bytes | None, "headers": [(key, bytes | None), ...]}]``;
        ``records`` is then their number. Batching, producers, transactions and timestamps are as usual.
        """
        try:
            codec = Codec(codec)
        except ValueError as exc:
            raise ValueError(f"unknown codec {codec!r}: one of {[c.value for c in Codec]}") from exc
        if magic not in (0, 1, 2):
            raise ValueError(f"magic must be 0, 1 or 2, not {magic}")
        extra: tuple[str, ...] = ()
        if contents is not None:
            if magic != 2:
                raise ValueError("contents need magic 2")
            out_dir = Path(out_dir)
            out_dir.mkdir(parents=True, exist_ok=True)
            spec = out_dir / "contents.json"
            spec.write_text(json.dumps([_content(c) for c in contents]))
            extra = ("--contents", str(spec.resolve()))
            records = len(contents)
        result = self._run(
            "write-segment",
            "--out", str(Path(out_dir).resolve()),
            "--codec", codec.value,
            "--records", str(records),
            "--value-size", str(value_size),
            "--transactional", "true" if transactional else "false",
            "--index-interval-bytes", str(index_interval_bytes),
            "--seed", str(seed),
            "--magic", str(magic),
            "--base-offset", str(base_offset),
            "--open-transaction", "true" if open_transaction else "false",
            *extra,
        )  # fmt: skip
        return Path(result["log"])

    @staticmethod
    def expected(out_dir: Path) -> dict[str, Any]:
        """What write_segment handed to Kafka and the offsets Kafka assigned (``expected.json``).

        Keys: ``batches`` (baseOffset, lastOffset, count, magic, compressCodec, producerId,
        producerEpoch, baseSequence, partitionLeaderEpoch, isTransactional, isControl, maxTimestamp,
        controlType/coordinatorEpoch for markers) and ``records`` (offset, timestamp, key/value base64
        or null, headers [{key, value}], producerId, isTransactional, isControl, aborted, controlType).
        """
        return json.loads((Path(out_dir) / "expected.json").read_text())

    def dump(self, path: Path) -> list[dict[str, Any]]:
        """Read a segment file with Kafka's classes.

        ``.log``: one dict per batch (baseOffset, lastOffset, count, position, size, magic,
        compressCodec, crc, isValid, timestampType, maxTimestamp/createTime, producerId, producerEpoch,
        baseSequence, lastSequence, partitionLeaderEpoch, isTransactional, isControl, deleteHorizonMs,
        records [{offset, timestamp, sequence, sizeInBytes, key, value, headers, controlType?,
        coordinatorEpoch?}]). ``.index``: {offset, relativeOffset, position}; ``.timeindex``:
        {timestamp, offset, relativeOffset}; ``.txnindex``: {producerId, firstOffset, lastOffset,
        lastStableOffset}; ``.snapshot``: {producerId, producerEpoch, coordinatorEpoch, lastTimestamp,
        currentTxnFirstOffset, lastSequence, lastOffset, offsetDelta, batches}; ``leader-epoch-checkpoint``:
        {epoch, startOffset}.
        """
        return list(self._run("dump", str(Path(path).resolve())))

    def dump_many(self, paths: list[Path]) -> dict[Path, list[dict[str, Any]]]:
        """:meth:`dump` for several files in one JVM (saves ~0.5 s per file); keyed by the given paths."""
        if not paths:
            return {}
        resolved = [Path(p).resolve() for p in paths]
        result = self._run("dump-many", *(str(p) for p in resolved))
        return {path: list(result[str(res)]) for path, res in zip(paths, resolved, strict=True)}

    def rebuild_indexes(
        self, log: Path, out_dir: Path, *, index_interval_bytes: int = 4096
    ) -> dict[str, Any]:
        """Kafka's own rebuild of a ``.log``'s companion files (``LogSegment.recover``, as after a crash).

        Writes into ``out_dir``: ``<base>.index`` and ``<base>.timeindex`` for ``index_interval_bytes``,
        ``<base>.txnindex`` when the log holds aborted transactions, ``leader-epoch-checkpoint`` and the
        producer ``<next offset>.snapshot``. Returns {truncatedBytes, nextOffset, files}; a nonzero
        ``truncatedBytes`` means Kafka found invalid bytes at the end and would cut them off.
        """
        result = self._run(
            "rebuild-indexes",
            "--log", str(Path(log).resolve()),
            "--out", str(Path(out_dir).resolve()),
            "--index-interval-bytes", str(index_interval_bytes),
        )  # fmt: skip
        return dict(result)

    def check(self, path: Path) -> dict[str, Any]:
        """Kafka's validation of a ``.log`` (every batch ensureValid(), records iterated, offsets rising).

        Returns {batches, records, firstOffset, lastOffset, sizeInBytes, magics, codecs}; raises
        :class:`OracleError` with Kafka's message (and the byte position) when the file is invalid.
        """
        return dict(self._run("check", str(Path(path).resolve())))
