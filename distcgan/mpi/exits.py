"""How a process ends, normally or after an error, under MPI or alone (no torch import:
`data_prep` uses it too).

`abort` is for an error that only this rank has: it prints the one line and ends every rank with
MPI_Abort, so no rank is left waiting in a collective. `exit_process` is for the normal end and
for an error that every rank reached together (an agreed check), which needs no abort.
Leaves out: which code `train` ends with (run/outcome.py).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import NoReturn

from distcgan.errors import say
from distcgan.mpi.comm import Comm


def abort(comm: Comm, message: str, code: int) -> int:
    """Print `message` and, with several ranks, end them all with `code` (returns it alone)."""
    say(message)
    sys.stdout.flush()
    if comm.size > 1:
        # MPI_Abort kills every process at once, and the launcher may drop output still on its
        # way: give it a moment to forward this rank's last lines first.
        time.sleep(0.5)
        comm.Abort(code)  # ends every rank: none is left waiting in a collective
    return code


def exit_process(code: int) -> NoReturn:
    """End the process with `code`. A failure that every rank reached together (code 2 from an
    agreed error, or a code that rank 0 broadcast) finalises MPI and exits directly: exiting with
    an error under `python -m mpi4py` would instead call MPI_Abort on every rank, with a message
    from each. Every rank that calls this with a non-zero code has the same code."""
    if code == 0:
        sys.exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        os._exit(code)  # also skips HDF5's exit-time close of a file a failed write left open
    rank, size = mpi.COMM_WORLD.rank, mpi.COMM_WORLD.size
    open_mpi = "Open MPI" in mpi.Get_library_version()
    mpi.Finalize()
    if not open_mpi:
        # MPICH (and its derivatives) finish PMI in a C exit hook, not in MPI_Finalize. A process
        # that skips it (os._exit) looks to hydra like a crash: it SIGKILLs the ranks still
        # running, and one killed on its way out made mpiexec return 9, not 2 (once in CI, in
        # tests/test_data_prep_mpi.py; tests/test_mpi.py makes one rank late). So leave through
        # C's exit(): the C hooks run, Python's do not.
        ctypes.CDLL(None).exit(code)
    if size > 1:
        # Open MPI's mpiexec ends the job when the first process exits non-zero, and sends its
        # end to the processes still running; one that has finalised but not yet exited can no
        # longer be reached, and PMIx printed "PMIX ERROR: PMIX_ERR_UNREACH" (1 run in 15 of 2
        # ranks with other load; tests/test_data_prep_mpi.py). So only rank 0 carries the code,
        # once the others have had time to exit 0: mpiexec returns the first non-zero code.
        if rank != 0:
            os._exit(0)
        time.sleep(0.5)
    os._exit(code)  # also skips HDF5's exit-time close of a file a failed write left open
