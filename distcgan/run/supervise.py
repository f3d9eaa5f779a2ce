"""How a run's last launch ended, read from the run directory, and the supervisor that job
scripts put around their launcher.

Why not the launcher's exit code: it is not the ranks'. Open MPI's `mpirun` returns 1 for a job
whose ranks all exited 75 after a walltime signal (and on SIGTERM it kills the job a moment after
forwarding the signal, its ranks' last messages unprinted); jsrun and srun have their own rules.
A job script that must know "stopped cleanly, resubmit" asks the run directory instead:
`launches.jsonl` gets a line when a launch starts and `summary.json`, written by rank 0 when every
rank has finished, says which launch it describes and how each task ended.

No torch here: the supervisor runs on the batch node beside the launcher.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from distcgan.errors import UserError, say
from distcgan.mpi.exits import outcome
from distcgan.run.rundir import RunDir

# Signals a job script receives from its scheduler or terminal. The first is passed on to the
# launcher as SIGUSR1, which MPICH's and Open MPI's mpiexec, srun and jsrun forward to every rank
# and which none of them takes as an order to kill the job; a second is passed on as SIGTERM (the
# launcher ends the job: checkpoint writes are atomic, so nothing is half-written), a third as
# SIGKILL to the launcher's whole process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
ESCALATION = (signal.SIGUSR1, signal.SIGTERM, signal.SIGKILL)


def run_status(run: Path, launch: int | None = None) -> tuple[int, str]:
    """(exit code, message) of launch number `launch` of `run` (default: the last one).

    The code is the one `distcgan train` gave for it: 0 done, 3 some tasks diverged, 75 stopped
    by a signal; 1 when that launch wrote no summary (a rank crashed or was killed, or the
    launcher ended the job first).
    """
    rd = RunDir(run)
    if not rd.is_run():
        raise UserError(f"{run} is not a distcgan run directory (it has no {rd.config_file.name})")
    last = rd.count_launches()
    launch = last if launch is None else launch
    if launch == 0 or launch > last:
        return 1, f"{run}: no launch was recorded there (it failed before training began)"
    summary = rd.read_summary() if rd.has_summary() else {}
    if summary.get("launch", last) != launch:  # older summaries: no "launch"
        return 1, (
            f"{run}: launch {launch} ended without a summary (a rank crashed or was killed; "
            f"see the job's log); continue with distcgan train --run {run} --resume"
        )
    code, message = outcome(run, rd.summary_rows())
    if code == 0:
        message = f"{run}: complete, {len(summary['classes'])} task(s) done"
    return code, message


def supervise(run: Path, command: Sequence[str]) -> int:
    """Run a launcher command, pass stop signals on as SIGUSR1, and return the exit code the run
    directory records for this launch (75 means resubmit), or else the launcher's own."""
    if not command:
        raise UserError("supervise: give the launcher command after --, e.g. -- mpiexec -n 2 ...")
    rd = RunDir(run)
    before = rd.count_launches() if rd.is_run() else 0
    # Its own session: a Ctrl-C at the terminal reaches only us, and we decide what to pass on.
    try:
        child = subprocess.Popen(list(command), start_new_session=True)
    except OSError as exc:  # not found, not executable
        raise UserError(
            f"supervise: cannot start the launcher {command[0]!r} ({exc.strerror}): check the "
            "command after -- (is the launcher on PATH?)"
        ) from exc
    received = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        sig = ESCALATION[min(received, len(ESCALATION) - 1)]
        received += 1
        try:
            if sig == signal.SIGKILL:
                os.killpg(child.pid, sig)
            else:
                os.kill(child.pid, sig)
        except ProcessLookupError:
            pass
        say(
            f"distcgan supervise: {signal.Signals(signum).name} received; "
            f"sent {sig.name} to the launcher"
        )

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        launcher_rc = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if launcher_rc < 0:  # killed by a signal: the shell's convention
        launcher_rc = 128 - launcher_rc
    if rd.count_launches() <= before:  # nothing started: bad input, a missing file...
        return launcher_rc if launcher_rc != 0 else 1
    code, message = run_status(run, before + 1)
    if code == 1 and launcher_rc != 0:
        code = launcher_rc
    if code != launcher_rc:
        say(
            f"distcgan supervise: the launcher exited {launcher_rc}; the run directory says: "
            f"{message or 'done'} (exit {code})"
        )
    return code
