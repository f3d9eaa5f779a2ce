#!/usr/bin/env bash
# One training job end to end (issue 80): generated 32 px RGB images of JOB_CLASSES classes ->
# data_prep -> classifier train (the scoring network) -> train --preset imagenet32 --fuse auto
# --amp bf16 (fused and graphed on a GPU; checkpoints, grids and scoring at their defaults) ->
# sample -> evaluate -> export, each command timed, then bench at the job's shape; the job's
# images/s against the step's and the shares of start-up, checkpoints, grids and scoring.
# The logic is benchmarks/gpu_job.py's (read its docstring); this maps the environment onto its
# flags, so that a session script or a CPU test sets a size without a command line. From the
# repository root:
#
#   OUT=dir bash benchmarks/gpu_job.sh                     # on cuda:0: 64 classes, 1,000 steps
#   OUT=dir JOB_DEVICE=cpu JOB_CLASSES=3 JOB_PER_CLASS=40 JOB_STEPS=4 JOB_BATCH=16 JOB_AMP=off \
#       JOB_FUSE=3 JOB_SAMPLES=8 JOB_EVAL_N=30 bash benchmarks/gpu_job.sh   # a CPU smoke (tests)
#
# OUT must not exist; the job writes there (OUT/job.json, OUT/<command>.log, OUT/run/...) and
# prints a table and one JSON line. PYTHON (default python3) runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to a new folder}"
exec "${PYTHON:-python3}" benchmarks/gpu_job.py "$OUT" \
	--device "${JOB_DEVICE:-cuda:0}" \
	--classes "${JOB_CLASSES:-64}" \
	--per-class "${JOB_PER_CLASS:-600}" \
	--steps "${JOB_STEPS:-1000}" \
	--batch-size "${JOB_BATCH:-64}" \
	--amp "${JOB_AMP:-bf16}" \
	--fuse "${JOB_FUSE:-auto}" \
	--classifier-epochs "${JOB_CLASSIFIER_EPOCHS:-2}" \
	--sample-per-class "${JOB_SAMPLES:-100}" \
	--eval-n "${JOB_EVAL_N:-10000}" \
	--bench-windows "${JOB_BENCH_WINDOWS:-3}" \
	--bench-steps "${JOB_BENCH_STEPS:-5}"
