"""The one piece of kafka-python's connection that is ours: its socket reads.

kafka-python 3.0.12's transport reads a socket until it would block, and when that read ends with the
peer closing, it drops everything the same read returned before the close. A Kafka broker refusing a
SASL authentication does exactly that: it sends the SaslAuthenticate error and closes the connection
(after `connection.failed.authentication.delay.ms`), so the answer and the close arrive together and
kafka-python sees only "socket disconnected": its bootstrap then retries until the timeout and reports
"Unable to bootstrap", a wrong password taking a minute and never being named. Here the bytes a read
returned are handed to the protocol first, and the close is queued behind the task they woke: the SASL
error reaches the connection, which raises SaslAuthenticationFailedError at once, as the Java client
does.

Reads also go into one reused 1 MiB buffer (`recv_into`) and each is handed on as a view, where
kafka-python reads 4 KiB pieces, joins them and slices the join: for a Fetch response of several MiB that
is two copies and thousands of system calls fewer. The protocol assembles each frame in a buffer of its
own; kafka-python's decoder then asks that buffer for the rest of the frame, which it copies twice
(`bytes(bytearray[i:])`) before decoding a view of the copy. `FrameProtocol` hands the decoder a view of
the frame instead (`_Frame`), so a Fetch response's bytes are copied once after the socket, into the
`records` the decoder returns: in a columnar stream's worker the two copies were ~5% of its CPU (py-spy).

The transports need the classes the connection manager builds, so `WireConnectionManager` overrides its
`_build_transport` (the same steps as kafka-python's, with these classes). That is a private method of
kafka-python 3.0.x: tests/spark/test_broker_wire.py's wrong-password test fails if a release changes it. The
manager also keeps the first failure no retry can mend (`fatal`): kafka-python's bootstrap retries even
a refused password until its timeout.
"""

from __future__ import annotations

import logging
import ssl
import time
import weakref
from typing import Any

from kafka.net.manager import KafkaConnectionManager
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport
from kafka.protocol.parser import KafkaProtocol

log = logging.getLogger(__name__)

READ_SIZE = 1 << 20


class _Frame:
    """One received frame (kafka-python's `KafkaBytes`) as its decoder reads it, but the rest of the frame
    is given as a view (`read()`), not as a copy of a copy."""

    def __init__(self, frame: bytearray) -> None:
        self._frame = frame

    def read(self, nbytes: int | None = None) -> bytes | memoryview:
        if nbytes is not None:
            return self._frame.read(nbytes)
        start = self._frame.tell()
        self._frame.seek(len(self._frame))
        return memoryview(self._frame)[start:]

    def seek(self, position: int) -> None:
        self._frame.seek(position)

    def tell(self) -> int:
        return self._frame.tell()


class FrameProtocol(KafkaProtocol):
    """kafka-python's protocol (framing, correlation, decoding), each response decoded from a view of its
    frame (`_Frame`). A connection's parser becomes one when its first bytes arrive (`_adopt`)."""

    def _process_response(self, read_buffer: Any) -> Any:  # noqa: ANN401 - kafka-python's types
        return super()._process_response(_Frame(read_buffer))


def _adopt(connection: Any) -> None:  # noqa: ANN401 - kafka.net.connection.KafkaConnection
    """Make `connection`'s parser a `FrameProtocol` (the same object and state: the class adds no field)."""
    parser = getattr(connection, "parser", None)
    if type(parser) is KafkaProtocol:
        parser.__class__ = FrameProtocol


