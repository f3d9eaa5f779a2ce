#!/usr/bin/env bash
# One lent GPU session's checks and figures (issue #26), as two commands that each end inside
# their time on the device machine (the device's python3 has torch, mpi4py, h5py, ... already;
# MPICH comes from its wheel in .whl/ when one is carried). From the repository root:
#
#   OUT=dir bash benchmarks/gpu_session.sh check [SECONDS]    # every GPU test (pytest -m gpu),
#       # then where the fused step's time goes (benchmarks/gpu_profile.py: its kernels by kind)
#   OUT=dir bash benchmarks/gpu_session.sh figures [SECONDS]  # bench: the fused step against
#       # one class at a time, the K pairs on streams in one graph and NHWC activations, at
#       # digits, imagenet32 (F = 32) and imagenet64 (F = 16); `ab` once (if .ab/ is there);
#       # the fused async step
#   OUT=dir bash benchmarks/gpu_session.sh next [SECONDS]     # for the next session: every GPU
#       # test (--cuda-graphs auto is the default since), the fused step against NHWC (D's inputs
#       # too) and batched-matmul linear layers
#   OUT=dir bash benchmarks/gpu_session.sh more [SECONDS]     # after `next`: the graphed memory
#       # at auto's K, one pair's step with --augment (#27) and under --schedule async (#29), each
#       # against the plain step, torch.compile last (next session: `next 330`, then `more 300`)
#   OUT=dir bash benchmarks/gpu_session.sh linear [SECONDS]   # after 2026-11-27 (the fused linear
#       # layers batched matmuls on GPUs): every GPU test, then the step against its grouped-
#       # convolution linear layers at digits and imagenet32, the memory at auto's K, imagenet64
#       # (ran 2026-11-28 as `linear 380`, timeout_s 410, in 319 s)
#   OUT=dir bash benchmarks/gpu_session.sh cpu [SECONDS]      # the CPU suite on every core, CUDA
#       # hidden, without the Slurm tests (the machine has no network and no Slurm), in SHARDS
#       # (default 4) serial shards each pinned to its share of the cores (`cpu 560` with
#       # timeout_s 590, alone)
#   OUT=dir bash benchmarks/gpu_session.sh both [SECONDS]     # `cpu` on all cores but 4, and
#       # beside it on those 4 every GPU test, then `augment`'s benches: the next session's one
#       # command (`both 540`, timeout_s 580)
#   OUT=dir bash benchmarks/gpu_session.sh augment [SECONDS]  # the fused step with and without
#       # --augment color,translation,cutout, graphed, at digits and imagenet32 (#27)
#   OUT=dir bash benchmarks/gpu_session.sh ab [SECONDS]       # bench on this tree against an
#       # older one unpacked in .ab/ (git archive REV distcgan | tar -x -C .ab; carry .ab)
#   OUT=dir bash benchmarks/gpu_session.sh issue80 [SECONDS]  # issue 80 (`issue80 560`,
#       # timeout_s 590): every GPU test, the candidates against today's step, profiles, one job
#       # end to end (its function below says what and how long); the same command again at
#       # once on the warm machine goes on with the parts the first call skipped
#
# SECONDS bounds the part (default 280): a step that would start too late is skipped and said.
# A lent session has 15 minutes of device time, the machine's start included (about 30 s on
# 2026-11-28), and keeps the machine 30 s between calls: the next session runs `issue80 560`
# (timeout_s 590; `make gpu-carry` first, carry [".whl"]: train needs MPICH), which leaves the
# time for a second call on the warm machine (`issue80 SECONDS` again: it goes on with the parts
# the first skipped), each call's timeout_s at SECONDS + 30 to 40. (The first session's parts,
# which measured the README's first GPU figures, are `git show 269ad1e:` this file;
# benchmarks/gpu_memory.py measures the memory count.)
# Raw output goes to $OUT (env.txt, *.log, *.jsonl), at most 8 files.
# The device's mpi4py has no MPI library of its own: without the wheel every mpiexec test of
# `cpu` fails. A checkout has no .whl/ (ignored): before the first call, `make gpu-carry`
# downloads the wheel there (13 MB, 2026-12-04), with ruff's and torch-fidelity's (11 MB) for the
# tests that run them, and the call names .whl in its carry.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
: "${OUT:?set OUT to a folder}"
OUT=$(realpath "$OUT") # ab() runs bench from another folder
part=${1:-}
budget=${2:-280}

