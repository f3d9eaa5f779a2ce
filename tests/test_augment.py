"""--augment (DiffAugment) and --augment-p auto (ADA): the augmentations themselves, and what they
keep of every contract: per-class streams (the same on 1 or 5 ranks, fused or alone), exact
resume (p too), cgan's label maps untouched, data-parallel replicas equal."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import events, run_cli, tiny_args

from distcgan.cli import main
from distcgan.run.checkpoint import read
from distcgan.train.augment import CUTOUT, DRAWS, adapt, augment, draw

ALL = ("color", "translation", "cutout")
AUG = ("--augment", "color,translation,cutout")


def _draws(n: int, p: float = 1.0, seed: int = 0) -> torch.Tensor:
    return draw(torch.Generator().manual_seed(seed), n, p)


def test_an_image_not_drawn_for_any_augmentation_is_left_exactly_as_it_was():
    x = torch.rand(6, 3, 16, 16) * 2 - 1
    assert torch.equal(augment(x, _draws(6, p=0.0)[0], ALL), x)
    mixed = _draws(6, p=0.5, seed=3)[0]
    out = augment(x, mixed, ALL)
    for i in range(6):
        untouched = not mixed[i, 7:].any()
        assert torch.equal(out[i], x[i]) == bool(untouched), i


def test_translation_moves_the_image_by_whole_pixels_and_shifts_in_zeros():
    x = torch.zeros(1, 1, 16, 16)
    x[0, 0, 8, 8] = 1.0
    d = torch.zeros(1, DRAWS)
    d[0, 3], d[0, 4], d[0, 8] = 0.99, 0.0, 1.0  # dy +2 (of at most 16/8), dx -2, gated
    out = augment(x, d, ("translation",))
    assert out[0, 0, 10, 6] == 1.0 and out.sum() == 1.0
    edge = torch.ones(1, 1, 16, 16)
    assert augment(edge, d, ("translation",))[0, 0, :2].abs().sum() == 0  # zeros shifted in


def test_cutout_zeroes_a_square_of_half_the_side():
    d = torch.zeros(1, DRAWS)
    d[0, 5], d[0, 6], d[0, 9] = 0.5, 0.5, 1.0  # centred, gated
    out = augment(torch.ones(1, 1, 16, 16), d, ("cutout",))
    side = int(16 * CUTOUT)
    assert (out == 0).sum() == side * side and out[0, 0, 4:12, 4:12].abs().sum() == 0


def test_colour_is_brightness_saturation_and_contrast_and_gradients_flow():
    x = (torch.rand(4, 3, 16, 16) * 2 - 1).requires_grad_()
    d = _draws(4)
    out = augment(x, d[0], ("color",))
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    only_brightness = d[0].clone()
    only_brightness[:, 1], only_brightness[:, 2] = 0.5, 0.5  # saturation x1, contrast x1
    shifted = augment(x.detach(), only_brightness, ("color",))
    want = x.detach() + (only_brightness[:, 0] - 0.5)[:, None, None, None]
    torch.testing.assert_close(shifted, want)


def test_a_fused_batch_augments_each_class_with_its_own_draws():
    # Fused: class k's images are channels [k*C, (k+1)*C) and its draws rows [k*B, (k+1)*B).
    b, f, c = 4, 3, 1
    x = torch.rand(b, f * c, 16, 16) * 2 - 1
    per_class = [_draws(b, seed=k)[0] for k in range(f)]
    fused = augment(x, torch.cat(per_class), ALL)
    for k in range(f):
        alone = augment(x[:, k * c : (k + 1) * c], per_class[k], ALL)
        assert torch.equal(fused[:, k * c : (k + 1) * c], alone), k


def test_ada_moves_p_towards_the_target_at_its_speed_and_keeps_it_a_probability():
    assert adapt(0.0, 0.9, 1000, 0.6, 10) == pytest.approx(0.1)  # D too sure: more augmentation
    assert adapt(0.5, 0.2, 1000, 0.6, 10) == pytest.approx(0.4)
    assert adapt(0.95, 1.0, 1000, 0.6, 10) == 1.0 and adapt(0.05, -1.0, 1000, 0.6, 10) == 0.0
    assert adapt(0.3, 0.6, 1000, 0.6, 10) == 0.3


def test_an_augmented_run_trains_logs_p_and_resumes_exactly(tmp_path, digits_file):
    # ADA with a fast p (10 images from 0 to 1): p moves, is logged, and a run stopped at step 4
    # and resumed ends with the weights, the p and the stream of one that never stopped.
    common = ("--classes", "4", *AUG, "--augment-p", "auto", "--augment-kimg", "0.01")
    common += ("--checkpoint-every", "4", "--log-every", "2", "--devices", "cpu", "--threads", "1")
    straight, halves, plain = tmp_path / "straight", tmp_path / "halves", tmp_path / "plain"
    assert main(tiny_args(digits_file, straight, *common, "--steps", "8")) == 0
    assert main(tiny_args(digits_file, halves, *common, "--steps", "4")) == 0
    assert main(["train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress"]) == 0
    assert (
        main(tiny_args(digits_file, plain, "--classes", "4", "--steps", "8", "--devices", "cpu"))
        == 0
    )
    a, b = (read(r / "class_004" / "checkpoint.pt") for r in (straight, halves))
    for net in ("G", "D"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)
    assert a["augment_p"] == b["augment_p"] and torch.equal(
        a["rng"]["augment"], b["rng"]["augment"]
    )
    lines = [
        json.loads(x) for x in (straight / "class_004" / "metrics.jsonl").read_text().splitlines()
    ]
    ps = [m["augment_p"] for m in lines]
    assert ps[0] == 0.0 and len(set(ps)) > 1 and all(0.0 <= p <= 1.0 for p in ps)
    c = read(plain / "class_004" / "checkpoint.pt")
    assert not torch.equal(a["G"]["l1.weight"], c["G"]["l1.weight"])  # augmentation took place


def test_a_stop_between_log_steps_resumes_the_interval_that_steers_p(tmp_path, digits_file):
    # The scheduler's SIGTERM in step 7 of a rank alone, between the log steps 4 and 8: the stop's
    # checkpoint keeps the interval's sums, so the resumed run logs step 8 over steps 5-8 and
    # moves ADA's p by those 4 steps' images and D's sign, as the straight run does (before, it
    # adapted p from step 8 alone: another p, and other weights from then on).
    common = ("--classes", "4", *AUG, "--augment-p", "auto", "--augment-kimg", "0.2")
    common += ("--augment-target", "0.05", "--log-every", "4", "--checkpoint-every", "4")
    common += ("--steps", "12", "--devices", "cpu", "--threads", "1")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    first = run_cli(*tiny_args(digits_file, stopped, *common, "--inject-fault", "term:4:6"))
    assert first.returncode == 75, first.stderr
    (event,) = [e for e in events(first.stdout) if e["event"] == "class_interrupted"]
    assert event["step"] == 7 and event["checkpoint"] is True, event
    assert read(stopped / "class_004" / "checkpoint.pt")["interval"]["steps"] == 3
    resumed = run_cli("train", "--run", str(stopped), "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert run_cli(*tiny_args(digits_file, straight, *common)).returncode == 0

    def logged(run):
        lines = (run / "class_004" / "metrics.jsonl").read_text().splitlines()
        timeless = (json.loads(x) for x in lines)
        return [{k: v for k, v in m.items() if "time" not in k and "_s" not in k} for m in timeless]

    want = logged(straight)
    assert [m["step"] for m in want] == [4, 8, 12] and len({m["augment_p"] for m in want}) == 3
    assert logged(stopped) == want  # every loss and p, the interval across the stop included
    a, b = (read(r / "class_004" / "checkpoint.pt") for r in (straight, stopped))
    assert a["augment_p"] == b["augment_p"] > 0.0 and "interval" not in b
    for net in ("G", "D"):
        assert all(torch.equal(a[net][key], b[net][key]) for key in a[net]), net


EXACT_RUN = "--d-dropout 0 --no-channels-last --threads 1 --devices cpu".split()


def test_a_fused_class_draws_the_augmentations_it_draws_alone(tmp_path, digits_file):
    # The arithmetic in which fused and alone round alike (oneDNN off, contiguous, no dropout:
    # tests/test_fused.py): with augmentation on, each class ends with its weights alone.
    args = ("--classes", "0", "1", "2", *AUG, "--augment-p", "0.7", *EXACT_RUN)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.backends.mkldnn.flags(enabled=False):
            assert main(tiny_args(digits_file, tmp_path / "alone", *args, "--fuse", "1")) == 0
            assert main(tiny_args(digits_file, tmp_path / "fused", *args, "--fuse", "3")) == 0
    finally:
        torch.set_num_threads(threads)
    for k in range(3):
        a, b = (read(tmp_path / r / f"class_{k:03d}" / "checkpoint.pt") for r in ("alone", "fused"))
        assert torch.equal(a["rng"]["augment"], b["rng"]["augment"])  # the same draws taken
        for net in ("G", "D"):
            for key, want in a[net].items():
                if want.is_floating_point():
                    scale = want.abs().max().item() or 1.0
                    assert (b[net][key] - want).abs().max().item() <= 1e-5 * scale, (k, net, key)


def test_cgan_label_maps_reach_d_unaugmented(tmp_path, digits_file, monkeypatch):
    # D's first layer sees C image channels then K one-hot label maps: the maps are joined after
    # the augmentation, so each is a constant 0 or 1 whatever the translation and cutout did.
    from distcgan.train.models import Discriminator

    seen = []
    original = Discriminator.forward

    def keep(module, inputs, output):
        if not inputs[0].is_meta:  # the memory estimate runs D on the meta device first
            seen.append(inputs[0].detach())

    def spy(self, img, labels=None):
        handle = self.model[0].register_forward_hook(keep)
        try:
            return original(self, img, labels)
        finally:
            handle.remove()

    monkeypatch.setattr(Discriminator, "forward", spy)
    args = ("--mode", "cgan", "--classes", "0", "1", "2", *AUG, "--steps", "2", "--devices", "cpu")
    assert main(tiny_args(digits_file, tmp_path / "run", *args)) == 0
    assert seen
    for x in seen:
        maps = x[:, 1:]  # 1 image channel, then 10 label maps
        assert maps.shape[1] == 10
        assert set(maps.unique().tolist()) <= {0.0, 1.0}
        assert torch.equal(maps, maps[:, :, :1, :1].expand_as(maps))  # constant per map
        assert (maps.sum(1) == 1).all()  # one-hot


@pytest.mark.mpi
@pytest.mark.launcher_neutral
def test_a_class_augments_the_same_on_one_rank_or_five(tmp_path, digits_file):
    extra = (*AUG, "--augment-p", "0.5", "--threads", "1", "--devices", "cpu")
    alone, five = tmp_path / "alone", tmp_path / "five"
    r1 = run_cli(*tiny_args(digits_file, alone, "--classes", "3", *extra))
    r5 = run_cli(
        *tiny_args(digits_file, five, "--classes", "0", "1", "2", "3", "4", *extra), ranks=5
    )
    assert r1.returncode == 0 and r5.returncode == 0, r1.stderr + r5.stderr
    a, b = (read(r / "class_003" / "checkpoint.pt") for r in (alone, five))
    for key in a["G"]:
        assert torch.equal(a["G"][key], b["G"][key]), key
    assert torch.equal(a["rng"]["augment"], b["rng"]["augment"])


@pytest.mark.mpi
@pytest.mark.launcher_neutral
@pytest.mark.parametrize("mode", ["gan", "cgan"])
def test_a_data_parallel_group_augments_its_batch_as_one(mode, tmp_path, digits_file):
    run = tmp_path / "run"
    args = ("--mode", mode, "--classes", "0", "1", "2", "--steps", "5", *AUG, "--augment-p", "auto")
    result = run_cli(*tiny_args(digits_file, run, *args, "--devices", "cpu"), ranks=2)
    assert result.returncode == 0, result.stderr
    replicas = [e for e in events(result.stdout) if e["event"] == "replica"]
    assert len(replicas) == 2 and len({(r["g_sha256"], r["d_sha256"]) for r in replicas}) == 1
    lines = (run / "all" / "metrics.jsonl").read_text().splitlines()
    assert all("augment_p" in json.loads(x) for x in lines)
