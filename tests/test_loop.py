"""The training loop's decisions without mpiexec: the group's stop rule and finite check (a
group's peers played by a fake communicator), the rollback after a non-finite loss, and which
tasks are one class."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from distcgan.config import tiny
from distcgan.mpi.context import RankContext, TrainGroup
from distcgan.plan import ALL_CLASSES_KEY, class_seed, make_tasks
from distcgan.run.rundir import RunDir
from distcgan.train.files import TaskFiles
from distcgan.train.loop import DivergedError, rollback
from distcgan.train.pair import PairSpec, new_pair, pair_state
from distcgan.train.task import TaskState, TrainJob, task_result


class FakeComm:
    """A group's communicator whose other rank holds `peer` in every allreduce."""

    def __init__(self, peer: int) -> None:
        self.peer, self.calls = peer, 0

    def allreduce(self, value: int, op: object) -> int:
        from mpi4py import MPI

        self.calls += 1
        return min(value, self.peer) if op == MPI.MIN else max(value, self.peer)


def lone() -> TrainGroup:
    return TrainGroup(ranks=(0,), rank=0, comm=None)


def test_a_rank_alone_stops_at_once_when_asked():
    assert lone().agree_stop(True, log_step=False)
    assert not lone().agree_stop(False, log_step=True)


def test_a_group_stops_together_at_a_log_step_when_any_rank_was_asked():
    quiet = FakeComm(peer=0)
    group = TrainGroup(ranks=(0, 1), rank=0, comm=quiet)
    assert not group.agree_stop(True, log_step=False)  # between log steps: no collective
    assert quiet.calls == 0
    assert group.agree_stop(True, log_step=True)
    assert not group.agree_stop(False, log_step=True)
    asked_peer = TrainGroup(ranks=(0, 1), rank=0, comm=FakeComm(peer=1))
    assert asked_peer.agree_stop(False, log_step=True)  # the peer got the signal


def test_a_non_finite_loss_on_any_rank_of_a_group_is_seen_by_all():
    ok, nan = [0.5, 0.7, 0.1, 0.2], [math.nan, 0.7, 0.1, 0.2]
    assert lone().all_finite(ok) and not lone().all_finite(nan)
    peer_diverged = TrainGroup(ranks=(0, 1), rank=0, comm=FakeComm(peer=0))
    assert not peer_diverged.all_finite(ok)
    assert TrainGroup(ranks=(0, 1), rank=0, comm=FakeComm(peer=1)).all_finite(ok)


def _task_state(tmp_path, max_retries: int) -> tuple[TrainJob, TaskState, list[int]]:
    cfg = dataclasses.replace(tiny(), max_retries=max_retries, checkpoint_every=3)
    task = make_tasks("per-class", (2,))[0]
    ctx = RankContext(0, 1, 0, 1, "host", (task,), lone(), "cpu", "cpu", 1)
    moved: list[int] = []
    job = TrainJob(cfg, ctx, RunDir(tmp_path), data=None, advance=moved.append)
    spec = PairSpec(cfg, task, 1, 10)
    files = TaskFiles(job.run.task(task.name), cfg, job.group)
    pair = new_pair(spec, "cpu", "cpu")
    pair.step = 3
    files.save_checkpoint(pair, spec)  # the last good state
    for step in (3, 6):
        files.append_metrics({"step": step, "loss_d": 1.0})
    pair.step = 6
    t = TaskState(spec, files, pair, None, 10, 0.0, 0, torch.zeros(4), (None, None), n_sum=3)
    return job, t, moved


def test_rollback_goes_back_to_the_last_checkpoint_with_a_new_noise_seed(tmp_path, capsys):
    job, t, moved = _task_state(tmp_path, max_retries=2)
    rollback(job, t, diverged_at=6, means=[math.nan] * 4)
    assert (t.pair.step, t.pair.retries, t.n_sum) == (3, 1, 0)
    expected = torch.Generator().manual_seed(class_seed(job.cfg.seed, 2, "noise", retry=1))
    assert torch.equal(t.pair.noise.get_state(), expected.get_state())
    assert moved == [-3]  # the progress bar goes back too
    assert t.files.dir.metrics.read_text().count("\n") == 1  # the line of step 6 is dropped
    assert '"event": "rollback"' in capsys.readouterr().out
    rollback(job, t, diverged_at=6, means=[math.nan] * 4)
    assert (t.pair.step, t.pair.retries) == (3, 2)