setup() {
	date -u +%FT%TZ
	echo "commit ${COMMIT:-unknown}"
	nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
	echo "cores $(nproc)"
	if ls .whl/mpich-*.whl >/dev/null 2>&1; then
		python3 -m pip install -q --no-index --no-deps --prefix /tmp/mpi .whl/mpich-*.whl
		export PATH=/tmp/mpi/bin:$PATH LD_LIBRARY_PATH=/tmp/mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	fi
	# the test-only tools the image lacks (ruff, torch-fidelity: `make gpu-carry`)
	for w in .whl/ruff-*.whl .whl/torch_fidelity-*.whl; do
		[ -f "$w" ] && python3 -m pip install -q --no-index --no-deps "$w"
	done
	echo "ruff $(python3 -m ruff --version 2>&1 | tail -n 1); make $(command -v make || echo missing)"
	python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e . failed (PYTHONPATH used)"
	python3 -c "import torch, mpi4py; from mpi4py import MPI
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())
print('mpi4py', mpi4py.__version__, MPI.Get_library_version().splitlines()[0])
print(torch.cuda.get_device_name(0))"
}

# go SECONDS: true while at least SECONDS of the part's budget are left (else says what is skipped)
go() {
	if ((SECONDS + $1 > budget)); then
		echo "== skipped (${SECONDS}s of ${budget}s used): ${*:2}"
		return 1
	fi
	echo "== ${*:2}"
}

bench() {
	local limit=$1
	shift
	go "$limit" distcgan bench "$@" || return 0
	out=$(timeout "$limit" python3 -m distcgan bench --device-g cuda:0 "$@" 2>&1)
	echo "$out"
	tail -n 1 <<<"$out" | grep '^{' >>"$OUT/bench.jsonl" || echo "(no JSON line: rc above)"
}

# alt LIMIT FLAGS: as bench, for the fused step's alternatives that training does not run
# (--streams, --channels-last, --bmm-linear, --conv-linear, --compile: fused_alternatives.py)
alt() {
	local limit=$1
	shift
	go "$limit" fused_alternatives.py "$@" || return 0
	out=$(timeout "$limit" python3 benchmarks/fused_alternatives.py --device-g cuda:0 "$@" 2>&1)
	echo "$out"
	tail -n 1 <<<"$out" | grep '^{' >>"$OUT/bench.jsonl" || echo "(no JSON line: rc above)"
}

check() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	# every GPU test, one line each as it ends (-v), each bounded (pytest-timeout)
	go 60 pytest -m gpu &&
		timeout $((budget - 100)) python3 -m pytest -v -rfEs --tb=short -m gpu --timeout 90 \
			--durations 8 -p no:cacheprovider tests/test_gpu.py tests/test_evaluate_gpu.py 2>&1 |
		tee "$OUT/pytest_gpu.log"
	# where the fused step's time goes: its kernels by kind (benchmarks/gpu_profile.py)
	{
		for cl in "" --channels-last; do
			go 30 "profile imagenet32 F=32 $cl" && timeout 60 python3 benchmarks/gpu_profile.py \
				--device-g cuda:0 --fuse 32 --resolution 32 --batch-size 64 --channels 3 \
				--amp bf16 --steps 5 $cl
		done
		go 25 profile digits F=10 && timeout 50 python3 benchmarks/gpu_profile.py \
			--device-g cuda:0 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 20
	} 2>&1 | grep -v "^USDT\|ActivityProfiler" | tee "$OUT/profile.log"
}

# The CPU suite on this machine's cores, CUDA hidden, without the Slurm tests: the selected tests
# dealt in turn into SHARDS shards (default 4), each run as `make test` runs the suite (one
# pytest, serial) pinned to its own share of the cores (taskset), so every test sees several
# cores but never more than the shard's, and one line per test as it ends (-v), so a shard cut by
# its time still names its failures. (Run beside `check` on 2026-11-26 it slowed the GPU tests
# past their budget; under pytest-xdist with 12 workers on 16 cores on 2026-11-28 every worker's
# torch took all 16 cores, and two benches ran past run_cli's 300 s.)
cpu() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	# the cores this process may use, as taskset numbers them (not always 0..nproc-1)
	read -ra cores <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
	suite "${cores[@]}"
}

