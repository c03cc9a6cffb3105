"""Keep kafka-python's DEBUG lines from carrying a credential.

kafka-python logs every request and response it sends at DEBUG, SASL frames included, and the raw bytes of
every frame: a SASL PLAIN `SaslAuthenticateRequest` holds the password in the clear, a SCRAM one the
client proof. Anyone turning on DEBUG logging to chase a slow read would write them to the executors'
logs. `install()` adds a filter to the loggers concerned that drops those records (a SASL request or
response, or raw frame bytes, among the arguments); every other line passes untouched. A filter on a
logger sees only the records logged on that logger, so the three names below are the whole of it.
"""

from __future__ import annotations

import logging
import threading

_LOGGERS = ("kafka.net.connection", "kafka.protocol.parser", "kafka.net.transport")
_installed = False
_lock = threading.Lock()


class DropCredentialFrames(logging.Filter):
    """Drops a DEBUG record whose arguments hold a SASL request/response or raw frame bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG or not record.args:
            return True
        args = record.args.values() if isinstance(record.args, dict) else record.args
        for arg in args:
            if isinstance(arg, (bytes, bytearray, memoryview)) or type(arg).__name__.startswith("Sasl"):
                return False
        return True


def install() -> None:
    """Add the filter to kafka-python's loggers (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(DropCredentialFrames())
        _installed = True
