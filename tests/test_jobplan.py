"""The job templates' plan (distcgan/run/jobplan.py): classes per rank, the LSF resource sets, the
nodes a sweep's ranks fill, each bad value's one line, and `distcgan job-plan` as the templates
call it (fast: no torch)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from distcgan.errors import UserError
from distcgan.run.jobplan import JobAsk, JobPlan, plan_job


def lsf(**ask) -> JobPlan:
    return plan_job(JobAsk(scheduler="lsf", **ask))


def refused(ask: JobAsk) -> str:
    with pytest.raises(UserError) as info:
        plan_job(ask)
    return str(info.value)


def test_classes_per_rank_alone_for_local_and_slurm():
    for scheduler in ("local", "slurm"):
        assert plan_job(JobAsk(scheduler)) == JobPlan()
        assert plan_job(JobAsk(scheduler, classes_per_rank="")) == JobPlan()
        assert plan_job(JobAsk(scheduler, classes_per_rank="3")) == JobPlan(classes_per_rank=3)
        assert plan_job(JobAsk(scheduler, classes_per_rank=3)) == JobPlan(classes_per_rank=3)


@pytest.mark.parametrize("bad", ["0", "x", "-1", "2.5", " ", "+3", "٣"])
def test_a_bad_classes_per_rank_is_one_line_that_says_what_to_set(bad):
    assert refused(JobAsk(classes_per_rank=bad)) == (
        f"CLASSES_PER_RANK must be a positive number of classes, got '{bad}' "
        "(e.g. CLASSES_PER_RANK=10)"
    )


def test_classes_per_gpu_is_the_old_name():
    assert plan_job(JobAsk(classes_per_gpu="4")).classes_per_rank == 4
    assert plan_job(JobAsk(classes_per_gpu="4", classes_per_rank="4")).classes_per_rank == 4
    assert refused(JobAsk(classes_per_gpu="0")) == (
        "CLASSES_PER_GPU must be a positive number of classes, got '0' "
        "(e.g. CLASSES_PER_RANK=10, its new name)"
    )
    assert refused(JobAsk(classes_per_gpu="4", classes_per_rank="2")) == (
        "CLASSES_PER_RANK=2 and CLASSES_PER_GPU=4 disagree: set CLASSES_PER_RANK alone "
        "(CLASSES_PER_GPU is its deprecated name)"
    )


def test_summit_resource_sets_by_gpus_and_cores():
    assert lsf(nodes="4") == JobPlan(None, 12, 4, 3, 2, 7)  # 2 GPUs a rank: 3 a node
    assert lsf(nodes="4", gpus_per_rank="1").ranks == 24  # 6 a node
    cpu = lsf(nodes="4", gpus_per_rank="0")  # no division by zero: 42 cores / 7
    assert (cpu.ranks_per_node, cpu.gpus_per_rank, cpu.ranks) == (6, 0, 24)
    assert lsf(nodes="1", gpus_per_rank="1", cores_per_rank="14").ranks_per_node == 3  # cores
    assert lsf(nodes="1", gpus_per_node="4", cores_per_node="40").ranks_per_node == 2
    assert lsf(nodes="2", ranks_per_node="2").ranks == 4  # given: the sweep's layout


def test_one_rank_per_k_classes_at_most_one_a_set():
    assert lsf(nodes="334", classes="1000").ranks == 1000  # not 1,002
    assert lsf(nodes="4", classes="10").ranks == 10
    assert lsf(nodes="4", classes="1000").ranks == 12
    assert lsf(nodes="34", classes="1000", classes_per_rank="10").ranks == 100
    assert lsf(nodes="34", classes="1001", classes_per_rank="10").ranks == 101  # rounded up
    assert lsf(nodes="4", classes_per_rank="10").ranks == 2  # no CLASSES: one a set, 12
    assert lsf(nodes="4", ranks="5", classes="10").ranks == 5  # RANKS says


def test_more_ranks_than_resource_sets_is_refused():
    assert refused(JobAsk("lsf", nodes="1", ranks="4")) == (
        "RANKS=4 is more than the 3 resource sets of 1 node(s) x 3: ask for more nodes or "
        "fewer ranks"
    )
    assert lsf(nodes="1", ranks="3").ranks == 3


def test_a_node_that_holds_no_rank_is_refused():
    assert refused(JobAsk("lsf", nodes="1", gpus_per_rank="8")) == (
        "a node holds no rank: GPUS_PER_RANK=8 is more than GPUS_PER_NODE=6; ask for fewer GPUs "
        "a rank"
    )
    assert refused(JobAsk("lsf", nodes="1", cores_per_rank="43")) == (
        "a node holds no rank: CORES_PER_RANK=43 is more than CORES_PER_NODE=42; ask for fewer "
        "cores a rank"
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("nodes", "x", "NODES must be a positive number of nodes, got 'x' (e.g. NODES=4)"),
        ("ranks", "0", "RANKS must be a positive number of ranks, got '0' (e.g. RANKS=12)"),
        ("classes", "-5", "CLASSES must be a positive number of classes, got '-5' "
         "(e.g. CLASSES=1000)"),
        ("gpus_per_rank", "-1", "GPUS_PER_RANK must be 0 (CPUs only) or a positive number of "
         "GPUs, got '-1' (e.g. GPUS_PER_RANK=2)"),
        ("gpus_per_node", "0", "GPUS_PER_NODE must be a positive number of GPUs, got '0' "
         "(e.g. GPUS_PER_NODE=6)"),
        ("cores_per_rank", "0", "CORES_PER_RANK must be a positive number of cores, got '0' "
         "(e.g. CORES_PER_RANK=7)"),
        ("cores_per_node", "x", "CORES_PER_NODE must be a positive number of cores, got 'x' "
         "(e.g. CORES_PER_NODE=42)"),
        ("ranks_per_node", "0", "RANKS_PER_NODE must be a positive number of ranks, got '0' "
         "(e.g. RANKS_PER_NODE=3)"),
    ],
)  # fmt: skip
def test_each_bad_size_is_one_line(field, value, message):
    ask = {"nodes": "2", field: value}
    assert refused(JobAsk("lsf", **ask)) == message


def test_the_nodes_a_sweeps_ranks_fill():
    # LSF (Summit): 3 ranks of 2 GPUs a node, 6 of 1.
    assert (lsf(ranks=1000).nodes, lsf(ranks=1000, gpus_per_rank=1).nodes) == (334, 167)
    # Slurm: the sweep's own node (no cores known), or its --ranks-per-node.
    slurm = plan_job(JobAsk("slurm", ranks=8, gpus_per_rank=2, gpus_per_node=4))
    assert (slurm.nodes, slurm.ranks_per_node, slurm.ranks) == (4, 2, 8)
    cpu = plan_job(JobAsk("slurm", ranks=3, gpus_per_rank=0, ranks_per_node=2))
    assert (cpu.nodes, cpu.ranks) == (2, 3)
    assert refused(JobAsk("slurm", ranks=3, gpus_per_rank=0)) == (
        "cannot tell the ranks a node holds (GPUS_PER_RANK=0 and no CORES_PER_NODE): set "
        "RANKS_PER_NODE"
    )


def test_the_plan_as_shell_assignments():
    assert JobPlan().shell() == "FUSE=''\n"
    assert JobPlan(classes_per_rank=10).shell() == "FUSE='--fuse 10'\n"
    assert lsf(nodes="4", classes_per_rank="10").shell() == (
        "FUSE='--fuse 10'\nRANKS=2\nNODES=4\nRANKS_PER_NODE=3\nGPUS_PER_RANK=2\nCORES_PER_RANK=7\n"
    )


def job_plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "distcgan", "job-plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_the_templates_command_prints_assignments_and_imports_no_torch():
    result = job_plan("--scheduler", "lsf", "--nodes", "4", "--classes", "", "--ranks", "")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == ["FUSE=''", "RANKS=12", "NODES=4"]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert "distcgan.run.jobplan" in imported and "torch" not in imported
    result = job_plan("--classes-per-gpu", "2")
    assert result.stdout == "FUSE='--fuse 2'\n"
    assert "distcgan: note: CLASSES_PER_GPU is deprecated, use CLASSES_PER_RANK" in result.stderr
    result = job_plan("--classes-per-rank", "x")
    own = [x for x in result.stderr.splitlines() if not x.startswith("import time:")]
    assert (result.returncode, result.stdout) == (2, "")
    assert own == [
        "distcgan: error: CLASSES_PER_RANK must be a positive number of classes, got 'x' "
        "(e.g. CLASSES_PER_RANK=10)"
    ]
