"""`python -m mpi4py -m distcgan ...` (under mpiexec) or `python -m distcgan ...` (one process)."""

import sys

from distcgan.mpi.signals import hold_stop_signals

hold_stop_signals(
    sys.argv[1:]
)  # before the seconds of importing torch: a warning then must not kill us

from distcgan.cli import exit_process, main  # noqa: E402

exit_process(main())