# suite CORE...: the CPU suite as `cpu` describes it, its shards dealt the CORE numbers given
suite() {
	local shards=${SHARDS:-4} per list i left cores=("$@") stop=()
	per=$((${#cores[@]} / shards))
	((per > 0)) || { echo "== skipped: ${#cores[@]} cores for $shards shards"; return 0; }
	list=$(mktemp -d)
	CUDA_VISIBLE_DEVICES= python3 -m pytest --collect-only -q -m "not gpu and not slurm" \
		-p no:cacheprovider 2>/dev/null | grep '::' >"$list/all"
	echo "$(wc -l <"$list/all") tests in $shards shards of $per cores"
	awk -v n="$shards" -v d="$list" '{ print > (d "/shard" (NR - 1) % n) }' "$list/all"
	left=$((budget - SECONDS - 10))
	((left > 30)) || { echo "== skipped: ${left}s left"; return 0; }
	# pytest-timeout (where installed) ends a shard with its summary, failures' reasons included,
	# before `timeout` would cut it
	python3 -c "import pytest_timeout" 2>/dev/null && stop=(--session-timeout $((left - 15)))
	for ((i = 0; i < shards; i++)); do
		CUDA_VISIBLE_DEVICES= taskset -c "$(IFS=,; echo "${cores[*]:i*per:per}")" \
			timeout "$left" python3 -m pytest -v --tb=short -rfE -p no:cacheprovider -W ignore \
			"${stop[@]}" --basetemp "$list/tmp$i" "@$list/shard$i" 2>&1 |
			grep -v "PytestBenchmarkWarning\|warner(" >"$OUT/cpu_shard$i.log" &
	done
	wait
	for ((i = 0; i < shards; i++)); do
		echo "shard $i: $(grep -c ' PASSED' "$OUT/cpu_shard$i.log") passed; $(tail -n 1 "$OUT/cpu_shard$i.log")"
	done
	# each test's own line (`path::test FAILED [ n%]`), also in a shard cut before its summary
	grep -hE '(^| )(FAILED|ERROR)( |$)' "$OUT"/cpu_shard*.log | sort -u | head -n 60
}

# One call for what a lent session of 15 minutes still lacks (2026-12-03): the CPU suite (#24,
# #26) in SHARDS shards on every core but the last GPU_CORES (default 4: 4 shards of 3 cores on
# 16), and beside it, on those GPU_CORES, every GPU test on today's code (#26), then the fused
# step with and without augmentation (#27), so the machine starts once. The two sides share no
# core; bench's ratio compares windows of one run on the same cores, its images/s are read with
# the shards running (`both 540`, timeout_s 580: 8 files back, env.txt, 4 shard logs,
# pytest_gpu.log, augment.log, bench.jsonl).
both() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	local keep=${GPU_CORES:-4} cores
	read -ra cores <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
	((${#cores[@]} > keep)) || { echo "both: ${#cores[@]} cores, GPU_CORES=$keep: too few" >&2; return 2; }
	suite "${cores[@]:0:${#cores[@]}-keep}" >"$OUT/suite.txt" 2>&1 &
	(
		taskset -cp "$(IFS=,; echo "${cores[*]: -keep}")" "$BASHPID" >/dev/null
		echo "GPU side on cores ${cores[*]: -keep}"
		run_gpu_tests
		augment_benches 2>&1 | tee "$OUT/augment.log"
	)
	wait
	cat "$OUT/suite.txt"
	rm -f "$OUT/suite.txt" # its lines are above; $OUT brings back at most 8 files
}

# The fused step's alternatives, each against today's fused step in the same windows: the K
# pairs unfused on streams in one graph (--streams), NHWC activations (--channels-last); 64 px;
# one round of `ab` on the digits shape; the fused async step.
figures() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	{
		alt 80 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 40 --cuda-graphs \
			--streams --channels-last --windows 5
		alt 100 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --streams --channels-last --windows 5 --steps 5
		alt 80 --fuse 16 --resolution 64 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --channels-last --windows 5 --steps 5
		rest
	} 2>&1 | tee "$OUT/figures.log"
}

# What `figures` could not end in its time (2026-11-26, 14:13): `ab` once (the older tree's
# bench starts its workers slower: 45 s was too few), the fused async step.
rest() {
	if [ -d .ab/distcgan ]; then
		for tree in "$PWD/.ab" "$PWD"; do
			echo "== ab: tree $tree"
			(cd "$tree" && bench 80 --fuse 10 --resolution 16 --batch-size 32 --channels 1 \
				--steps 40 --cuda-graphs --windows 5)
		done
	fi
	bench 90 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --schedule async --steps 40
}

# A before/after of the step (issue #26's host waits, or any change): bench on this tree and on
# an older one unpacked in .ab/ (carried: `git archive REV distcgan | tar -x -C .ab`), in turn,
# twice each, on the digits (graphed) and imagenet32 (F = 32) shapes.
ab() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	[ -d .ab/distcgan ] || { echo "no .ab/distcgan: unpack the older tree there" >&2; return 2; }
	{
		for round in 1 2; do
			for tree in "$PWD/.ab" "$PWD"; do
				echo "== round $round, tree $tree"
				( # python -m puts the working folder first on sys.path: the tree's distcgan
					cd "$tree" || exit
					bench 60 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 40 \
						--cuda-graphs
					bench 60 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
						--cuda-graphs --windows 5 --steps 5
				)
			done
		done
	} 2>&1 | tee "$OUT/ab.log"
}

# The setup, then every GPU test, one line each as it ends (-v), each bounded (pytest-timeout),
# in at most 150 s (23 tests took 123 s on an H100, 2026-11-27).
gpu_tests() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	run_gpu_tests
}

run_gpu_tests() {
	go 150 pytest -m gpu &&
		timeout 150 python3 -m pytest -v -rfEs --tb=short -m gpu --timeout 90 \
			-p no:cacheprovider tests/test_gpu.py tests/test_evaluate_gpu.py 2>&1 |
		tee "$OUT/pytest_gpu.log"
}

# What the second session left (2026-11-26): the default now graphs, the NHWC variant now
# converts D's inputs too, and --bmm-linear and --compile were written after it.
next() {
	gpu_tests
	{
		# (--bmm-linear, as it ran then: since 2026-11-28 bench refuses it on a GPU, whose
		# fused step computes so already; --conv-linear times the other kernel)
		alt 80 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 40 --cuda-graphs \
			--channels-last --conv-linear --windows 5
		alt 100 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --channels-last --conv-linear --windows 5 --steps 5
	} 2>&1 | tee "$OUT/next.log"
}

# What `next` leaves for a second command (`next` alone fills about 330 s: run it as `next 330`
# with timeout_s 370): the memory at auto's K, graphed; one pair's step (no --fuse: what bench's
# --augment and --schedule async time) on the GPU, augmented (#27's cost on a GPU) and
# asynchronous (#29's one pair alone), each against the plain step in the same windows (three
# workers each: the GPU test of a smaller async bench took 33 s); torch.compile last, in the
# mode that compiles fastest, its compile time being what may not fit (`more 300`, timeout_s 340).
more() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	{
		go 80 memory at --fuse auto, graphed && timeout 80 python3 benchmarks/gpu_memory.py --at-auto
		bench 60 --resolution 16 --batch-size 32 --channels 1 --steps 40 --windows 5 \
			--augment color,translation,cutout
		bench 60 --resolution 16 --batch-size 32 --channels 1 --steps 40 --windows 5 \
			--schedule async
		alt 90 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --compile default --windows 5 --steps 5
	} 2>&1 | tee "$OUT/more.log"
}

# What the third session (2026-11-27) left: the fused linear layers are batched matmuls on a GPU
# since (measured 1.04-1.20x as `--bmm-linear`, its matmuls then at TF32; the default leaves
# them float32): the GPU tests under that default, and the step against the grouped-convolution
# linear layers it replaced (`--conv-linear`) at the three shapes, and the memory at auto's K
# under that default (before the 64 px shape, which is skipped first when time runs short).
linear() {
	gpu_tests
	{
		alt 60 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 40 --cuda-graphs \
			--conv-linear --windows 5
		alt 70 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --conv-linear --windows 5 --steps 5
		go 80 memory at --fuse auto, graphed, batched-matmul linear layers &&
			timeout 80 python3 benchmarks/gpu_memory.py --at-auto
		alt 90 --fuse 16 --resolution 64 --batch-size 64 --channels 3 --amp bf16 \
			--cuda-graphs --conv-linear --windows 3 --steps 5
	} 2>&1 | tee "$OUT/linear.log"
}

# #27's cost on a GPU for a fused group: the fused step with --augment against the plain fused
# step in the same windows, graphed, at digits and imagenet32 (`augment 170`, timeout_s 200;
# `both` runs these beside the CPU suite).
augment() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	augment_benches 2>&1 | tee "$OUT/augment.log"
}

