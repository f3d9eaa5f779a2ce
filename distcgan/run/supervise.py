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
from typing import Any

from distcgan.errors import UserError, say
from distcgan.run.outcome import outcome
from distcgan.run.rundir import RunDir, TaskRow

# Signals a job script receives from its scheduler or terminal. The first is passed on to the
# launcher as SIGUSR1, which MPICH's and Open MPI's mpiexec, srun and jsrun forward to every rank
# and which none of them takes as an order to kill the job; a second is passed on as SIGTERM (the
# launcher ends the job: checkpoint writes are atomic, so nothing is half-written), a third as
# SIGKILL to the launcher's whole process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
ESCALATION = (signal.SIGUSR1, signal.SIGTERM, signal.SIGKILL)
# Launcher flags that start the ranks in another folder (mpiexec's, srun's, jsrun's): the
# command's relative --run is then not supervise's, so the two are not compared.
WORKDIR_FLAGS = ("-wdir", "-wd", "--wdir", "--wd", "-D", "--chdir", "--cwd", "--working-dir")


def run_status(run: Path, launch: int | None = None) -> tuple[int, str]:
    """(exit code, message) of launch number `launch` of `run` (default: the last one).

    The code is the one `distcgan train` gave for it: 0 done, 3 some tasks diverged, 75 stopped
    by a signal; 1 when that launch wrote no summary (a rank crashed or was killed, or the
    launcher ended the job first).
    """
    rd = RunDir(run)
    if rd.is_export():
        raise UserError(f"{run} is a distcgan export, not a run directory: give the train --run")
    if not rd.is_run():
        raise UserError(f"{run} is not a distcgan run directory (it has no {rd.config_file.name})")
    last = rd.count_launches()
    launch = last if launch is None else launch
    if launch == 0 or launch > last:
        return 1, f"{run}: no launch was recorded there (it failed before training began)"
    # No summary at all: the first launch ended before rank 0 wrote one (a rank killed, the
    # launcher or the scheduler ended the job), which is not bad input.
    summary: dict[str, Any] = rd.read_summary() if rd.has_summary() else {"launch": 0}
    if summary.get("launch", last) != launch:  # older summaries: no "launch"
        return 1, (
            f"{run}: launch {launch} ended without a summary (a rank crashed or was killed; "
            f"see the job's log); continue with distcgan train --run {run} --resume"
        )
    rows = rd.summary_rows()
    code, message = outcome(run, rows)
    if code == 0:
        message = f"{run}: complete, {len(rows)} task(s) done{_phases(rows)}"
    return code, message


def _phases(rows: list[TaskRow]) -> str:
    """How a two-phase run's tasks divide (its shared phase's row has no class, beside the
    classes' rows; outcome.py tells them apart alike); "" for any other run."""
    shared = [r.task for r in rows if r.class_id is None]
    if not shared or len(rows) == 1:
        return ""
    return f": the shared phase ({shared[0]}/) and {len(rows) - 1} classes"


def _check_run(run: Path, command: Sequence[str]) -> None:
    """Refuse, before the launcher starts, a --run that supervise cannot read: a file, an export,
    or another folder than the one the command trains (`--run` in the command, where it is
    written out; a wrapper script's is not seen). Each was found only after the whole job: a
    traceback (a file), or exit 1 without a word for a job that trained elsewhere and succeeded."""
    if run.exists() and not run.is_dir():
        raise UserError(
            f"supervise: --run {run} is a file: give the run directory that the command trains"
        )
    if RunDir(run).is_export():
        raise UserError(f"supervise: --run {run} is a distcgan export, not a run directory")
    trained = None
    for i, word in enumerate(command):
        if word == "--run" and i + 1 < len(command):
            trained = command[i + 1]
        elif word.startswith("--run="):
            trained = word.split("=", 1)[1]
    moved = any(w.split("=")[0] in WORKDIR_FLAGS for w in command)  # relative paths: elsewhere
    if trained is not None and not moved and os.path.abspath(trained) != os.path.abspath(run):
        raise UserError(
            f"supervise --run {run}, but the command trains --run {trained}: give both the same "
            "run directory (supervise reads how the launch ended there)"
        )


def supervise(run: Path, command: Sequence[str]) -> int:
    """Run a launcher command, pass stop signals on as SIGUSR1, and return the exit code the run
    directory records for this launch (75 means resubmit), or else the launcher's own."""
    if not command:
        raise UserError("supervise: give the launcher command after --, e.g. -- mpiexec -n 2 ...")
    _check_run(run, command)
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
        if launcher_rc == 0:  # a job that trained elsewhere, or did not train: not a success here
            say(
                f"distcgan supervise: the launcher exited 0, but no launch was recorded in {run}: "
                f"the command must run distcgan train --run {run} (exit 1)"
            )
        return launcher_rc if launcher_rc != 0 else 1
    code, message = run_status(run, before + 1)
    if code != launcher_rc or code == 1:  # 1: the launch left no summary, whatever ended it
        say(
            f"distcgan supervise: the launcher exited {launcher_rc}; the run directory says: "
            f"{message or 'done'} (exit {code})"
        )
    return code