class _DeliverBeforeClose:
    """The read loop of kafka-python's transport, but each read is handed to the protocol as it comes
    (a view of one reused buffer: the protocol copies what it keeps), and a close is delivered after
    the data read before it."""

    async def _read_from_sock(self: Any) -> None:  # noqa: ANN401
        import kafka.errors as Errors

        buffer = bytearray(READ_SIZE)
        view = memoryview(buffer)
        while self._read and not self._closed:
            await self._net.wait_read(self._sock)
            delivered, err = False, None
            while self._read and not self._closed:
                try:
                    n = self._sock.recv_into(buffer)
                except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    break
                except Exception as exc:  # noqa: BLE001 - as kafka-python: any socket failure closes it
                    err = Errors.KafkaConnectionError(exc)
                    break
                if not n:
                    err = Errors.KafkaConnectionError("socket disconnected")
                    break
                self.last_read = time.monotonic()
                if self._protocol._sensors:
                    self._protocol._sensors.bytes_received.record(n)
                _adopt(self._protocol)
                try:
                    self._protocol.data_received(view[:n])
                except Errors.KafkaProtocolError as exc:
                    return self.abort(error=exc)
                delivered = True
            if err is not None:
                if not delivered:
                    return self.abort(error=err)
                # the answer just delivered woke the task awaiting it: let it run before the close, which
                # would otherwise fail that task with "socket disconnected" first
                self._net.call_soon(lambda error=err: self.abort(error=error))
                return None
        return None


class TcpTransport(_DeliverBeforeClose, KafkaTCPTransport):
    pass


class SslTransport(_DeliverBeforeClose, KafkaSSLTransport):
    pass


def is_fatal(exc: BaseException) -> bool:
    """A connection failure no retry can mend: credentials refused, a certificate not trusted."""
    import kafka.errors as Errors

    if isinstance(exc, (Errors.SaslAuthenticationFailedError, Errors.UnsupportedSaslMechanismError)):
        return True
    text = str(exc)
    return isinstance(exc, Errors.KafkaConnectionError) and (
        "CERTIFICATE_VERIFY_FAILED" in text or "Hostname mismatch" in text
    )


class WireConnectionManager(KafkaConnectionManager):
    """kafka-python's connection manager building `TcpTransport` / `SslTransport`, and keeping the first
    connection failure no retry can mend (`fatal`): kafka-python's bootstrap retries every failure until
    its timeout, a refused password included, so the caller looks here to stop at once."""

    def __init__(self, net: Any, **configs: Any) -> None:  # noqa: ANN401
        super().__init__(net, **configs)
        self.fatal: BaseException | None = None
        self.last_failure: BaseException | None = None  # why the last connection failed, for a timeout
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def get_connection(self, node_id: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        conn = super().get_connection(node_id, *args, **kwargs)
        if conn not in self._watched:
            self._watched.add(conn)
            conn.init_future.add_errback(self._failed)
        return conn

    def open_connections(self) -> list[Any]:
        """The connections kafka-python still holds open (it drops one from `_conns` when it closes): the
        pool asks whether a kept client's sockets survived (`WireConnection.reusable`). kafka-python 3.0.x
        has no public accessor; docs/INTERNALS.md lists it."""
        return list(self._conns.values())

    def _failed(self, exc: BaseException) -> None:
        self.last_failure = exc
        if self.fatal is None and is_fatal(exc):
            self.fatal = exc

    async def _build_transport(self, node: Any, timeout_at: float | None = None) -> Any:  # noqa: ANN401
        import kafka.errors as Errors
        from kafka.net.inet import create_connection

        sock = await create_connection(
            self._net,
            node.host,
            node.port,
            self.config["socket_options"],
            proxy_url=self.config["proxy_url"],
            timeout_at=timeout_at,
        )
        if self.ssl_enabled:
            ssl_configs = {k: v for k, v in self.config.items() if k.startswith("ssl_")}
            transport = SslTransport(self._net, sock, host=node.host, **ssl_configs)
        else:
            transport = TcpTransport(self._net, sock, host=node.host)
        try:
            await transport.handshake()
        except Exception as exc:  # noqa: BLE001 - as kafka-python: a failed handshake is a connection error
            raise Errors.KafkaConnectionError(f"Handshake failed: {exc}") from None
        return transport
