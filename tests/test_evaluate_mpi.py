"""`distcgan evaluate` under real `mpiexec -n 1..4`: the same scores as one process, the real
statistics computed over ranks, and failures that end the job."""

from __future__ import annotations

import json
import shutil
import sys

import h5py
import numpy as np
import pytest
from helpers import (
    KEYS,
    close,
    ended_promptly,
    make_samples,
    mpiexec,
    run_cli,
    run_timed,
    save_tiny,
    tiny_args,
)

from distcgan.cli import main

pytestmark = [pytest.mark.mpi, pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")]
SCORES = ("is_mean", "is_std", "fid", "precision", "recall")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, digits_file):
    """A data copy, a sample file, a scorer, and the one-process result (which fills the cache)."""
    root = tmp_path_factory.mktemp("mpi")
    data = shutil.copy(digits_file, root / "digits16.h5")
    samples = make_samples(digits_file, root / "samples.h5", per_class=15)
    net = save_tiny(root / "tiny.pt")
    args = ["evaluate", "--samples", str(samples), "--data", str(data), "--network", str(net)]
    args += ["--splits", "6", "--seed", "2"]
    one = run_cli(*args, "--json", str(root / "one.json"))
    assert one.returncode == 0, one.stderr
    return root, args, json.loads((root / "one.json").read_text())


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_mpiexec_gives_the_one_process_scores(setup, ranks):
    root, args, one = setup
    out = root / f"n{ranks}.json"
    result = run_cli(*args, "--json", str(out), ranks=ranks)
    assert result.returncode == 0, result.stderr
    got = json.loads(out.read_text())
    assert KEYS <= set(got) and got["ranks"] == ranks
    assert result.stdout.count("Inception Score") == 1  # rank 0 reports
    for key in SCORES:
        assert close(got[key], one[key]), (key, got[key], one[key])
    for k, fid in one["per_class_fid"].items():
        assert close(got["per_class_fid"][k], fid), k
    assert got["class_accuracy"] == one["class_accuracy"]
    assert one["label_shares"] and got["label_shares"] == one["label_shares"]  # summed on rank 0
    # Per-class precision/recall stay on the class's rank; the overall one gathers features.
    for key in ("per_class_precision", "per_class_recall"):
        assert got[key] == pytest.approx(one[key]), key
    # Classes are spread over the ranks as training spreads them (contiguous blocks).
    owners = [c["rank"] for c in got["classes"]]
    assert owners == sorted(owners) and len(set(owners)) == ranks


def test_real_statistics_computed_on_three_ranks_equal_one_process(setup, digits_file, tmp_path):
    root, args, one = setup
    data = shutil.copy(digits_file, tmp_path / "digits16.h5")
    args = [a if a != one["data"] else str(data) for a in args]
    result = run_cli(*args, "--json", str(tmp_path / "three.json"), ranks=3)
    assert result.returncode == 0, result.stderr
    assert "computing them for 1797 images" in result.stdout and "on 3 rank(s)" in result.stdout
    (a,) = root.glob("digits16.fid-tiny-*.h5")  # the one-process cache
    (b,) = tmp_path.glob("digits16.fid-tiny-*.h5")  # the three-rank one
    assert a.name == b.name
    with h5py.File(a) as fa, h5py.File(b) as fb:
        assert np.array_equal(fa["class_n"][...], fb["class_n"][...])
        for name in ("class_mean", "class_cov_sqrt", "mean", "cov", "cov_sqrt"):
            assert np.allclose(fa[name][...], fb[name][...], rtol=1e-6, atol=1e-9), name
    got = json.loads((tmp_path / "three.json").read_text())
    assert close(got["fid"], one["fid"])


def test_a_run_evaluated_on_two_ranks_matches_one_process(tmp_path, digits_file, setup):
    _, _, one = setup
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0", "1", "2")) == 0
    net = save_tiny(tmp_path / "tiny.pt")
    args = ["evaluate", "--run", str(run), "--n", "30", "--network", str(net), "--splits", "3"]
    r1 = run_cli(*args, "--json", str(tmp_path / "1.json"))
    r2 = run_cli(*args, "--json", str(tmp_path / "2.json"), ranks=2)
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in (1, 2))
    for key in SCORES:
        assert close(a[key], b[key]), key
    assert [c["rank"] for c in b["classes"]] == [0, 0, 1]


def test_a_failure_on_one_rank_ends_the_evaluation(tmp_path, setup):
    root, args, _ = setup
    # Rank 1 cannot read class 8 (as if the file changed after rank 0 checked it: a label that
    # disagrees with the offsets is now refused by rank 0 for every rank, before any scoring).
    script = tmp_path / "class_8_fails.py"
    script.write_text(
        "import sys\n"
        "from mpi4py import MPI\n"
        "from distcgan.cli import main\n"
        "from distcgan.errors import UserError\n"
        "from distcgan.eval.sampling import source\n"
        "from distcgan.mpi.exits import exit_process\n"
        "real = source.load_class\n"
        "def load_class(path, k, part=None):\n"
        "    if k == 8 and MPI.COMM_WORLD.rank == 1:\n"
        "        raise UserError('class 8 cannot be read (test)')\n"
        "    return real(path, k, part)\n"
        "source.load_class = load_class\n"
        "exit_process(main(sys.argv[1:]))\n"
    )
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(script), *args]
    result, job = run_timed(cmd=cmd, timeout=120)
    assert result.returncode == 2
    assert "error on rank 1 (class 8)" in result.stderr and "cannot be read (test)" in result.stderr
    assert ended_promptly(job, job.line_time("error on rank 1 (class 8)")) is None


def test_bad_evaluate_input_under_mpi_is_reported_once(setup):
    _, args, _ = setup
    result = run_cli(*args, "--n", "50", ranks=2)
    assert result.returncode == 2
    assert result.stderr.count("--n applies to --run") == 1, result.stderr
    assert "Traceback" not in result.stderr
