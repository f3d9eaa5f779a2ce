"""Shared fixtures: the digits data file, a CLI run in the background, Inception weight files;
and one hook, which checks each test's `mpi` mark against the MPI jobs it starts.
The helpers they use live in helpers.py, where test modules import them from."""

from __future__ import annotations

import os
from pathlib import Path

import helpers
import pytest
import torch
from helpers import Background
from torchvision.models import inception_v3

from distcgan.eval.metrics.inception_tf import InceptionV3TF
from distcgan.eval.metrics.networks import INCEPTION, INCEPTION_TF, WEIGHT_FILES


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test marked `mpi` starts an MPI job (mpiexec or srun) and one that starts one is marked:
    the mark picks the tests that run again under each Open MPI (`make test`), so a test that
    never launches must not run three times, and one that launches must not run once."""
    helpers.LAUNCHES.clear()
    result = yield
    marked = item.get_closest_marker("mpi") is not None
    if helpers.LAUNCHES and not marked:
        pytest.fail(f"starts {helpers.LAUNCHES[0]} but is not marked mpi: add @pytest.mark.mpi")
    if marked and not helpers.LAUNCHES:
        pytest.fail("marked mpi but starts no mpiexec or srun: drop the mark (it reruns it)")
    return result


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded digits at 16 px, written by the real converter."""
    out = tmp_path_factory.mktemp("data") / "digits16.h5"
    from data_prep.__main__ import main

    assert main(["digits", "--out", str(out), "--resolution", "16"]) == 0
    return out


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A one-node Slurm on localhost (tests/slurm_cluster.py), stopped by pid at the end.

    Without Slurm's programs the tests skip, except under CI=true, where that is a failure: CI
    installs slurm-wlm and munge (`make test`)."""
    from slurm_cluster import SlurmCluster, missing_programs

    missing = missing_programs()
    why = f"no {', '.join(missing)}: install slurm-wlm and munge (apt-get, as root)"
    if not missing and os.geteuid() != 0:
        why = "the test Slurm runs its daemons as root (SlurmUser=root): run the tests as root"
    if missing or os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm tests under CI=true: {why}")
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()  # stops what it started if it fails
    yield cluster
    cluster.stop()


@pytest.fixture
def background():
    """Start Background runs; whatever is still running at the end of the test is killed."""
    started: list[Background] = []

    def start(*args: str, ranks: int | None = None, **kw) -> Background:
        bg = Background(*args, ranks=ranks, **kw)
        started.append(bg)
        return bg

    yield start
    for bg in started:
        bg.kill()


@pytest.fixture(scope="session")
def tv_weights(tmp_path_factory) -> str:
    """A random torchvision Inception-v3 state dict, saved as torchvision's file is (with the
    auxiliary classifier's weights)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / WEIGHT_FILES[INCEPTION][0]
    torch.save(inception_v3(weights=None, aux_logits=True, init_weights=False).state_dict(), path)
    return str(path)


@pytest.fixture(scope="session")
def tf_state() -> dict[str, torch.Tensor]:
    """A random state dict in the layout of pt_inception-2015-12-05-6726825d.pth: torchvision's
    key names, 1008 outputs, no auxiliary classifier, a non-zero fc bias."""
    torch.manual_seed(1)
    state = InceptionV3TF().net.state_dict()
    state["fc.bias"] = torch.randn(1008)
    return state


@pytest.fixture(scope="session")
def tf_weights(tmp_path_factory, tf_state) -> str:
    path = tmp_path_factory.mktemp("w") / WEIGHT_FILES[INCEPTION_TF][0]
    torch.save(tf_state, path)
    return str(path)


@pytest.fixture
def exact_cpu():
    """One thread and no oneDNN: the CPU arithmetic in which a fused convolution rounds as an
    unfused one (test_fused, test_init_from_train)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.backends.mkldnn.flags(enabled=False):
        yield
    torch.set_num_threads(threads)
