"""Per-class conversion spread over MPI ranks, written by rank 0 into one data file.

Class k (output order) is converted by rank k mod P, so every rank works at once and rank 0
receives the classes in the order the file needs them. Each sender sends its class (a small
header, then the pixels as one buffer), then waits for rank 0's reply before converting its
next one: a rank holds at most one converted class, and rank 0 holds one class at a time (the
one it converts or receives) while writing. The result is the same file on any number of ranks
(tested against one process).

Failures never leave a rank waiting: a rank that fails on a class (bad images, a bug) sends the
error in place of the class; rank 0 then answers "stop" to every rank's next message instead of
"go" and removes its temporary file, and all ranks meet in one `agree` that raises the error on
every rank (printed once, exit 2). Rank 0's own failures take the same path; a crash of rank 0
itself (not a UserError) ends the job through the entry point's MPI_Abort. Leaves out: what a
class is (`convert` is given) and the command line.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from data_prep.folder import ClassReport
from data_prep.output import Output
from distcgan.errors import UserError
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree

_HEAD, _DATA, _REPLY = 11, 12, 13  # message tags
_GO, _STOP = "go", "stop"
Convert = Callable[[int], tuple[np.ndarray, ClassReport]]


def owned(k: int, size: int) -> int:
    """The rank that converts output class k."""
    return k % size


def _convert_or_error(convert: Convert, k: int, rank: int) -> tuple[Any, str | None]:
    try:
        return convert(k), None
    except UserError as exc:
        return None, str(exc)
    except Exception as exc:  # a bug: keep the traceback on this rank, the message for rank 0
        traceback.print_exc(file=sys.stderr)
        return None, f"rank {rank} failed on class {k}: {type(exc).__name__}: {exc}"


def _send_classes(comm: Comm, convert: Convert, num_classes: int) -> None:
    """Ranks > 0: convert and send each owned class; stop at rank 0's word or on an error."""
    for k in range(comm.rank, num_classes, comm.size):
        result, error = _convert_or_error(convert, k, comm.rank)
        if error is None:
            images, report = result
            comm.send((k, None, images.shape, asdict(report)), dest=0, tag=_HEAD)
            comm.Send(np.ascontiguousarray(images), dest=0, tag=_DATA)
            del images, result
        else:
            comm.send((k, error, None, None), dest=0, tag=_HEAD)
        if comm.recv(source=0, tag=_REPLY) == _STOP or error is not None:
            return


def _receive(comm: Comm, rank: int) -> tuple[int, str | None, np.ndarray | None, dict | None]:
    k, error, shape, report = comm.recv(source=rank, tag=_HEAD)
    images = None
    if error is None:
        images = np.empty(shape, np.uint8)
        comm.Recv(images, source=rank, tag=_DATA)
    return k, error, images, report


@dataclass(frozen=True)
class Target:
    """The output of a conversion: its file, class names, resolution and source tag."""

    path: str | os.PathLike[str]
    names: Sequence[str]
    resolution: int
    source: str
    provenance: dict[str, Any] | None = None  # what made it (output.Output)


def _collect(
    comm: Comm,
    convert: Convert,
    target: Target,
    log: Callable[[str], None],
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Rank 0: write classes 0..K-1 in order (own or received); returns the class reports."""
    from distcgan.progress import bar as progress_bar

    num = len(target.names)
    waiting = [list(range(r, num, comm.size)) for r in range(comm.size)]  # not yet received
    stopped = [False] * comm.size
    reports: list[dict[str, Any]] = []
    t0 = last = time.perf_counter()
    bar = progress_bar(num, "classes", "class", progress)
    try:
        t = target
        with Output(t.path, t.names, t.resolution, 3, t.source, t.provenance) as w:
            for k in range(num):
                r = owned(k, comm.size)
                if r == 0:
                    result, error = _convert_or_error(convert, k, 0)
                    images, report = result if error is None else (None, None)
                    report = asdict(report) if report is not None else None
                else:
                    got, error, images, report = _receive(comm, r)
                    waiting[r].pop(0)
                    assert got == k, (got, k)  # each sender sends its classes in order
                    stopped[r] = error is not None
                    comm.send(_STOP if error is not None else _GO, dest=r, tag=_REPLY)
                if error is not None:
                    raise UserError(error)
                assert images is not None and report is not None  # no error: both were made
                w.add_class(k, images)
                reports.append(report)
                del images
                bar.update(1)
                if time.perf_counter() - last > 30 or k == num - 1:
                    last = time.perf_counter()
                    n = sum(x["images"] for x in reports)
                    log(
                        f"class {k + 1}/{num}: {n} images, {n / (last - t0):.0f} images/s "
                        f"on {comm.size} rank(s)"
                    )
    except UserError:
        # A bad class: every rank to the final agree, which says it once. Any other error (no
        # memory here for a class's pixels, a bug) goes to the entry point's abort instead:
        # waiting for the others could hang on a rank half-way through sending its class.
        _stop_all(comm, waiting, stopped)
        raise
    finally:
        bar.close()
    return reports


def _stop_all(comm: Comm, waiting: list[list[int]], stopped: list[bool]) -> None:
    """After a failure: each rank still sending has exactly one message on its way (its next
    class, or an error): take it and answer stop, so that every rank reaches the final agree."""
    for r in range(1, comm.size):
        if waiting[r] and not stopped[r]:
            _receive(comm, r)
            comm.send(_STOP, dest=r, tag=_REPLY)
            stopped[r] = True


def convert_classes(
    comm: Comm,
    convert: Convert,
    target: Target,
    log: Callable[[str], None] = lambda m: None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Collective: every rank calls it with the same class list. Returns every class's report
    (on every rank); raises the same AgreedError on every rank if any class failed."""
    if comm.rank != 0:
        _send_classes(comm, convert, len(target.names))
    return agree(
        comm,
        lambda: _collect(comm, convert, target, log, progress),
        root=0,
    )
