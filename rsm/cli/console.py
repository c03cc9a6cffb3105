"""Consoles for the CLI's output: tables never cut a name.

On a terminal rich fits tables to its width; piped into a file or another program there is no width to
fit, so the console is made wide enough that no cell is folded or cut (`rsm store du > usage.txt` keeps
whole topic names and ids).
"""

from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 1000
# output with rules across it (the quickstart's steps) piped: rules as wide as a terminal's, not PIPE_WIDTH
RULED_PIPE_WIDTH = 100


def out_console(pipe_width: int = PIPE_WIDTH) -> Console:
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=True, width=pipe_width)
    return console


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)
