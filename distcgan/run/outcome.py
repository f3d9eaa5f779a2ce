"""How a launch of `train` ended, as an exit code: the codes besides 0, 1 and 2, and the policy
that picks one from how its tasks ended (summary.json's rows). `train` exits with it and the job
supervisor (supervise.py) reads it back from the run directory, so both say the same.

Leaves out: how a process ends with the code, under MPI or alone (mpi/exits.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from distcgan.run.rundir import TaskRow

# Exit codes of `train` besides 0 (done), 1 (crash) and 2 (bad input):
EXIT_DIVERGED = 3  # some tasks gave up after max_retries rollbacks; the others finished
EXIT_INTERRUPTED = 75  # stopped by a signal after checkpointing (EX_TEMPFAIL): resume the run


def outcome(run: Path, tasks: Sequence[TaskRow]) -> tuple[int, str]:
    """The exit code and message of a launch whose tasks ended as `tasks` (summary.json's)."""
    stopped = [t.task for t in tasks if t.status in ("interrupted", "not_started")]
    failed = [t for t in tasks if t.status == "diverged"]
    shared = [t for t in failed if t.class_id is None and len(tasks) > 1]
    if shared:  # a two-phase run's shared phase (all/), which every class starts from
        return EXIT_DIVERGED, (
            f"the shared phase ({shared[0].task}/) diverged and was given up, so no class was "
            f"fine-tuned: train the run again with another --seed (python -m distcgan train "
            f"--config {run / 'config.json'} --seed 1 --run {run}-2). {shared[0].error or ''}"
        ).rstrip()
    if stopped:
        phase = [t for t in tasks if t.class_id is None and len(tasks) > 1 and t.task in stopped]
        where = f" in the shared phase ({phase[0].task}/ at step {phase[0].steps})" if phase else ""
        return EXIT_INTERRUPTED, (
            f"stopped by a signal{where} with {len(stopped)} task(s) unfinished (checkpoints "
            f"written): continue with distcgan train --run {run} --resume"
        )
    if failed:
        return EXIT_DIVERGED, (
            f"{len(failed)} task(s) diverged and were given up "
            f"({', '.join(t.task for t in failed)}); the others finished. "
            f"{failed[0].error or ''}"
        ).rstrip()
    return 0, ""
