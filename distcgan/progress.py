"""Progress bars for the commands that can run for minutes or hours: one bar, on rank 0.

A bar is drawn only on rank 0, only when the command's `--no-progress` was not given, and only
when stderr is a terminal: a batch job's log (stderr to a file, no TTY) gets no bar redraws, and
the commands' own lines stay readable. Leaves out: what is counted (each command says).
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm


class NoBar:
    """What a hidden bar is: the calls a bar takes, doing nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def shown(enabled: bool, rank: int = 0) -> bool:
    """Whether a bar is drawn: asked for, on rank 0, and stderr a terminal."""
    return enabled and rank == 0 and sys.stderr.isatty()


def bar(total: int, desc: str, unit: str = "it", enabled: bool = True, rank: int = 0) -> Any:
    """A tqdm bar on stderr counting to `total`, or a NoBar when none is shown (see shown)."""
    if not shown(enabled, rank):
        return NoBar()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        mininterval=2.0,
        dynamic_ncols=True,
        leave=False,
    )
