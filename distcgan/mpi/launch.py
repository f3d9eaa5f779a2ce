"""Does MPI see the job the launcher started? A pure check on the launcher's environment.

A classic failure on clusters and laptops alike: `mpiexec` of one MPI library (the system's Open
MPI, say) starting a Python whose mpi4py is built against another (PyPI's mpich). Each process
then initialises as a job of one, and `mpiexec -n 8` runs eight copies of the whole job instead
of one job on eight ranks (mpi4py only warns). Launchers tell each process the job's size in
their own variables; a world of one where they say more is that mismatch. The other way
round, a PMIx launcher (Open MPI's mpiexec) starting an MPICH built without PMIx, MPICH's
MPI_Init exits the process with an error stack before any check can run: `init_mpi` looks at
the library and the launcher first, and initialises MPI only when the two can meet.
Leaves out: anything MPI itself reports (the caller passes COMM_WORLD's size).
"""

from __future__ import annotations

import atexit
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from distcgan.errors import UserError

# Set per process by the launcher, to the number of processes it started.
SIZE_VARIABLES = (
    "PMI_SIZE",  # MPICH's hydra, Intel MPI, Slurm's srun with PMI-1/PMI-2
    "OMPI_COMM_WORLD_SIZE",  # Open MPI's mpirun, Spectrum MPI
    "MV2_COMM_WORLD_SIZE",  # MVAPICH2
    "JSM_NAMESPACE_SIZE",  # LSF's jsrun
    # srun under --mpi=pmix or none (no PMI_SIZE then). Read only inside a job step: the batch
    # script of a job has SLURM_NTASKS but no SLURM_STEP_ID, and a process it starts without
    # srun is rightly a job of one.
    "SLURM_STEP_NUM_TASKS",
)


def launcher_size(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """The first launcher variable that gives the job's size, and that size (None if none)."""
    for name in SIZE_VARIABLES:
        if name == "SLURM_STEP_NUM_TASKS" and "SLURM_STEP_ID" not in environ:
            continue
        value = environ.get(name, "")
        if value.isdigit():
            return name, int(value)
    return None


def check_world(world_size: int, environ: Mapping[str, str]) -> None:
    """Raise a UserError when MPI sees one process but the launcher started several."""
    said = launcher_size(environ)
    if world_size == 1 and said is not None and said[1] > 1:
        name, n = said
        if name == "SLURM_STEP_NUM_TASKS":
            raise UserError(
                f"srun started {n} tasks ({name}={n}) but MPI sees a job of 1: srun gave MPI no "
                "process-management interface it speaks; launch with `srun --mpi=pmi2` (pip's "
                "MPICH, most MPICH and Intel MPI builds) or the --mpi your MPI was built for "
                "(`srun --mpi=list` names the choices)"
            )
        raise UserError(
            f"the launcher started {n} processes ({name}={n}) but MPI sees a job of 1: this "
            "mpiexec belongs to another MPI library than mpi4py's (`python -m mpi4py "
            "--mpi-lib-version` names mpi4py's); launch with that library's mpiexec"
        )


def check_pmix(library: str, environ: Mapping[str, str]) -> None:
    """Raise a UserError when a PMIx launcher started this process (PMIX_RANK: Open MPI's
    mpiexec, srun --mpi=pmix) and the MPI library (`library`, MPI_Get_library_version's text) is
    an MPICH configured without PMIx, whose MPI_Init would exit with an error stack."""
    first = library.strip().splitlines()[0] if library.strip() else "?"
    configure = next((x for x in library.splitlines() if "configure" in x.lower()), "")
    if "PMIX_RANK" not in environ or not first.startswith("MPICH") or "pmix" in configure.lower():
        return
    raise UserError(
        "a PMIx launcher (Open MPI's mpiexec, or srun --mpi=pmix) started this process, and "
        f"mpi4py's MPI ({' '.join(first.split())}) is an MPICH without PMIx, which cannot join "
        "that job: launch with MPICH's mpiexec (`python -m mpi4py --mpi-lib-version` names "
        "mpi4py's library), or under Slurm with `srun --mpi=pmi2`"
    )


def init_mpi(environ: Mapping[str, str]) -> Any:
    """The MPI module, initialised (thread level multiple, finalised at exit) once the launcher
    and the library are known to meet (check_pmix). Where MPI was initialised already (a test
    process that imported it), it is returned as it is."""
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py  # lazy: the commands that never start MPI (status, job-plan) skip mpi4py

        mpi4py.rc.initialize = mpi4py.rc.finalize = False  # initialised below, after the check
        # mpi4py's own three-line warning on a mismatched launch: check_world says it in one.
        warnings.filterwarnings("ignore", "suspicious MPI execution environment", RuntimeWarning)
    from mpi4py import MPI  # lazy: loads the MPI library, once rc is set (never for status)

    if not MPI.Is_initialized():
        check_pmix(MPI.Get_library_version(), environ)
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
        atexit.register(_finalize, MPI)
    return MPI


def _finalize(mpi: Any) -> None:
    if mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
