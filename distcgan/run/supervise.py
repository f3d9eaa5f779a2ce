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

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from distcgan.errors import UserError

# Exit codes of `train` besides 0 (done), 1 (crash) and 2 (bad input):
EXIT_DIVERGED = 3  # some tasks gave up after max_retries rollbacks; the others finished
EXIT_INTERRUPTED = 75  # stopped by a signal after checkpointing (EX_TEMPFAIL): resume the run

# Signals a job script receives from its scheduler or terminal. The first is passed on to the
# launcher as SIGUSR1, which MPICH's and Open MPI's mpiexec, srun and jsrun forward to every rank
# and which none of them takes as an order to kill the job; a second is passed on as SIGTERM (the
# launcher ends the job: checkpoint writes are atomic, so nothing is half-written), a third as
# SIGKILL to the launcher's whole process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
ESCALATION = (signal.SIGUSR1, signal.SIGTERM, signal.SIGKILL)


def outcome(run: Path, tasks: Sequence[dict[str, Any]]) -> tuple[int, str]:
    """The exit code and message of a launch whose tasks ended as `tasks` (summary.json's)."""
    stopped = [t["task"] for t in tasks if t["status"] in ("interrupted", "not_started")]
    failed = [t for t in tasks if t["status"] == "diverged"]
    if stopped:
        return EXIT_INTERRUPTED, (
            f"stopped by a signal with {len(stopped)} task(s) unfinished (checkpoints "
            f"written): continue with distcgan train --run {run} --resume"
        )
    if failed:
        return EXIT_DIVERGED, (
            f"{len(failed)} task(s) diverged and were given up "
            f"({', '.join(t['task'] for t in failed)}); the others finished. "
            f"{failed[0].get('error', '')}"
        ).rstrip()
    return 0, ""


def count_launches(run: Path) -> int:
    """How many launches have started in `run` (lines of launches.jsonl; 0 if none)."""
    try:
        return sum(1 for line in (run / "launches.jsonl").read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def run_status(run: Path, launch: int | None = None) -> tuple[int, str]:
    """(exit code, message) of launch number `launch` of `run` (default: the last one).

    The code is the one `distcgan train` gave for it: 0 done, 3 some tasks diverged, 75 stopped
    by a signal; 1 when that launch wrote no summary (a rank crashed or was killed, or the
    launcher ended the job first).
    """
    if not (run / "config.json").is_file():
        raise UserError(f"{run} is not a distcgan run directory (it has no config.json)")
    last = count_launches(run)
    launch = last if launch is None else launch
    if launch == 0 or launch > last:
        return 1, f"{run}: no launch was recorded there (it failed before training began)"
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        summary = {}
    if summary.get("launch", last) != launch:  # older summaries: no "launch"
        return 1, (
            f"{run}: launch {launch} ended without a summary (a rank crashed or was killed; "
            f"see the job's log); continue with distcgan train --run {run} --resume"
        )
    code, message = outcome(run, summary["classes"])
    if code == 0:
        message = f"{run}: complete, {len(summary['classes'])} task(s) done"
    return code, message


def supervise(run: Path, command: Sequence[str]) -> int:
    """Run a launcher command, pass stop signals on as SIGUSR1, and return the exit code the run
    directory records for this launch (75 means resubmit), or else the launcher's own."""
    if not command:
        raise UserError("supervise: give the launcher command after --, e.g. -- mpiexec -n 2 ...")
    before = count_launches(run) if (run / "config.json").is_file() else 0
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
        print(
            f"distcgan supervise: {signal.Signals(signum).name} received; "
            f"sent {sig.name} to the launcher",
            file=sys.stderr,
            flush=True,
        )

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        launcher_rc = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if launcher_rc < 0:  # killed by a signal: the shell's convention
        launcher_rc = 128 - launcher_rc
    if count_launches(run) <= before:  # nothing started: bad input, a missing file...
        return launcher_rc if launcher_rc != 0 else 1
    code, message = run_status(run, before + 1)
    if code == 1 and launcher_rc != 0:
        code = launcher_rc
    if code != launcher_rc:
        print(
            f"distcgan supervise: the launcher exited {launcher_rc}; the run directory says: "
            f"{message or 'done'} (exit {code})",
            file=sys.stderr,
            flush=True,
        )
    return code
