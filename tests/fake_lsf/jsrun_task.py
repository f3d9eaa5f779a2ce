"""One task of the jsrun stand-in: take this rank's resource-set view (lsf_rules.Task.env) from
the step's plan, register the pid for signal propagation, and become the program (exec)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    step, program = Path(argv[0]), argv[2:]  # argv[1] == "--"
    rank = int(os.environ["PMI_RANK"])  # mpich's hydra numbers the processes it starts
    env = json.loads((step / "tasks.json").read_text())[rank]
    omp = {"OMP_NUM_THREADS": str(len(env["FAKE_JSRUN_CPUS"].split(",")))}
    os.environ.update({**omp, **os.environ, **env})  # OMP_NUM_THREADS only where unset
    (step / "pids" / str(rank)).write_text(str(os.getpid()))
    os.execvp(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
