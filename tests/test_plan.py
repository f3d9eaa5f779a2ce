"""The pure plans: classes to ranks, devices, threads and seeds."""

from __future__ import annotations

import pytest

from distcgan.errors import UserError
from distcgan.plan import (
    Task,
    assign_tasks,
    check_devices,
    class_seed,
    make_tasks,
    plan_devices,
    threads_for_rank,
)


def _tasks(plans):
    return [p.tasks for p in plans]


def test_one_class_per_rank_when_ranks_equal_classes():
    plans = assign_tasks(4, 4)
    assert _tasks(plans) == [(0,), (1,), (2,), (3,)]
    assert [p.group for p in plans] == [(0,), (1,), (2,), (3,)]


def test_balanced_contiguous_blocks_when_fewer_ranks():
    assert _tasks(assign_tasks(10, 2)) == [(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)]
    assert _tasks(assign_tasks(10, 3)) == [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]


@pytest.mark.parametrize("k", [1, 2, 7, 10, 100, 1000])
@pytest.mark.parametrize("r", [1, 2, 3, 6, 7])
def test_every_task_once_and_sizes_differ_by_at_most_one(k, r):
    if r > k:
        return
    plans = assign_tasks(k, r)
    assert len(plans) == r and all(p.group == (i,) for i, p in enumerate(plans))
    assert [t for p in plans for t in p.tasks] == list(range(k))
    sizes = [len(p.tasks) for p in plans]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_more_ranks_than_classes_makes_class_groups():
    plans = assign_tasks(2, 4)  # 2 classes on 4 ranks: a group of 2 per class
    assert _tasks(plans) == [(0,), (0,), (1,), (1,)]
    assert [p.group for p in plans] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    uneven = assign_tasks(10, 25)  # the first 25 % 10 = 5 classes get one rank more
    sizes = [len({r for r, p in enumerate(uneven) if p.tasks == (t,)}) for t in range(10)]
    assert sizes == [3, 3, 3, 3, 3, 2, 2, 2, 2, 2]
    assert all(uneven[r].group[0] <= r <= uneven[r].group[-1] for r in range(25))


@pytest.mark.parametrize("k, r", [(1, 5), (10, 40), (1000, 2000), (3, 7)])
def test_groups_cover_every_rank_once(k, r):
    plans = assign_tasks(k, r)
    groups = {p.group for p in plans}
    assert sorted(rank for g in groups for rank in g) == list(range(r))
    assert {p.tasks[0] for p in plans} == set(range(k))


def test_no_classes_is_an_error():
    with pytest.raises(UserError, match="no classes"):
        assign_tasks(0, 1)


def test_tasks_per_mode():
    assert make_tasks("per-class", (2, 5)) == [Task("class_002", (2,)), Task("class_005", (5,))]
    assert make_tasks("gan", (2, 5)) == [Task("all", (2, 5))]
    assert make_tasks("cgan", (2, 5)) == [Task("all", (2, 5), conditional=True)]
    assert Task("class_005", (5,)).key == 5 and Task("all", (2, 5)).key > 10**9


def test_devices_cpu_without_gpus():
    assert plan_devices(0, 2, 0, shared=True) == ("cpu", "cpu")


def test_devices_two_per_rank_when_node_ranks_share_all_gpus():
    # Summit node seen by 3 ranks with all 6 GPUs visible: G on 2l, D on 2l+1.
    assert [plan_devices(lr, 3, 6, shared=True) for lr in range(3)] == [
        ("cuda:0", "cuda:1"),
        ("cuda:2", "cuda:3"),
        ("cuda:4", "cuda:5"),
    ]


def test_devices_one_per_rank_when_fewer_than_two_each():
    assert [plan_devices(lr, 6, 6, shared=True) for lr in range(6)][5] == ("cuda:5", "cuda:5")
    assert plan_devices(2, 4, 6, shared=True) == ("cuda:2", "cuda:2")


def test_devices_ranks_share_a_gpu_when_fewer_gpus_than_ranks():
    assert [plan_devices(lr, 2, 1, shared=True) for lr in range(2)] == [
        ("cuda:0", "cuda:0"),
        ("cuda:0", "cuda:0"),
    ]


def test_devices_own_pair_under_resource_sets():
    # jsrun -g2 / srun --gpus-per-task=2: each rank sees only its two GPUs as 0 and 1.
    assert plan_devices(2, 3, 2, shared=False) == ("cuda:0", "cuda:1")
    assert plan_devices(1, 6, 1, shared=False) == ("cuda:0", "cuda:0")


def test_device_override():
    assert plan_devices(0, 1, 4, True, "cpu") == ("cpu", "cpu")
    assert plan_devices(0, 1, 4, True, "cuda:3") == ("cuda:3", "cuda:3")
    assert plan_devices(0, 1, 4, True, "cuda:2,cuda:0") == ("cuda:2", "cuda:0")


def test_device_override_beyond_visible_gpus_is_an_error():
    with pytest.raises(UserError, match="asks for cuda:1 but rank sees 1 GPU"):
        plan_devices(0, 1, 1, True, "cuda:0,cuda:1")
    with pytest.raises(UserError, match="asks for cuda:0 but rank sees 0 GPU"):
        plan_devices(0, 1, 0, True, "cuda:0")


def test_threads_divide_shared_cores_and_keep_bound_ones():
    assert threads_for_rank(own_cpus=2, node_cpus=2, local_size=2) == (1, None)  # mpiexec -n 2
    assert threads_for_rank(own_cpus=2, node_cpus=2, local_size=5) == (1, None)  # never zero
    assert threads_for_rank(own_cpus=42, node_cpus=42, local_size=3) == (14, None)
    assert threads_for_rank(own_cpus=7, node_cpus=21, local_size=3) == (7, None)  # jsrun -c 7
    assert threads_for_rank(own_cpus=8, node_cpus=8, local_size=2, override=3) == (3, None)


def test_oversubscribing_threads_are_lowered_with_a_warning():
    threads, warning = threads_for_rank(own_cpus=2, node_cpus=2, local_size=2, override=4)
    assert threads == 1
    assert "--threads 4 x 2 ranks on this node exceeds its 2 cores: using 1" in warning
    assert threads_for_rank(own_cpus=2, node_cpus=2, local_size=1, override=2) == (2, None)


def test_class_seed_depends_on_run_seed_class_and_stream_only():
    assert class_seed(0, 3, "init") == class_seed(0, 3, "init")
    seeds = {
        class_seed(s, k, st)
        for s in (0, 1)
        for k in range(50)
        for st in ("init", "noise", "data", "fixed", "sample")
    }
    assert len(seeds) == 2 * 50 * 5
    assert all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize(
    "spec", ["cuda:00", "cuda:01", "cpu\n", "cuda:1\n", "cuda:\u0663", "gpu", "cuda:"]
)
def test_device_spellings_torch_refuses_are_refused_in_one_line(spec):
    """What torch.device would refuse with a traceback: a leading zero, a trailing newline, a
    digit that is not ASCII."""
    with pytest.raises(UserError, match="is not understood: use auto, cpu or cuda:N"):
        check_devices(spec, pair=False)


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:10"])
def test_device_spellings_torch_takes_are_taken(spec):
    check_devices(spec, pair=False)
