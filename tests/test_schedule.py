"""--schedule async (ParaGAN's delayed G/D updates, train/schedule.py): the step that trains
equals the sequential reference bit for bit, D steps on the fakes G made a step earlier and G
through the D of a step earlier; sync is untouched; resume is exact; a data-parallel group stays
in step under real mpiexec; bad combinations are one line."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from helpers import events, run_cli, tiny_args

from distcgan.cli import main
from distcgan.config import tiny
from distcgan.data import load_class
from distcgan.images import to_float
from distcgan.plan import make_tasks
from distcgan.run.checkpoint import read
from distcgan.train.alone import AlonePair
from distcgan.train.pair import PairSpec, new_pair
from distcgan.train.schedule import async_reference, copy_bytes
from distcgan.train.step import Feed, StepOptions, augmenting


def _feed(digits_file, cfg, classes, conditional):
    real = torch.cat([to_float(load_class(str(digits_file), k), "cpu") for k in classes])
    labels = torch.cat([torch.full((len(load_class(str(digits_file), k)),), k) for k in classes])
    return Feed(
        real=real, labels=labels, task_classes=torch.tensor(classes), conditional=conditional,
        micro=cfg.batch_size // cfg.grad_accum, accum=cfg.grad_accum, group_rank=0,
        group_size=1, shard=False, data_seed=7, z_dim=cfg.z_dim, device_g="cpu",
    )  # fmt: skip


def _member(digits_file, cfg):
    from types import SimpleNamespace

    classes = (0,) if cfg.mode == "per-class" else (0, 1, 2)
    [task] = make_tasks(cfg.mode, classes)[:1]
    pair = new_pair(PairSpec(cfg, task, 1, 10), "cpu", "cpu")
    return SimpleNamespace(pair=pair, feed=_feed(digits_file, cfg, classes, task.conditional))


def _state(pair):
    return {
        **{f"G.{k}": v.clone() for k, v in pair.G.state_dict().items()},
        **{f"D.{k}": v.clone() for k, v in pair.D.state_dict().items()},
    }


CASES = {
    "per-class": {},
    "cgan": {"mode": "cgan"},
    "smaller D batch": {"batch_size_d": 8},
    "accumulating": {"grad_accum": 2, "batch_size_d": 8},
    "augmented, separate": {"augment": "color,translation,cutout", "d_batch": "separate",
                            "resolution": 32},
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_async_step_equals_its_sequential_reference_bit_for_bit(digits_file, case, tmp_path):
    cfg = dataclasses.replace(tiny(), schedule="async", ema_decay=0.0, **CASES[case])
    if cfg.resolution == 32:  # "separate" needs 32 px: the digits at 32 px
        digits_file = tmp_path / "d32.h5"
        cmd = [sys.executable, "-m", "data_prep", "digits", "--out", str(digits_file)]
        subprocess.run([*cmd, "--resolution", "32"], check=True, capture_output=True)
    real, ref = _member(digits_file, cfg), _member(digits_file, cfg)
    step = AlonePair(cfg, real)
    how = StepOptions.of(cfg)
    bd = cfg.batch_size_d // cfg.grad_accum
    for t in range(5):
        torch.manual_seed(100 + t)  # D's dropout masks: the same global stream for both
        a = step.step()
        torch.manual_seed(100 + t)
        p = ref.pair
        micro = ref.feed.batches(p.step, p.noise, augmenting(p, how))
        b = async_reference(p, micro, how, bd)
        p.step += 1
        assert torch.equal(a[0], b), (t, a, b)
        sa, sb = _state(real.pair), _state(ref.pair)
        assert all(torch.equal(sa[k], sb[k]) for k in sa), t
        assert all(torch.equal(x, y) for x, y in zip(real.pair.cache, ref.pair.cache))
        # Between steps D's copy is D (the one copy a step).
        assert all(
            torch.equal(x, y)
            for x, y in zip(
                real.pair.D_copy.state_dict().values(), real.pair.D.state_dict().values()
            )
        )


def test_d_steps_on_the_fakes_of_the_step_before_and_g_through_the_d_before(digits_file):
    cfg = dataclasses.replace(tiny(), schedule="async", ema_decay=0.0, d_dropout=0.0)
    m = _member(digits_file, cfg)
    step = AlonePair(cfg, m)
    step.step()  # step 0 fills the cache first
    for _ in range(3):
        G_before, D_before = copy.deepcopy(m.pair.G), copy.deepcopy(m.pair.D)
        cache_before = [x.clone() for x in m.pair.cache]
        batches = step.batches()
        # The fakes this step caches are G_{t-1}'s of this step's noise...
        expected = G_before(batches[0].z, batches[0].fake_labels).detach()
        # ...and D's loss is on the cached fakes of the step before.
        with torch.no_grad():
            joint = D_before(torch.cat([batches[0].real, cache_before[0]]))
        n = batches[0].real.shape[0]
        lr, lf = joint[:n], joint[n:]
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        loss_d = 0.5 * (bce(lr, torch.ones_like(lr)) + bce(lf, torch.zeros_like(lf)))
        stats = step.update(batches)
        assert torch.equal(m.pair.cache[0], expected)
        assert torch.allclose(stats[0, 0], loss_d, atol=1e-6)


def test_sync_is_the_paper_step_and_async_another(tmp_path, digits_file):
    runs = {s: tmp_path / s for s in ("sync", "async")}
    for s, run in runs.items():
        assert main(tiny_args(digits_file, run, "--classes", "0", "--schedule", s)) == 0
    a, b = (read(r / "class_000" / "checkpoint.pt") for r in runs.values())
    assert "async_cache" not in a and "async_cache" in b
    assert not torch.equal(a["G"]["l1.weight"], b["G"]["l1.weight"])
    assert json.loads((runs["sync"] / "config.json").read_text())["schedule"] == "sync"


def test_async_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, digits_file):
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    common = ("--classes", "2", "--mode", "cgan", "--checkpoint-every", "4", "--devices", "cpu")
    common += ("--schedule", "async", "--batch-size-d", "8")
    assert main(tiny_args(digits_file, straight, *common, "--steps", "8")) == 0
    assert main(tiny_args(digits_file, halves, *common, "--steps", "4")) == 0
    assert main(["train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress"]) == 0
    a, b = (read(r / "all" / "checkpoint.pt") for r in (straight, halves))
    assert a["step"] == b["step"] == 8
    for net in ("G", "D", "G_ema"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)
    assert all(torch.equal(x, y) for x, y in zip(a["async_cache"], b["async_cache"]))


def test_a_nan_under_async_rolls_back_and_the_class_finishes(tmp_path, digits_file, capsys):
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--classes", "0", "--schedule", "async")
    assert main([*args, "--inject-fault", "nan:0:4"]) == 0
    said = events(capsys.readouterr().out)
    assert [e["back_to"] for e in said if e["event"] == "rollback"] == [3]
    [row] = json.loads((run / "summary.json").read_text())["classes"]
    assert row["status"] == "done" and row["steps"] == 6 and row["retries"] == 1


@pytest.mark.mpi
def test_a_data_parallel_group_steps_asynchronously_and_resumes_exactly(tmp_path, digits_file):
    # Each rank caches its own slice of the group's fakes: the checkpoint holds every rank's.
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    common = ("--mode", "gan", "--classes", "0", "1", "--checkpoint-every", "4", "--d-dropout", "0")
    common += ("--schedule", "async", "--batch-size-d", "8", "--devices", "cpu")
    result = run_cli(*tiny_args(digits_file, straight, *common, "--steps", "8"), ranks=2)
    assert result.returncode == 0, result.stderr
    replicas = [e for e in events(result.stdout) if e["event"] == "replica"]
    assert len(replicas) == 2 and len({(r["g_sha256"], r["d_sha256"]) for r in replicas}) == 1
    first = run_cli(*tiny_args(digits_file, halves, *common, "--steps", "4"), ranks=2)
    assert first.returncode == 0, first.stderr
    state = read(halves / "all" / "checkpoint.pt")
    assert len(state["async_cache_ranks"]) == 2
    mine, theirs = (torch.cat(cache) for cache, _ in state["async_cache_ranks"])
    assert not torch.equal(mine, theirs)  # two slices of the group's batch
    again = run_cli("train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress",
                    ranks=2)  # fmt: skip
    assert again.returncode == 0, again.stderr
    a, b = (read(r / "all" / "checkpoint.pt") for r in (straight, halves))
    for net in ("G", "D"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)
    # On another number of ranks the group changes, which --resume refuses; told to go on
    # (--allow-regroup), the slices still do not fit: one line.
    resume = ("train", "--run", str(halves), "--resume", "--steps", "12", "--no-progress")
    other = run_cli(*resume)
    assert other.returncode == 2 and "group 2 -> 1 ranks" in other.stderr
    regrouped = run_cli(*resume, "--allow-regroup")
    assert regrouped.returncode == 2
    assert "holds the cached fakes of a group of 2 rank(s)" in regrouped.stderr


def test_the_copy_a_step_is_ds_weights_and_buffers():
    from distcgan.train.models import Discriminator

    D = Discriminator(1, 16, 0, 0.25)
    params = sum(p.numel() * 4 for p in D.parameters())
    buffers = sum(b.numel() * b.element_size() for b in D.buffers())
    assert copy_bytes(D) == params + buffers and params > 300_000


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--batch-size-d", "8"], "--batch-size-d goes with --schedule async"),
        (["--schedule", "async", "--batch-size-d", "32"], "batch_size_d 32 must be at most the"),
        (["--schedule", "async", "--sync-bn"], "--schedule async does not go with --sync-bn"),
        (["--schedule", "async", "--cuda-graphs", "on"], "does not go with --cuda-graphs on"),
        (["--schedule", "later"], "schedule must be sync or async, got 'later'"),
    ],
)
def test_bad_schedules_are_one_line_and_exit_2(tmp_path, digits_file, capsys, extra, message):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not run.exists()


def test_dry_run_shows_the_schedule(tmp_path, digits_file, capsys):
    args = tiny_args(digits_file, tmp_path / "run", "--schedule", "async", "--batch-size-d", "8")
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "schedule async: at each step D steps on 8 real images and 8 fakes G made" in out
    assert "schedule = async" in out and "batch_size_d = 8" in out