augment_benches() {
	bench 60 --fuse 10 --resolution 16 --batch-size 32 --channels 1 --steps 40 --cuda-graphs \
		--augment color,translation,cutout --windows 5
	bench 80 --fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 \
		--cuda-graphs --augment color,translation,cutout --windows 5 --steps 5
}

# Issue 80 in one command (`issue80 560`, timeout_s 590; 8 files back: env.txt, pytest_gpu.log,
# issue80.log, bench.jsonl, profile.log, job.log, job.json, job_summary.json). In order of what
# the issue needs most, each part skipped (and said) when it would end past SECONDS; estimated
# from the H100 records (benchmarks/results/*h100*; the machine's start, about 30 s, is not in
# SECONDS):
#   setup                                                        ~15 s
#   every GPU test, the candidates' (float64, graphed; the compiled convolutions autotuned)
#     included                                     ~180 s (24 tests took 111 s on 2026-11-28)
#   imagenet32, F = 32, bf16, graphed: today's step against --nhwc-weights and --unfold-bmm in
#     alternating windows                          ~90 s (two arms took ~80 s a shape, `next`)
#   gpu_profile.py of today's step at imagenet32, then fused_alternatives.py --profile of the
#     faster candidate there                       ~50 s (`check`: ~25 s a profile)
#   benchmarks/gpu_job.sh: 64 classes of generated images, data_prep, classifier, train 1,000
#     steps (--fuse auto --amp bf16, graphed), sample, evaluate, export, bench at its F
#                                                  ~150 s (never run on a GPU: 1,000 steps of
#                                                  64 x 64 images at ~74,000 images/s: 55 s)
#   digits, F = 10, float32, graphed: today's step against all three candidates in one run,
#     --compile-convs max-autotune-no-cudagraphs included  ~120 s (torch.compile of the whole
#     update took 62 s with its windows at imagenet32; autotuning the convolutions takes longer)
#   imagenet32 against --compile-convs max-autotune-no-cudagraphs  ~150 s
# About 755 s in all: more than one call. Each part that finishes is marked in $DONE, which
# stays while the machine is warm, so the same command again at once (`issue80 SECONDS`, with
# SECONDS the device time left less a minute, timeout_s SECONDS + 30) goes on with the parts the
# first call skipped; on a fresh machine it starts over.
DONE=/tmp/issue80.done

