"""Child processes that cannot outlive the test run."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Sequence


def dies_with_parent(cmd: Sequence[str], sig: signal.Signals = signal.SIGTERM) -> list[str]:
    """``cmd`` wrapped so the kernel sends ``sig`` to it when the process that started it dies.

    atexit handlers and fixture finalizers do not run when pytest is killed hard (SIGKILL, a CI
    timeout); without this a broker or oracle JVM would be orphaned. Uses util-linux ``setpriv``
    (exec's the command in place: same pid); without it, the command runs unwrapped.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return list(cmd)
    return [setpriv, "--pdeathsig", sig.name.removeprefix("SIG"), "--", *cmd]
