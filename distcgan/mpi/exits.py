"""How an entry point ends after an error, under MPI or alone (no torch import: `data_prep`
uses it too).

`abort` is for an error that only this rank has: it prints the one line and ends every rank with
MPI_Abort, so no rank is left waiting in a collective. `exit_process` is for the normal end and
for an error that every rank reached together (an agreed check), which needs no abort.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, NoReturn


def abort(comm: Any, message: str, code: int) -> int:
    """Print `message` and, with several ranks, end them all with `code` (returns it alone)."""
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    if comm.size > 1:
        # MPI_Abort kills every process at once, and the launcher may drop output still on its
        # way: give it a moment to forward this rank's last lines first.
        time.sleep(0.5)
        comm.Abort(code)  # ends every rank: none is left waiting in a collective
    return code


def exit_process(code: int) -> NoReturn:
    """End the process with `code`. A failure that every rank reached together (code 2 from an
    agreed error) finalises MPI and exits directly: exiting with an error under
    `python -m mpi4py` would instead call MPI_Abort on every rank, with a message from each."""
    if code == 0:
        sys.exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(code)  # also skips HDF5's exit-time close of a file a failed write left open
