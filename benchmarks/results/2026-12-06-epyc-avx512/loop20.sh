#!/bin/bash
# The one-line-error tests, 20 runs in a row under each MPI, beside the suite under AVX2 kernels (#24)
cd /work/ci
F="tests/test_mpi.py tests/test_launch.py tests/test_jobs.py tests/test_supervise.py tests/test_data_prep_mpi.py tests/faults"
K="once or one_line or mismatched or naming"
for mpi in mpich openmpi openmpi4; do
  for i in $(seq 1 20); do
    case $mpi in
      mpich) out=$(.venv/bin/python -m pytest -q -p no:cacheprovider $F -m mpi -k "$K" 2>&1 | tail -1) ;;
      openmpi) out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe .venv-openmpi/bin/python -m pytest -q -p no:cacheprovider $F -m "mpi and not launcher_neutral" -k "$K" 2>&1 | tail -1) ;;
      openmpi4) out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 .venv-openmpi4/bin/python -m pytest -q -p no:cacheprovider $F -m "mpi and not launcher_neutral" -k "$K" 2>&1 | tail -1) ;;
    esac
    echo "$(date -u +%T) $mpi run $i: $out"
  done
done