issue80() {
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	mkdir -p "$DONE"
	once tests issue80_tests
	once imagenet32 alt_done 110 --fuse 32 --resolution 32 --batch-size 64 --channels 3 \
		--amp bf16 --cuda-graphs --nhwc-weights --unfold-bmm --windows 5 --steps 5 2>&1 |
		tee "$OUT/issue80.log"
	once profiles profile_fastest 2>&1 | grep -v "^USDT\|ActivityProfiler" | tee "$OUT/profile.log"
	once job issue80_job
	{
		once digits alt_done 150 --fuse 10 --resolution 16 --batch-size 32 --channels 1 \
			--steps 40 --cuda-graphs --nhwc-weights --unfold-bmm \
			--compile-convs max-autotune-no-cudagraphs --windows 5
		# the last part: at least 150 s, or all that is left (the compile's time is the unknown)
		once compile32 alt_done $((budget - SECONDS > 155 ? budget - SECONDS - 5 : 150)) \
			--fuse 32 --resolution 32 --batch-size 64 --channels 3 --amp bf16 --cuda-graphs \
			--compile-convs max-autotune-no-cudagraphs --windows 5 --steps 5
	} 2>&1 | tee -a "$OUT/issue80.log"
	echo "== issue80: finished on this machine: $(ls "$DONE" | grep -v jsonl | tr '\n' ' ')"
}

