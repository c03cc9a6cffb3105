"""The bridge's listening socket: where it may live and how it comes to exist.

Why a module of its own: the socket is the bridge's only access control (anyone who can connect can
read every tiered segment), so the rules about its directory and its creation are kept in one place.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_UNIX_PATH_MAX = 107


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