def test_rollback_gives_up_after_max_retries(tmp_path):
    job, t, _ = _task_state(tmp_path, max_retries=0)
    with pytest.raises(DivergedError, match="class 2 diverged: loss not finite by step 6"):
        rollback(job, t, diverged_at=6, means=[math.nan, 1.0, 0.0, 0.0])
    assert t.pair.step == 6  # untouched


def test_one_class_means_a_per_class_task_even_for_a_gan_run_on_one_class():
    per_class = make_tasks("per-class", (3,))[0]
    assert (per_class.class_id, per_class.key, per_class.label) == (3, 3, "class 3")
    for mode in ("gan", "cgan"):
        (one_model,) = make_tasks(mode, (3,))
        assert one_model.class_id is None and one_model.key == ALL_CLASSES_KEY
        assert one_model.label == "task all"
        spec = PairSpec(tiny(), one_model, 1, 10)
        assert pair_state(new_pair(spec, "cpu", "cpu"), spec)["class_id"] == -1


def test_the_summary_row_of_a_gan_run_on_one_class_names_no_class(tmp_path):
    job, t, _ = _task_state(tmp_path, max_retries=1)
    job = dataclasses.replace(job, data=SimpleNamespace(class_names=[f"c{k}" for k in range(10)]))
    (one_model,) = make_tasks("gan", (2,))
    t.spec = PairSpec(job.cfg, one_model, 1, 10)
    row = task_result(job, t, "done")
    assert (row.task, row.class_id, row.name) == ("all", None, "1 class")
    t.spec = PairSpec(job.cfg, make_tasks("per-class", (2,))[0], 1, 10)
    row = task_result(job, t, "done")
    assert (row.task, row.class_id, row.name) == ("class_002", 2, "c2")


def test_an_injected_nan_hits_its_own_class_of_a_fused_group_at_its_step_and_no_other():
    """FaultyStep (faults.py) wraps the step: "nan:1:0" makes class 1's loss non-finite at step
    0 and leaves classes 0 and 2 exactly as a group without the fault steps them."""
    from helpers import member

    from distcgan.faults import Fault, FaultyStep
    from distcgan.train.fused import FusedPairs
    from distcgan.train.step import Batch

    cfg = dataclasses.replace(tiny(), channels_last=False, d_dropout=0.0)
    gen = torch.Generator().manual_seed(0)
    real, z = torch.rand(16, 3, 16, 16, generator=gen) * 2 - 1, torch.randn(16, 300, generator=gen)

    def group() -> FusedPairs:
        tasks = make_tasks("per-class", (0, 1, 2))
        members = [member(new_pair(PairSpec(cfg, t, 1, 10), "cpu", "cpu")) for t in tasks]
        for m, t in zip(members, tasks):
            m.fault_key = t.class_id
        fp = FusedPairs(cfg, 1, members, ("cpu", "cpu"))
        fp.batches = lambda: [Batch(real, None, z, None)]  # type: ignore[method-assign]
        return fp

    plain, faulty = group(), group()
    step = FaultyStep(faulty, Fault("nan", 1, 0))
    for _ in range(2):  # the fault fires at step 0 only
        want, got = plain.step(), step.step()
        assert got[1, :2].isnan().all()  # loss_d and loss_g
        assert torch.equal(got[[0, 2]], want[[0, 2]])
    for k in range(3):
        plain.store(k)
        faulty.store(k)
    for k in (0, 2):
        for net in ("G", "D"):
            mine = getattr(faulty.members[k].pair, net).state_dict()
            for name, x in getattr(plain.members[k].pair, net).state_dict().items():
                assert torch.equal(mine[name], x), (k, net, name)
    assert all(p.isnan().all() for p in faulty.members[1].pair.D.parameters())
