"""The bridge's listening socket: where it may live and how it comes to exist.

Why a module of its own: the socket is the bridge's only access control (anyone who can connect can
read every tiered segment), so the rules about its directory and its creation are kept in one place.

The socket's name appears only once the bridge listens on it: it binds and listens on a temporary name
in the same directory, then links the real name to it. A client never finds a name it cannot connect to
(the JVM plugin would fail its call), and a second bridge starting at the same moment never takes a
socket that is still being set up for a stale one and removes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import stat
from pathlib import Path

log = logging.getLogger(__name__)

_UNIX_PATH_MAX = 107
_TEMP_PREFIX = ".rsmb-"
_TEMP_NAME_BYTES = len(_TEMP_PREFIX) + 8  # ".rsmb-" + 8 hex digits


def check_socket_path(path: Path) -> None:
    """Refuse a socket path whose directory others could tamper with, or that cannot be bound.

    The socket is the bridge's only access control: anyone who can connect can read every tiered
    segment.  So its directory must belong to us (or root) and must not be writable by others unless
    it has the sticky bit (like /tmp), or another user could swap the socket for their own.
    """
    path = Path(path)
    if len(os.fsencode(str(path))) > _UNIX_PATH_MAX:
        raise ValueError(f"socket path {path} is longer than {_UNIX_PATH_MAX} bytes (Unix socket limit)")
    parent = path.parent if path.parent != Path("") else Path(".")
    if len(os.fsencode(str(parent))) + 1 + _TEMP_NAME_BYTES > _UNIX_PATH_MAX:
        raise ValueError(
            f"socket directory {parent} leaves no room under the {_UNIX_PATH_MAX}-byte Unix socket limit for"
            f" the {_TEMP_NAME_BYTES}-byte name the bridge binds before it listens; use a shorter directory"
        )
    try:
        st = parent.stat()
    except OSError as exc:
        raise ValueError(f"socket directory {parent} is not usable: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"socket directory {parent} is not a directory")
    if st.st_uid not in (os.getuid(), 0):
        raise ValueError(f"socket directory {parent} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise ValueError(
            f"socket directory {parent} is writable by group/others without the sticky bit "
            f"(mode {stat.S_IMODE(st.st_mode):o}); use a private directory"
        )


def refuse_live_socket(path: Path) -> None:
    """Raise ValueError when ``path`` is taken: by a bridge listening there, or by something that is not
    a socket. A stale socket (nobody listening) is left for ``open_listener`` to replace.

    Called before the bridge sets anything else up, so a second bridge fails fast and cheaply.
    """
    with contextlib.suppress(FileNotFoundError):
        _probe(Path(path))


def open_listener(path: Path, backlog: int) -> tuple[socket.socket, int]:
    """A socket listening at ``path`` (mode 0600 from the first instant), and its inode number.

    Bound and listening under a temporary name first, then published by a hard link (which, unlike a
    rename, never replaces a name another bridge just published); a stale socket at ``path`` is removed
    first. The inode lets the bridge remove only its own socket at shutdown.
    """
    path = Path(path)
    check_socket_path(path)
    temp = path.parent / f"{_TEMP_PREFIX}{secrets.token_hex(4)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(temp))
        finally:
            os.umask(old_umask)
        os.chmod(temp, 0o600)
        inode = os.lstat(temp).st_ino
        listener.listen(backlog)
        _publish(temp, path)
    except BaseException:
        listener.close()
        raise
    finally:
        temp.unlink(missing_ok=True)
    return listener, inode


def remove_own_socket(path: Path, inode: int) -> None:
    """Remove ``path`` if it is still the socket this bridge published (not a successor's)."""
    with contextlib.suppress(FileNotFoundError):
        if os.lstat(path).st_ino == inode:
            path.unlink(missing_ok=True)


def _publish(temp: Path, path: Path) -> None:
    """Give the listening socket at ``temp`` its real name ``path``, replacing only a stale socket."""
    for _ in range(3):
        try:
            os.link(temp, path)
            return
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile: link again
                _remove_stale(path)
        except OSError:  # a filesystem without hard links: a rename, after the same check
            with contextlib.suppress(FileNotFoundError):
                _remove_stale(path)
            os.rename(temp, path)
            return
    raise ValueError(f"{path} keeps reappearing: another bridge is starting on it")


def _remove_stale(path: Path) -> None:
    """Remove the socket at ``path`` when nobody listens on it; ValueError when someone does."""
    _probe(path)
    log.info("removing stale socket %s", path)
    path.unlink(missing_ok=True)


def _probe(path: Path) -> None:
    """Return when ``path`` is a socket nobody listens on; ValueError when it is live or not a socket;
    FileNotFoundError when it does not exist."""
    st = path.lstat()
    if not stat.S_ISSOCK(st.st_mode):
        raise ValueError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except ConnectionRefusedError:
        return
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ValueError(f"cannot probe existing socket {path}: {exc}") from None
    finally:
        probe.close()
    raise ValueError(f"another bridge is already listening on {path}")
