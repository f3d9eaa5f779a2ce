"""The frame every MPI entry point runs in (`distcgan` in cli.py, `python -m data_prep`): the
world communicator, the launcher check, the argument parser's errors, and the failure policy.

Failure policy (no hangs, no tracebacks from every rank):
- bad input found by a collective check (an AgreedError, argv included: it is the same on
  every rank): every rank stops together, one rank prints one line, exit code 2;
- an error on one rank only (one class diverged, a file vanished, a bug): that rank prints what
  happened, naming its rank (and class), and aborts the whole MPI job (exit code 2 for bad
  input, 1 otherwise), so no other rank waits for it forever.
No torch here: `data_prep` uses it too.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from distcgan.errors import AgreedError, ClassFailure, UserError, say
from distcgan.mpi.comm import Comm
from distcgan.mpi.exits import abort
from distcgan.mpi.launch import check_world, init_mpi


class Parser(argparse.ArgumentParser):
    """A parser for argv that is the same on every rank: every rank fails here together, so an
    error is one line, printed once (an AgreedError), instead of a usage wall from each rank."""

    def error(self, message: str) -> NoReturn:
        raise AgreedError(f"{message} (see {self.prog} --help)")


def run_mpi(prog: str, body: Callable[[Comm], int], rank_in_errors: bool = True) -> int:
    """Collective over COMM_WORLD: `body(comm)`'s exit code, or the failure policy's.

    `prog` starts every error line; `rank_in_errors` names the rank in the line of a bad input
    found by one rank alone of several ("error on rank 3: ..."; a process alone, and data_prep's
    one-process errors, say only "error: ..."). A class's failure names its rank and class.
    """
    try:
        MPI = init_mpi(os.environ)
    except UserError as exc:  # before MPI: every process is on its own, and says so
        say(f"{prog}: error: {exc}")
        return 2
    comm = MPI.COMM_WORLD
    where = f"rank {comm.rank}"
    try:
        check_world(comm.size, os.environ)
        return body(comm)
    except AgreedError as exc:
        if comm.rank == exc.reporter:
            say(f"{prog}: error: {exc}")
        return 2
    except ClassFailure as exc:
        where = f"rank {comm.rank} ({exc.where})"
        if isinstance(exc.cause, UserError):
            return abort(comm, f"{prog}: error on {where}: {exc.cause}", 2)
        traceback.print_exception(exc.cause, file=sys.stderr)
        return abort(comm, f"{prog}: {where} failed: {type(exc.cause).__name__}: {exc.cause}", 1)
    except UserError as exc:
        # A process alone (generate, bench, a one-process train) has no rank worth naming.
        said = f"error on {where}" if rank_in_errors and comm.size > 1 else "error"
        return abort(comm, f"{prog}: {said}: {exc}", 2)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return abort(comm, f"{prog}: {where} failed: {type(exc).__name__}: {exc}", 1)
