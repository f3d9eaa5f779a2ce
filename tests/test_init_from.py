"""distcgan/train/init_from.py, the groundwork of issue 81's --init-from and --freeze-d: reading
the final pair of a finished gan run (tiny runs made with the real CLI), refusing what cannot
serve as a start (an export, an unfinished, diverged or damaged run, another mode or shape), each
by its message, loading a start into a fresh per-class pair, and D's parameters to freeze."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import REPO, run_cli, tiny_args

from distcgan.errors import UserError
from distcgan.plan import make_tasks
from distcgan.run import checkpoint
from distcgan.train.init_from import (
    check_start,
    d_blocks,
    frozen_d_parameters,
    read_start,
    start_pair,
)
from distcgan.train.models import Discriminator
from distcgan.train.pair import PairSpec, new_pair

GAN = ("--mode", "gan", "--classes", "0", "1", "--steps", "4")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits_file):
    """A gan run stopped by SIGTERM at step 2 (kept as `stopped`), and the same run finished
    with the command its refusal gives (`finished`)."""
    root = tmp_path_factory.mktemp("init_from")
    run = root / "gan"
    stop = run_cli(*tiny_args(digits_file, run, *GAN, "--inject-fault", "term:-1:2"))
    assert stop.returncode == 75, stop.stderr
    shutil.copytree(run, root / "stopped")
    resume = run_cli("train", "--run", str(run), "--resume", "--no-progress")
    assert resume.returncode == 0, resume.stderr
    return {"finished": run, "stopped": root / "stopped"}


def _refusal(path) -> str:
    with pytest.raises(UserError) as err:
        read_start(path)
    return str(err.value)


def test_the_start_is_the_final_checkpoint_of_the_gan_run(runs):
    run = runs["finished"]
    start = read_start(run)
    final = checkpoint.read(run / "all" / "checkpoint.pt")
    assert start.step == final["step"] == 4 and start.cfg.mode == "gan" and start.channels == 1
    for role in ("G", "D", "G_ema"):
        got, want = getattr(start, role), final[role]
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), role
    assert not torch.equal(start.G_ema["l1.weight"], start.G["l1.weight"])  # two networks


def test_an_unfinished_run_is_refused_and_the_hint_finishes_it(runs):
    stopped = runs["stopped"]
    assert _refusal(stopped) == (
        f"--init-from {stopped} has not finished (interrupted at step 3): finish it with "
        f"python -m distcgan train --run {stopped} --resume"
    )
    # The fixture's `finished` is this run after that command.
    assert read_start(runs["finished"]).step == 4


def test_a_diverged_or_never_summed_up_or_damaged_run_is_refused(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["finished"], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["classes"][0]["status"] = "diverged"
    (run / "summary.json").write_text(json.dumps(summary))
    assert _refusal(run) == (
        f"--init-from {run} diverged (its pair was given up after non-finite losses): start "
        "from another gan run"
    )
    (run / "summary.json").unlink()  # a first launch that never ended
    assert _refusal(run) == (
        f"--init-from {run} has not finished (no summary.json: its first launch did not end): "
        f"finish it with python -m distcgan train --run {run} --resume"
    )
    shutil.copy(runs["finished"] / "summary.json", run / "summary.json")
    final = run / "all" / "checkpoint.pt"
    data = bytearray(final.read_bytes())
    data[-10] ^= 0xFF  # a flipped byte: the previous checkpoint (step 3) is the newest intact
    final.write_bytes(bytes(data))
    assert _refusal(run) == (
        f"--init-from {run}: its final checkpoint (step 4) in {run / 'all'} is missing or "
        "damaged (the newest intact one: 3): start from another gan run, or train this one again"
    )


def test_what_is_not_a_gan_run_is_refused(runs, tmp_path):
    assert _refusal(tmp_path / "nowhere") == (
        f"--init-from {tmp_path / 'nowhere'} does not exist: give the run directory of a "
        "finished distcgan train --mode gan"
    )
    assert _refusal(tmp_path) == (
        f"--init-from {tmp_path} is not a distcgan run directory (no config.json): give the "
        "run directory of a finished distcgan train --mode gan"
    )
    other = tmp_path / "per-class"
    shutil.copytree(runs["finished"], other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "mode": "per-class"}))
    message = _refusal(other)
    assert message.startswith(
        f"--init-from {other} is a --mode per-class run; a per-class run starts from the one "
        "unconditional pair of a --mode gan run: train one with python -m distcgan train --mode "
        "gan --preset tiny --data "
    ), message


def test_an_export_is_refused_and_names_its_run(runs, tmp_path):
    out = tmp_path / "export"
    done = run_cli("export", "--run", str(runs["finished"]), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").is_file()
    message = _refusal(out)
    assert message == (
        f"--init-from {out} is an export (distcgan export): it holds one generator and no "
        f"discriminator, and a fine-tune starts from both: give --init-from {runs['finished']}"
    )
    assert read_start(message.rsplit("--init-from ", 1)[1]).step == 4  # the hint works


def _per_class(start, **changes):
    return dataclasses.replace(start.cfg, **{"mode": "per-class", **changes})


def test_a_start_of_another_shape_is_refused_and_the_hint_trains_one_that_fits(runs, tmp_path):
    start = read_start(runs["finished"])
    check_start(start, _per_class(start), 1)  # the same shapes: taken
    with pytest.raises(UserError) as err:
        check_start(start, _per_class(start), 3)
    assert str(err.value).startswith(
        f"--init-from {runs['finished']} is a gan run of another architecture (channels 1 there, "
        "3 here): start from a gan run of this run's data and preset: python -m distcgan train "
    )
    for changes, said in (
        ({"resolution": 32}, "resolution 16 px there, 32 px here"),
        ({"d_bn_eps": 1e-5}, "d_bn_eps 0.8 there, 1e-05 here"),
        ({"mode": "cgan"}, "--init-from starts the pairs of --mode per-class, not --mode cgan"),
    ):
        cfg = _per_class(start, **changes)
        with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
            check_start(start, cfg, 1)
    # z of 64: the message's command trains a gan run that a per-class run of z 64 takes.
    small_z = _per_class(start, z_dim=64)
    with pytest.raises(UserError) as err:
        check_start(start, small_z, 1)
    message = str(err.value)
    assert "(z_dim 100 there, 64 here)" in message, message
    command = shlex.split(message.split("data and preset: ", 1)[1])
    assert command[:4] == ["python", "-m", "distcgan", "train"]
    done = subprocess.run(
        [sys.executable, *command[1:], "--steps", "2", "--no-progress"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    check_start(read_start(command[command.index("--run") + 1]), small_z, 1)


def test_layers_of_another_shape_are_refused_by_name(runs):
    start = read_start(runs["finished"])
    D = dict(start.D, **{"adv_layer.weight": torch.zeros(1, 7)})
    with pytest.raises(UserError) as err:
        check_start(dataclasses.replace(start, D=D), _per_class(start), 1)
    assert "(D.adv_layer.weight (1, 7) there, (1, 128) here)" in str(err.value)


@pytest.mark.parametrize("ema_decay, schedule", [(0.999, "sync"), (0.0, "async")])
def test_a_fresh_pair_takes_the_start_and_keeps_its_own_adam_and_random_streams(
    runs, ema_decay, schedule
):
    start = read_start(runs["finished"])
    cfg = _per_class(start, ema_decay=ema_decay, schedule=schedule)
    spec = PairSpec(cfg, make_tasks("per-class", (1,))[0], 1, 2)
    fresh = new_pair(spec, "cpu", "cpu")
    after_fresh = torch.get_rng_state()
    pair = new_pair(spec, "cpu", "cpu")
    start_pair(pair, start)
    assert torch.equal(torch.get_rng_state(), after_fresh)  # loading draws nothing
    assert torch.equal(pair.noise.get_state(), fresh.noise.get_state())
    nets = {"G": pair.G, "D": pair.D, "G_ema": pair.G_ema, "D_copy": pair.D_copy}
    want = {"G": start.G, "D": start.D, "G_ema": start.G_ema, "D_copy": start.D}
    for role, net in nets.items():
        if net is None:
            continue
        got = net.state_dict()
        assert all(torch.equal(got[k], want[role][k]) for k in got), role
    assert (pair.G_ema is None) == (ema_decay == 0) and (pair.D_copy is None) == (
        schedule == "sync"
    )
    assert pair.opt_g.state_dict()["state"] == {} and pair.opt_d.state_dict()["state"] == {}
    assert pair.step == 0


def test_a_start_without_a_moving_average_gives_g_s_weights_to_the_pair_s(runs):
    start = dataclasses.replace(read_start(runs["finished"]), G_ema=None)
    spec = PairSpec(_per_class(start), make_tasks("per-class", (0,))[0], 1, 2)
    pair = new_pair(spec, "cpu", "cpu")
    start_pair(pair, start)
    assert pair.G_ema is not None
    assert all(torch.equal(v, start.G[k]) for k, v in pair.G_ema.state_dict().items())


# ---- FreezeD -------------------------------------------------------------------------------


@pytest.mark.parametrize("fuse, labels", [(1, 0), (3, 0), (1, 10)])
def test_the_first_n_blocks_parameters_are_those_of_d_s_first_n_convolutions(fuse, labels):
    D = Discriminator(1, 16, labels, fuse=fuse)
    assert len(d_blocks(D)) == 4
    names = {id(p): n for n, p in D.named_parameters()}
    # Block 1: its convolution alone (no BatchNorm); blocks 2-4: convolution and BatchNorm.
    convs = [i for i, m in enumerate(D.model) if isinstance(m, torch.nn.Conv2d)]
    assert convs == [0, 3, 7, 11]
    expected = [[], ["model.0.weight", "model.0.bias"]]
    for i in convs[1:]:  # the convolution at i, its BatchNorm at i + 3
        block = [f"model.{j}.{w}" for j in (i, i + 3) for w in ("weight", "bias")]
        expected.append([*expected[-1], *block])
    for n, want in enumerate(expected):
        assert [names[id(p)] for p in frozen_d_parameters(D, n)] == want, n
    every = [n for n, _ in D.named_parameters()]
    assert [names[id(p)] for p in frozen_d_parameters(D, 4)] == every[:-2]  # all but the head
    assert every[-2:] == ["adv_layer.weight", "adv_layer.bias"]


@pytest.mark.parametrize("n", [5, -1])
def test_freezing_beyond_d_s_depth_is_refused(n):
    with pytest.raises(UserError) as err:
        frozen_d_parameters(Discriminator(1, 16), n)
    assert str(err.value) == (
        f"--freeze-d {n} is beyond D's depth: D has 4 blocks before its output layer; freeze 0 "
        "(none) to 4"
    )


def test_frozen_parameters_stay_as_they_were_through_a_step_and_the_rest_train():
    torch.manual_seed(0)
    D = Discriminator(1, 16, dropout=0.0)
    frozen = frozen_d_parameters(D, 2)
    for p in frozen:
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in D.named_parameters()}
    opt = torch.optim.Adam(D.parameters(), lr=1e-2)
    D(torch.randn(8, 1, 16, 16)).square().mean().backward()
    opt.step()
    kept = {n for n, p in D.named_parameters() if torch.equal(p, before[n])}
    names = {id(p): n for n, p in D.named_parameters()}
    assert kept == {names[id(p)] for p in frozen} and len(kept) == 6
