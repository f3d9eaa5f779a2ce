#!/usr/bin/env bash
# The GPU figures of fused class pairs (README, "Fused class pairs"), one part per command so each
# ends well inside ten minutes on one H100. Run from the repository root on a GPU machine:
#
#   bash benchmarks/gpu_fused.sh tests       # pytest -m gpu: graphed steps against eager ones,
#                                            # fused runs and bench --cuda-graphs on the GPU
#   bash benchmarks/gpu_fused.sh digits      # 10 digits classes fused against one pair at a
#                                            # time (16 px, batch 32), eager and graphed
#   bash benchmarks/gpu_fused.sh imagenet32  # the imagenet32 step (32 px, batch 64, RGB, bf16,
#                                            # graphed) at F = 8, 32, 64, 128: images/s and the
#                                            # fraction of the measured bf16 matmul peak
#   bash benchmarks/gpu_fused.sh async       # --schedule async against sync on one GPU (G's half
#                                            # on its own stream): one pair, D at half the batch,
#                                            # 10 digits classes fused, imagenet32 fused 32
#   bash benchmarks/gpu_fused.sh augment     # the cost of --augment color,translation,cutout
#
# Each bench prints its table and ends with one JSON line; with OUT set (a folder) the JSON lines
# are also appended to $OUT/gpu_fused.jsonl. PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

bench() {
	echo "== distcgan bench $*"
	out=$("$PYTHON" -m distcgan bench --device-g cuda:0 "$@")
	echo "$out"
	if [ -n "${OUT:-}" ]; then tail -n 1 <<<"$out" >>"$OUT/gpu_fused.jsonl"; fi
}

case "${1:-}" in
tests)
	"$PYTHON" -m pytest -q -m gpu tests/test_gpu.py tests/test_evaluate_gpu.py
	;;
digits)
	for graphs in "" --cuda-graphs; do
		bench --fuse 10 --resolution 16 --batch-size 32 --channels 1 $graphs
	done
	;;
imagenet32)
	for f in 8 32 64 128; do
		bench --fuse "$f" --resolution 32 --batch-size 64 --channels 3 --amp bf16 --cuda-graphs \
			--windows 5 --steps 5
	done
	;;
async)
	bench --resolution 16 --batch-size 32 --channels 1 --schedule async
	bench --resolution 16 --batch-size 32 --channels 1 --schedule async --batch-size-d 16
	bench --fuse 10 --resolution 16 --batch-size 32 --channels 1 --schedule async
	bench --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 --schedule async \
		--windows 5 --steps 5
	;;
augment)
	bench --resolution 16 --batch-size 32 --channels 1 --augment color,translation,cutout
	bench --resolution 32 --batch-size 64 --channels 3 --amp bf16 --augment color,translation,cutout
	;;
*)
	echo "usage: bash benchmarks/gpu_fused.sh tests|digits|imagenet32|async|augment" >&2
	exit 2
	;;
esac
