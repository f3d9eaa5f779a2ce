"""Stop requests from the scheduler: checkpoint and exit cleanly instead of being killed.

Schedulers warn a job before its walltime ends (LSF `#BSUB -wa USR1`, Slurm `--signal=USR1@300`,
and SIGTERM before SIGKILL everywhere); `mpiexec`, `srun` and `jsrun` forward the signal to every
rank. The handler only records the request: the training loop looks at it between steps, writes
a checkpoint and stops, so a write is never cut in half. A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT")
# What signal.signal takes and returns: a function, SIG_DFL/SIG_IGN, or None (a handler that was
# not installed from Python).
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class StopRequest:
    """Set by a signal handler; read by the training loop between steps."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        if signum == signal.SIGINT:  # a second Ctrl-C gets Python's usual KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.default_int_handler)


# What arrives before the training loop listens. A scheduler's warning can come while a rank is
# still importing torch (Slurm warns at its first check when the lead exceeds the time limit) or
# after training, while rank 0 writes the summary; Python's default action for SIGUSR1/SIGUSR2
# ends the rank there, and a job that was told to stop and requeue then fails instead.
_EARLY = StopRequest()


def _hold(signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGTERM and _EARLY.signal_name == "SIGTERM":
        # A second SIGTERM (`kill PID` again on a rank stuck starting up): end as without us.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _EARLY._handle(signum, frame)


def hold_stop_signals(argv: list[str]) -> None:
    """For `train` (argv[0]), from now on record SIGTERM, SIGUSR1 and SIGUSR2 instead of dying.

    Called first thing by `python -m distcgan` and the `distcgan` script (before torch is
    imported). The training loop's handlers take over what arrived: a rank that has trained
    nothing yet then stops before its first step (its tasks not started, nothing lost) and the
    job exits 75; `restore_handlers` comes back to these. A second SIGTERM still ends the
    process; Ctrl-C keeps Python's usual KeyboardInterrupt. Other commands do not look for a stop
    request, so they keep the default actions.
    """
    if argv[:1] != ["train"]:
        return
    for name in STOP_SIGNALS:
        if name != "SIGINT":
            signal.signal(getattr(signal, name), _hold)


def install_stop_handlers() -> tuple[StopRequest, dict[int, Handler]]:
    """Route the stop signals to a new StopRequest; returns it and the handlers it replaced.
    A stop signal that `hold_stop_signals` recorded before this counts as already requested."""
    stop = StopRequest()
    stop.signal_name = _EARLY.signal_name
    previous: dict[int, Handler] = {}
    for name in STOP_SIGNALS:
        signum = getattr(signal, name)
        previous[signum] = signal.signal(signum, stop._handle)
    return stop, previous


def restore_handlers(previous: dict[int, Handler]) -> None:
    """Put back the handlers install_stop_handlers replaced. One that Python did not install
    (signal.signal reports it as None) cannot be put back from Python: the default action is."""
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)