# once NAME COMMAND...: COMMAND, unless a call on this (warm) machine finished NAME; NAME is
# marked finished when COMMAND returns 0
once() {
	local name=$1
	shift
	if [ -e "$DONE/$name" ]; then
		echo "== $name: finished by an earlier call on this machine (its output came back then)"
		return 0
	fi
	"$@" && touch "$DONE/$name"
}

# alt_done LIMIT FLAGS: alt, and 0 only when its JSON line came (kept in $DONE/bench.jsonl too,
# for a later call's profile)
alt_done() {
	local before after
	before=$(cat "$OUT/bench.jsonl" 2>/dev/null | wc -l)
	alt "$@"
	after=$(cat "$OUT/bench.jsonl" 2>/dev/null | wc -l)
	((after > before)) || return 1
	tail -n 1 "$OUT/bench.jsonl" >>"$DONE/bench.jsonl"
}

# every GPU test, this issue's candidates' included; 0 when pytest ended with its summary
issue80_tests() {
	go 150 pytest -m gpu || return 1
	timeout 210 python3 -m pytest -v -rfEs --tb=short -m gpu --timeout 150 -p no:cacheprovider \
		tests/test_gpu.py tests/test_evaluate_gpu.py tests/test_fused_alternatives.py 2>&1 |
		tee "$OUT/pytest_gpu.log"
	grep -qE "(passed|failed|error).* in [0-9.]+s" "$OUT/pytest_gpu.log"
}

# gpu_profile.py of today's fused step at imagenet32 (F = 32, bf16, eager), then the same of the
# candidate with the best speed-up there in bench.jsonl (fused_alternatives.py --profile)
profile_fastest() {
	local flag shape=(--device-g cuda:0 --fuse 32 --resolution 32 --batch-size 64 --channels 3
		--amp bf16 --steps 5)
	go 30 profile of the fused step at imagenet32 || return 1
	timeout 60 python3 benchmarks/gpu_profile.py "${shape[@]}" || return 1
	flag=$(python3 -c '
import json, sys
best = {}
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("fuse") == 32:
        for key in ("nhwc_weights", "unfold_bmm"):
            if key + "_speedup" in o:
                best["--" + key.replace("_", "-")] = o[key + "_speedup"]
print(max(best, key=best.get) if best else "")' "$DONE/bench.jsonl" 2>/dev/null)
	[ -n "$flag" ] || { echo "== no candidate timed at imagenet32: no second profile"; return 1; }
	go 30 profile of "$flag" at imagenet32 || return 1
	timeout 60 python3 benchmarks/fused_alternatives.py --profile "${shape[@]}" "$flag"
}

# benchmarks/gpu_job.sh in a folder outside $OUT (its run holds 64 checkpoints): its table and
# JSON line in job.log, its job.json and the run's summary.json beside, within the budget
issue80_job() {
	go 150 one job end to end: benchmarks/gpu_job.sh || return 1
	local dir=/tmp/issue80_job rc
	rm -rf "$dir"
	OUT=$dir PYTHON=python3 timeout $((budget - SECONDS)) bash benchmarks/gpu_job.sh \
		>"$OUT/job.log" 2>&1
	rc=$?
	cat "$OUT/job.log"
	echo "== gpu_job.sh: rc $rc (124: cut by the budget; its logs in $dir)"
	cp "$dir/run/summary.json" "$OUT/job_summary.json" 2>/dev/null
	cp "$dir/job.json" "$OUT/job.json" 2>/dev/null # the job's figures: 0 when they came
}

case "$part" in
check) check ;;
issue80) issue80 ;;
ab) ab ;;
cpu) cpu ;;
both) both ;;
figures) figures ;;
next) next ;;
more) more ;;
linear) linear ;;
augment) augment ;;
rest)
	setup >"$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
	rest 2>&1 | tee "$OUT/rest.log"
	;;
*)
	echo "usage: OUT=dir bash benchmarks/gpu_session.sh check|figures|rest|next|more|linear|cpu|both|augment|ab|issue80 [SECONDS]" >&2
	exit 2
	;;
esac
