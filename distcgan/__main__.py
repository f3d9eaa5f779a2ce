"""`python -m mpi4py -m distcgan ...` (under mpiexec) or `python -m distcgan ...` (one process)."""

from distcgan.cli import exit_process, main

exit_process(main())
