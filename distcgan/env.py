"""What a run ran on: library versions, MPI library, git commit, hosts, launcher job id.

Written to RUN/env.json at every launch (and appended to RUN/launches.jsonl) so that a result can
be traced to the software and machines that produced it; `provenance` is the shorter record that
the files of the other commands carry (data files, sample files, evaluations, classifiers).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import distcgan

# Environment variables through which the common launchers and schedulers name the job.
_JOB_ID_VARS = ("LSB_JOBID", "SLURM_JOB_ID", "PBS_JOBID", "COBALT_JOBID", "FLUX_JOB_ID")


def git_commit() -> str | None:
    """The commit of the distcgan checkout, with '-dirty' when it has local changes."""
    repo = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def provenance(
    command: str, options: Any = None, argv: list[str] | None = None, stamped: bool = True
) -> dict[str, Any]:
    """What made a file that no run directory describes: the command, its resolved options (a
    dataclass or an argparse namespace), the process's command line (or `argv`), the versions
    and commit it ran with, and, where `stamped`, when and on which host. Unstamped, the same
    command of the same version gives the same record: a data file converted twice is the same
    file (the real statistics' cache goes by its SHA-256). No torch import: data_prep uses it."""
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        options = dataclasses.asdict(options)
    elif options is not None and not isinstance(options, dict):
        options = vars(options)
    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    record = {
        "command": command,
        "options": options,
        "argv": list(sys.argv if argv is None else argv),
        "distcgan": distcgan.__version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "torch": torch_version,
    }
    if stamped:
        record["time_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record["platform"] = platform.platform()
        record["host"] = platform.node()
    return record


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model ("AMD EPYC 7B13"): /proc/cpuinfo's on Linux, else what the platform
    module says ("" where neither knows)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor()


def cpu_kernels() -> str:
    """The vector instructions torch's CPU kernels use here ("AVX512", "AVX2", "DEFAULT"): with
    the CPU model, what decides the last bits of a CPU run, so the same seed trained on two CPUs
    is not the same run (bf16 on one with and one without AMX, above all)."""
    import torch  # lazy: cli.py and data_prep import env.py and start without torch

    return str(torch.backends.cpu.get_cpu_capability())


def collect_env(hosts: Sequence[str], contexts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Describe this launch; `hosts` and `contexts` are gathered from every rank by the caller."""
    import mpi4py.MPI  # lazy: it starts MPI; cli.py and data_prep import env.py before that
    import torch  # lazy: cli.py and data_prep import env.py and start without torch

    job = {var: os.environ[var] for var in _JOB_ID_VARS if var in os.environ}
    per_host: dict[str, int] = {}
    for h in hosts:
        per_host[h] = per_host.get(h, 0) + 1
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "distcgan": distcgan.__version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "mpi4py": mpi4py.__version__,
        "mpi_library": mpi4py.MPI.Get_library_version().strip().splitlines()[0],
        "mpi_standard": "{}.{}".format(*mpi4py.MPI.Get_version()),
        "ranks": len(hosts),
        "hosts": per_host,
        "launcher_job": job,
        "argv": sys.argv,
        "ranks_detail": list(contexts),
    }
