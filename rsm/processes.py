"""Whether a process is still running, for the owners of what a killed process leaves behind: the
bridge's shared-memory rings and its parent watch (`rsm.bridge.shm`), `rsm migrate`'s job lock
(`rsm.migrate.journal`)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid is running on this host. One owned by another user counts as
    alive; a zombie (killed, not yet reaped by its parent) does not, nor does a pid that is not positive
    (`kill(0, 0)` would signal our own process group)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
