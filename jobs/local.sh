#!/bin/bash
# distcgan on a workstation or laptop with mpiexec (no scheduler).
#
#   PRESET=digits DATA=data/digits16.h5 RUN=runs/name RANKS=2 bash jobs/local.sh
#   PRESET=digits DATA=... RUN=... RANKS=2 DRY_RUN=1 bash jobs/local.sh   # print the command only
#
# Parameters (environment): PRESET, DATA, RUN (required); RANKS (default 2); NODES (ignored: one
# node); CLASSES_PER_RANK (classes a rank trains at once as one fused pair: --fuse; default
# distcgan's auto; CLASSES_PER_GPU is its deprecated name); MPIEXEC (default: mpiexec on PATH);
# EXTRA (more distcgan flags); PYTHON (default: python on PATH).
# PRESET has no default: a preset sets the steps, batch and checkpoint interval, not only the
# resolution, so taking it from the data file's resolution would be a guess (32 px is mnist,
# cifar10, cifar100 or imagenet32).
# Rerunning the same RUN resumes it. A SIGTERM or Ctrl-C stops every rank at a checkpoint and the
# script exits 75 (see `distcgan supervise`: Open MPI's mpiexec would kill the job on SIGTERM
# and exit 1).
set -euo pipefail
fail() {  # bad input: one line, exit 2
    echo "local.sh: error: $*" >&2
    exit 2
}
PRESETS="digits mnist cifar10 cifar100 imagenet32 imagenet64 tiny"  # distcgan/config.py's PRESETS
[[ ${PRESET:-} =~ ^[[:alnum:]_]+$ && " $PRESETS " == *" $PRESET "* ]] ||
    fail "${PRESET:+unknown PRESET '$PRESET': }set PRESET to the preset of your data, one of" \
        "${PRESETS// /, } (PRESET=digits DATA=data/digits16.h5 RUN=runs/name bash jobs/local.sh)"
[ -n "${DATA:-}" ] || fail "set DATA to the HDF5 data file (DATA=/path/data.h5 bash jobs/local.sh)"
[ -n "${RUN:-}" ] || fail "set RUN to the run directory (RUN=runs/name bash jobs/local.sh)"
# glibc's malloc thresholds: raised by `train` itself (mallopt, see distcgan/train/perf.py), which
# falls back where glibc <= 2.34 refuses 1 GiB (which silently ignores a 1 GiB MALLOC_ export).
RESUME=""
[ -f "$RUN/config.json" ] && RESUME="--resume"
RANKS=${RANKS:-2}
[[ $RANKS =~ ^[0-9]+$ ]] && ((10#$RANKS > 0)) ||
    fail "RANKS must be a positive number of ranks, got '$RANKS' (e.g. RANKS=2)"
RANKS=$((10#$RANKS))
PY=${PYTHON:-python}
# A Python that cannot run distcgan (none on PATH; Debian's or RHEL's system python3; another
# environment's) is said here, once, instead of by every rank (distcgan/run/envcheck.py).
command -v "$PY" >/dev/null || fail "no program '$PY' here (PYTHON, default python): activate" \
    "the environment distcgan is installed in, or set PYTHON to that environment's python"
if ! why=$("$PY" -m distcgan.run.envcheck 2>&1); then
    missing="No module named [^)"$'\n'"]*"  # Python's reason, else the first line said
    [[ $why =~ $missing ]] && why=${BASH_REMATCH[0]} || why=${why#"${why%%[![:space:]]*}"}
    why=${why%%$'\n'*}
    fail "'$PY' cannot run distcgan (${why:-no reason given}): activate the environment" \
        "distcgan is installed in, or set PYTHON to that environment's python"
fi
# FUSE: the --fuse flag of CLASSES_PER_RANK (distcgan/run/jobplan.py; a bad value: one line, exit 2).
PLAN=$("$PY" -m distcgan job-plan --scheduler local --classes-per-rank "${CLASSES_PER_RANK:-}" \
    --classes-per-gpu "${CLASSES_PER_GPU:-}") || exit
eval "$PLAN"
CMD=("$PY" -m distcgan supervise --run "$RUN" --
     "${MPIEXEC:-mpiexec}" -n "$RANKS" "$PY" -m mpi4py -m distcgan train
     --preset "$PRESET" --data "$DATA" --run "$RUN" $RESUME $FUSE ${EXTRA:-})
if [ -n "${DRY_RUN:-}" ]; then echo "${CMD[@]}"; exit 0; fi
exec "${CMD[@]}"
